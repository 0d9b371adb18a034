"""`floe doctor`: check a configuration end to end, one line per check.

Takes the same flags and ``FLOE_*`` variables as ``floe agent`` and checks, in
order: the configuration parses; the metastore answers; its schema is at this
release's migration head; the object store's bucket (or directory) exists; a
probe object can be written and deleted (under ``_health/``); the Kafka and
admin ports are free to bind. Each check prints ``ok`` or ``FAIL`` and one line
saying what is wrong; the exit status is 1 when any check failed. Every network
step has a deadline (``--timeout``, default 5 s), so a black-holed endpoint
cannot hang the command.
"""

from __future__ import annotations

import argparse
import asyncio
import socket
import sys
import uuid
from collections.abc import Awaitable
from typing import Any, TypeVar

T = TypeVar("T")


def add_doctor_parser(sub: Any, agent_flags: Any) -> None:
    p = sub.add_parser("doctor", help="check a configuration end to end (metastore, schema, bucket, listeners)")
    agent_flags(p)
    p.add_argument("--timeout", type=float, default=5.0, help="deadline of each network check in seconds")


def _one_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return text[0][:300] if text and text[0] else type(e).__name__


async def _deadline(aw: Awaitable[T], timeout: float) -> T:  # noqa: ASYNC109
    try:
        return await asyncio.wait_for(aw, timeout)
    except TimeoutError:
        raise TimeoutError(f"no answer within {timeout:g} s") from None


async def _checks(kw: dict[str, Any], timeout: float) -> list[tuple[str, bool, str]]:  # noqa: ASYNC109
    from agent.config import AgentConfig
    from metastore import open_metastore
    from objectstore import open_object_store

    out: list[tuple[str, bool, str]] = []
    try:
        cfg = AgentConfig(**kw)
    except Exception as e:
        return [("config", False, _one_line(e))]
    out.append(("config", True, f"agent id {cfg.agent_id}, cluster id {cfg.cluster_id or '(from the metastore)'}"))

    meta = None
    meta_ok = False
    try:
        meta = await _deadline(open_metastore(cfg.metastore, auto_migrate=False), timeout)
        try:
            await _deadline(meta.live_agents(0), timeout)
            schema = True
        except Exception as e:
            if not _no_schema(e):
                raise
            schema = False  # reachable; the migrations line says what to run
        out.append(("metastore", True, "reachable" if schema else "reachable (no Floe schema yet)"))
        meta_ok = True
        if schema:
            out.append(await _cluster_id_check(meta, cfg.cluster_id, timeout))
    except Exception as e:
        out.append(("metastore", False, f"cannot use the metastore: {_one_line(e)}"))
    finally:
        if meta is not None:
            await meta.close()
    if meta_ok and "://" in cfg.metastore and not cfg.metastore.startswith(("http://", "https://")):
        from metastore.migrate import current_revision, head_revision

        try:
            cur, head = await _deadline(current_revision(cfg.metastore), timeout), head_revision()
            if cur == head:
                out.append(("migrations", True, f"schema at {head}"))
            else:
                at = f"schema at {cur}" if cur else "no schema"
                out.append(("migrations", False, f"{at}, this release needs {head}: run `floe metastore migrate`"))
        except Exception as e:
            out.append(("migrations", False, _one_line(e)))

    store = None
    try:
        store = open_object_store(cfg.objects)
        async for _obj in await _deadline(_first(store), timeout):
            break
        out.append(("bucket", True, f"{cfg.objects.split('?')[0]} exists"))
        key = f"_health/doctor-{uuid.uuid4().hex[:12]}"
        try:
            await _deadline(store.put(key, b"floe doctor"), timeout)
            await _deadline(store.delete_many([key]), timeout)
            out.append(("write", True, "a probe object was written and deleted"))
        except Exception as e:
            out.append(("write", False, f"cannot write to {cfg.objects.split('?')[0]}: {_one_line(e)}"))
    except Exception as e:
        out.append(("bucket", False, f"cannot list {cfg.objects.split('?')[0]}: {_one_line(e)}"))
    finally:
        if store is not None:
            await store.close()

    for name, port in (("kafka listener", cfg.port), ("admin listener", cfg.admin_port)):
        if not port:
            continue
        try:
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
                s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                s.bind((cfg.host, port))
            out.append((name, True, f"{cfg.host}:{port} is free"))
        except OSError as e:
            out.append((name, False, f"cannot bind {cfg.host}:{port}: {e.strerror or e} (another process uses it?)"))
    return out


def _no_schema(e: BaseException) -> bool:
    """A query failed because Floe's tables do not exist (Postgres or SQLite wording)."""
    text = str(e)
    return "does not exist" in text or "no such table" in text


async def _cluster_id_check(meta: Any, configured: str, timeout: float) -> tuple[str, bool, str]:  # noqa: ASYNC109
    """The configured cluster id against the one the metastore holds (read only)."""
    try:
        stored = await _deadline(meta.claim_cluster_id(None), timeout)
    except Exception as e:  # e.g. a schema before migration 0008: the migrations line says so
        return ("cluster id", False, f"cannot read the stored cluster id: {_one_line(e)}")
    if stored is None and not configured:
        return ("cluster id", False, "none configured and none stored: set FLOE_CLUSTER_ID (or --cluster-id)")
    if stored is not None and configured and stored != configured:
        return ("cluster id", False, f"configured {configured!r} but the metastore holds {stored!r}")
    if stored is None:
        return ("cluster id", True, f"{configured} (stored by the first agent to start)")
    return ("cluster id", True, f"{stored} (stored in the metastore)")


async def _first(store: Any) -> Any:
    """An iterator over the store's listing, its first page already requested."""
    it = store.list("_health/").__aiter__()
    first = [obj async for obj in _take(it, 1)]

    async def gen() -> Any:
        for o in first:
            yield o

    return gen()


async def _take(it: Any, n: int) -> Any:
    for _ in range(n):
        try:
            yield await it.__anext__()
        except StopAsyncIteration:
            return


def run_doctor(args: argparse.Namespace, kw: dict[str, Any]) -> int:
    results = asyncio.run(_checks(kw, args.timeout))
    for name, ok, detail in results:
        print(f"{'ok  ' if ok else 'FAIL'} {name}: {detail}")
    failed = [n for n, ok, _ in results if not ok]
    if failed:
        print(f"floe doctor: {len(failed)} problem(s): {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0
