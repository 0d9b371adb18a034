"""`floe groups list|describe`: consumer groups straight from the metastore.

``list`` prints one line per group: id, type (classic, consumer or share), state;
for KIP-848 consumer groups the group epoch, members and lag
(:mod:`floe_cli.consumer_groups`); for share groups the records in flight (acquired + available between the
share-partition start and end offsets) and archived in flight. ``describe``
prints JSON: a classic group's committed offsets with lag, a consumer group's
epochs, members with their current and target assignments and offsets with lag, a share group's
share partitions (start offset, end offset, records per state, lag). Works with
or without a running agent; the metastore URL as for ``floe topics``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from typing import Any

from floe_cli.topics import _default_metastore


def add_groups_parser(sub: Any) -> None:
    groups = sub.add_parser("groups", help="list and describe consumer and share groups")
    groups.add_argument("--metastore", default=None, help="metastore URL (default: floe dev's ./floe-data/meta.db)")
    gsub = groups.add_subparsers(dest="groups_command", required=True)
    gsub.add_parser("list", help="list groups with their type, state and in-flight counts")
    d = gsub.add_parser("describe", help="offsets and lag (classic) or share-partition state (share) of a group")
    d.add_argument("group")


async def share_partitions(meta: Any, group_id: str) -> list[dict[str, Any]]:
    from agent.groups.share import partition as sp

    out = []
    names: dict[Any, str] = {}
    for st in await meta.share_partitions_load(group_id):
        if st.topic_id not in names:
            info = await meta.get_topic(st.topic_id)
            names[st.topic_id] = info.name if info else str(st.topic_id)
        hwm = {p.partition: p.high_watermark for p in await meta.partition_offsets(st.topic_id)}
        c = sp.counts(st)
        done = c[sp.ACKNOWLEDGED] + c[sp.ARCHIVED]
        out.append(
            {
                "topic": names[st.topic_id],
                "partition": st.partition,
                "start_offset": st.start_offset,
                "end_offset": st.end_offset,
                "available": c[sp.AVAILABLE],
                "acquired": c[sp.ACQUIRED],
                "acknowledged": c[sp.ACKNOWLEDGED],
                "archived": c[sp.ARCHIVED],
                "lag": max(0, hwm.get(st.partition, st.start_offset) - st.start_offset - done),
            }
        )
    return out


async def _groups(args: argparse.Namespace) -> int:
    from floe_cli.topics import open_or_report

    url = args.metastore or _default_metastore()
    meta = await open_or_report(url)
    if meta is None:
        return 1
    try:
        from floe_cli import consumer_groups

        share_ids = {g.group_id for g in await meta.share_groups_list()}
        consumer_ids = {g.group_id for g in await meta.list_consumer_groups()}
        if args.groups_command == "list":
            for g in await meta.list_groups():
                if g.group_id not in share_ids | consumer_ids:
                    print(f"{g.group_id}\tclassic\t{g.state}")
            for line in await consumer_groups.list_rows(meta):
                print(line)
            for gid in sorted(share_ids):
                parts = await share_partitions(meta, gid)
                inflight = sum(p["available"] + p["acquired"] for p in parts)
                archived = sum(p["archived"] for p in parts)
                print(f"{gid}\tshare\tin-flight={inflight}\tarchived={archived}\tpartitions={len(parts)}")
            return 0
        gid = args.group
        if gid in consumer_ids:
            print(json.dumps(await consumer_groups.describe(meta, gid), indent=2))
            return 0
        if gid in share_ids:
            print(json.dumps({"group": gid, "type": "share", "partitions": await share_partitions(meta, gid)}, indent=2))
            return 0
        offsets = await meta.fetch_offsets(gid)
        if not offsets and gid not in {g.group_id for g in await meta.list_groups()}:
            print(f"floe: no group {gid!r}", file=sys.stderr)
            return 1
        rows = []
        for o in offsets:
            info = await meta.get_topic(o.topic_id)
            hwm = {p.partition: p.high_watermark for p in await meta.partition_offsets(o.topic_id)}
            end = hwm.get(o.partition, o.offset)
            rows.append(
                {
                    "topic": info.name if info else str(o.topic_id),
                    "partition": o.partition,
                    "committed_offset": o.offset,
                    "lag": max(0, end - o.offset),
                }
            )
        print(json.dumps({"group": gid, "type": "classic", "offsets": rows}, indent=2))
        return 0
    finally:
        await meta.close()


def run_groups(args: argparse.Namespace) -> int:
    import logging

    logging.getLogger("alembic").setLevel(logging.WARNING)
    return asyncio.run(_groups(args))
