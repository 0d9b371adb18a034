"""`floe topics create|list|describe|delete`: topic admin straight on the metastore.

Works with or without a running agent (agents pick up changes within a second).
The metastore URL defaults to the one `floe dev` uses (``./floe-data/meta.db``),
or ``FLOE_METASTORE``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from metastore import Metastore


def ensure_sqlite_dir(url: str) -> None:
    """SQLite creates the file but not its directory; do that for the user."""
    if url.startswith("sqlite") and ":///" in url:
        path = url.split(":///", 1)[1].split("?", 1)[0]
        if path and path != ":memory:":
            Path(path).parent.mkdir(parents=True, exist_ok=True)


def _default_metastore() -> str:
    return os.environ.get("FLOE_METASTORE") or f"sqlite:///{Path('floe-data').resolve() / 'meta.db'}"


async def open_or_report(url: str) -> Metastore | None:
    """The metastore at ``url``, or None after telling the user why not (password masked)."""
    from metastore import MetastoreError, open_metastore
    from metastore.redact import redact_text, redact_url

    try:
        return await open_metastore(url)
    except MetastoreError as e:
        print(f"floe: cannot open the metastore at {redact_url(url)}: {redact_text(str(e), url)}", file=sys.stderr)
        return None


def add_topics_parser(sub: Any) -> None:
    topics = sub.add_parser("topics", help="create, list, describe and delete topics")
    topics.add_argument("--metastore", default=None, help="metastore URL (default: floe dev's ./floe-data/meta.db)")
    tsub = topics.add_subparsers(dest="topics_command", required=True)
    c = tsub.add_parser("create", help="create a topic")
    c.add_argument("name")
    c.add_argument("--partitions", "-p", type=int, default=1)
    c.add_argument("--config", "-c", action="append", default=[], metavar="KEY=VALUE", help="topic config (repeatable)")
    tsub.add_parser("list", help="list topics")
    d = tsub.add_parser("describe", help="show partitions, offsets and configs of a topic")
    d.add_argument("name")
    x = tsub.add_parser("delete", help="delete a topic")
    x.add_argument("name")


async def _topics(args: argparse.Namespace) -> int:
    from metastore import LATEST_TIMESTAMP, ErrorCode

    url = args.metastore or _default_metastore()
    ensure_sqlite_dir(url)
    meta = await open_or_report(url)
    if meta is None:
        return 1
    try:
        cmd = args.topics_command
        if cmd == "create":
            config: dict[str, str] = {}
            for kv in args.config:
                if "=" not in kv:
                    print(f"floe: --config wants KEY=VALUE, got {kv!r}", file=sys.stderr)
                    return 2
                k, v = kv.split("=", 1)
                config[k] = v
            res = await meta.create_topic(args.name, args.partitions, config)
            if res.error != ErrorCode.NONE:
                print(f"floe: cannot create {args.name!r}: {res.error.name} {res.message or ''}", file=sys.stderr)
                return 1
            print(f"created topic {args.name} with {args.partitions} partition(s)")
        elif cmd == "list":
            for t in sorted(await meta.list_topics(), key=lambda t: t.name):
                print(f"{t.name}\t{t.partitions}")
        elif cmd == "describe":
            info = await meta.get_topic(args.name)
            if info is None:
                print(f"floe: no topic {args.name!r}", file=sys.stderr)
                return 1
            parts = []
            for p in range(info.partitions):
                lo = await meta.list_offsets(info.id, p, -2)
                hi = await meta.list_offsets(info.id, p, LATEST_TIMESTAMP)
                parts.append({"partition": p, "log_start_offset": lo.offset, "high_watermark": hi.offset})
            print(json.dumps({"name": info.name, "id": str(info.id), "partitions": parts, "config": info.config}, indent=2))
        elif cmd == "delete":
            res = await meta.delete_topic(args.name)
            if res.error != ErrorCode.NONE:
                print(f"floe: cannot delete {args.name!r}: {res.error.name} {res.message or ''}", file=sys.stderr)
                return 1
            print(f"deleted topic {args.name}")
        return 0
    finally:
        await meta.close()


def run_topics(args: argparse.Namespace) -> int:
    import logging

    logging.getLogger("alembic").setLevel(logging.WARNING)
    return asyncio.run(_topics(args))
