"""`floe doctor`: check a configuration end to end, one line per check.

Takes the same flags and ``FLOE_*`` variables as ``floe agent`` and checks, in
order: the configuration parses; the metastore answers; its schema is at this
release's migration head; the object store's bucket (or directory) exists; a
probe object can be written and deleted (under ``_health/``); then the security
the agent will run with (floe_cli.doctor_security): every configured listener
and the admin port are free to bind; with TLS listeners, the certificate and key
exist, parse, match and are not expired (WARN within 14 days); with SASL
listeners, the mechanisms and that someone can log in with them (PLAIN users,
SCRAM users in the metastore, a reachable JWKS); the internal tokens where a
served or shared metastore needs them. Each check prints ``ok``, ``WARN`` or
``FAIL`` and one line saying what is wrong; the exit status is 1 when any check
failed (warnings do not fail). Every network step has a deadline (``--timeout``,
env ``FLOE_DOCTOR_TIMEOUT``, default 15 s: long enough for a busy host or a
cross-region database, short enough that a black-holed endpoint cannot hang the
command). URLs and messages are printed without passwords.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import uuid
from collections.abc import Awaitable
from typing import Any, TypeVar

from floe_cli.doctor_security import FAIL, OK, Check

T = TypeVar("T")
DEFAULT_TIMEOUT_S = 15.0


def _seconds(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be > 0 seconds, got {text!r}")
    return value


def add_doctor_parser(sub: Any, agent_flags: Any) -> None:
    p = sub.add_parser(
        "doctor", help="check a configuration end to end (metastore, schema, bucket, listeners, TLS, SASL, tokens)"
    )
    agent_flags(p)
    p.add_argument(
        "--timeout", type=_seconds, default=os.environ.get("FLOE_DOCTOR_TIMEOUT", str(DEFAULT_TIMEOUT_S)),
        help=f"deadline of each network check in seconds (env FLOE_DOCTOR_TIMEOUT, default {DEFAULT_TIMEOUT_S:g})",
    )  # fmt: skip


def _one_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return text[0][:300] if text and text[0] else type(e).__name__


async def _deadline(aw: Awaitable[T], timeout: float) -> T:  # noqa: ASYNC109
    try:
        return await asyncio.wait_for(aw, timeout)
    except TimeoutError:
        raise TimeoutError(f"no answer within {timeout:g} s") from None


async def _checks(kw: dict[str, Any], timeout: float) -> list[Check]:  # noqa: ASYNC109
    from agent.config import AgentConfig
    from floe_cli import doctor_security as sec
    from metastore import open_metastore
    from metastore.internal_auth import metastore_token
    from metastore.redact import redact_text, redact_url
    from objectstore import open_object_store

    out: list[Check] = []
    try:
        cfg = AgentConfig(**kw)
    except Exception as e:
        return [("config", FAIL, redact_text(_one_line(e), kw.get("metastore", "")))]
    out.append(("config", OK, f"agent id {cfg.agent_id}, cluster id {cfg.cluster_id or '(from the metastore)'}"))

    def clean(e: BaseException) -> str:  # a driver's message may quote the URL it was given
        return redact_text(_one_line(e), cfg.metastore, cfg.objects)

    meta = None
    meta_ok = schema = False
    sasl: list[Check] = []
    try:
        meta = await _deadline(
            open_metastore(cfg.metastore, auto_migrate=False,
                           internal_token=metastore_token(cfg.metastore_token, cfg.internal_token) or None,
                           admin_token=cfg.metastore_admin_token or None),
            timeout,
        )  # fmt: skip
        try:
            await _deadline(meta.live_agents(0), timeout)
            schema = True
        except Exception as e:
            if not _no_schema(e):
                raise
            schema = False  # reachable; the migrations line says what to run
        out.append(("metastore", OK, "reachable" if schema else "reachable (no Floe schema yet)"))
        meta_ok = True
        if schema:
            out.append(await _cluster_id_check(meta, cfg.cluster_id, timeout))
        sasl = await sec.sasl_checks(cfg, meta if schema else None, timeout)  # SCRAM users live there
    except Exception as e:
        out.append(("metastore", FAIL, f"cannot use the metastore at {redact_url(cfg.metastore)}: {clean(e)}"))
        sasl = await sec.sasl_checks(cfg, None, timeout)
    finally:
        if meta is not None:
            await meta.close()
    if meta_ok and "://" in cfg.metastore and not cfg.metastore.startswith(("http://", "https://")):
        from metastore.migrate import current_revision, head_revision

        try:
            cur, head = await _deadline(current_revision(cfg.metastore), timeout), head_revision()
            if cur == head:
                out.append(("migrations", OK, f"schema at {head}"))
            else:
                at = f"schema at {cur}" if cur else "no schema"
                out.append(("migrations", FAIL, f"{at}, this release needs {head}: run `floe metastore migrate`"))
        except Exception as e:
            out.append(("migrations", FAIL, clean(e)))

    store = None
    where = redact_url(cfg.objects.split("?")[0])
    try:
        store = open_object_store(cfg.objects)
        async for _obj in await _deadline(_first(store), timeout):
            break
        out.append(("bucket", OK, f"{where} exists"))
        key = f"_health/doctor-{uuid.uuid4().hex[:12]}"
        try:
            await _deadline(store.put(key, b"floe doctor"), timeout)
            await _deadline(store.delete_many([key]), timeout)
            out.append(("write", OK, "a probe object was written and deleted"))
        except Exception as e:
            out.append(("write", FAIL, f"cannot write to {where}: {clean(e)}"))
    except Exception as e:
        out.append(("bucket", FAIL, f"cannot list {where}: {clean(e)}"))
    finally:
        if store is not None:
            await store.close()

    out += sec.listener_checks(cfg)
    out += sec.tls_checks(cfg)
    out += sasl
    out += await sec.jwks_check(cfg, timeout)
    out += sec.token_checks(cfg)
    return out


def _no_schema(e: BaseException) -> bool:
    """A query failed because Floe's tables do not exist (Postgres or SQLite wording)."""
    text = str(e)
    return "does not exist" in text or "no such table" in text


async def _cluster_id_check(meta: Any, configured: str, timeout: float) -> Check:  # noqa: ASYNC109
    """The configured cluster id against the one the metastore holds (read only)."""
    try:
        stored = await _deadline(meta.claim_cluster_id(None), timeout)
    except Exception as e:  # e.g. a schema before migration 0008: the migrations line says so
        return ("cluster id", FAIL, f"cannot read the stored cluster id: {_one_line(e)}")
    if stored is None and not configured:
        return ("cluster id", FAIL, "none configured and none stored: set FLOE_CLUSTER_ID (or --cluster-id)")
    if stored is not None and configured and stored != configured:
        return ("cluster id", FAIL, f"configured {configured!r} but the metastore holds {stored!r}")
    if stored is None:
        return ("cluster id", OK, f"{configured} (stored by the first agent to start)")
    return ("cluster id", OK, f"{stored} (stored in the metastore)")


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
    for name, status, detail in results:
        print(f"{status:<4} {name}: {detail}")
    failed = [n for n, status, _ in results if status == FAIL]
    if failed:
        print(f"floe doctor: {len(failed)} problem(s): {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0
