"""`floe metastore serve|migrate`: the metastore as its own service.

``serve`` opens the metastore at ``--metastore`` (Postgres for real; migrated
first unless ``--no-migrate``) and serves it over HTTP (:mod:`metastore.service`)
on ``--host``/``--port``; agents then use ``--metastore http://host:port`` and
need no database credentials. Every call must carry the metastore credential
``FLOE_METASTORE_TOKEN`` (or the legacy ``FLOE_INTERNAL_TOKEN``) as
``Authorization: Bearer``; ACL and SCRAM changes and SCRAM listings need
``FLOE_METASTORE_ADMIN_TOKEN`` (``floe users`` / ``floe acls``); without any, ``serve``
refuses to start unless ``--host`` is a loopback address (then only local
callers are served). With ``--tls-cert``/``--tls-key`` (env
``FLOE_METASTORE_TLS_CERT``/``FLOE_METASTORE_TLS_KEY``) it serves HTTPS only and
clients use ``https://host:port``, verifying it against ``FLOE_METASTORE_CA``. ``migrate`` brings the schema to the newest
revision and exits.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import ssl
import sys
from contextlib import suppress
from typing import Any

_METASTORE_HELP = "database URL: postgresql://... or sqlite:///path (env FLOE_METASTORE)"


def _add_common(p: argparse.ArgumentParser, *, after_subcommand: bool) -> None:
    """``--metastore`` and ``--log-level``, on ``floe metastore`` and on each subcommand.

    Both orders work (``floe metastore --metastore URL migrate`` and
    ``floe metastore migrate --metastore URL``, as the docs show it). A subcommand's
    parser writes its defaults over the namespace its parent filled in, so there the
    options default to SUPPRESS: absent after the subcommand, the value given before
    it (or the parent's default) stays.
    """
    p.add_argument(
        "--metastore",
        default=argparse.SUPPRESS if after_subcommand else None,
        help=_METASTORE_HELP,
    )
    p.add_argument("--log-level", default=argparse.SUPPRESS if after_subcommand else "INFO")


def add_metastore_parser(sub: Any) -> None:
    p = sub.add_parser("metastore", help="serve the metastore over HTTP, or migrate its schema")
    _add_common(p, after_subcommand=False)
    msub = p.add_subparsers(dest="metastore_command", required=True)
    serve = msub.add_parser(
        "serve", help="serve the metastore over HTTP (agents use --metastore http://host:port)"
    )
    _add_common(serve, after_subcommand=True)
    serve.add_argument("--host", default="0.0.0.0")
    serve.add_argument("--port", type=int, default=9180)
    serve.add_argument(
        "--batch-window-ms",
        type=float,
        default=0.0,
        help="also wait this long for more commits to join a group (default 0: a group is "
        "what arrived while the previous one committed)",
    )
    serve.add_argument("--pool-size", type=int, default=10, help="database connections")
    serve.add_argument(
        "--max-request-bytes",
        type=int,
        default=16 * 1024 * 1024,
        help="largest request body accepted (413 above; default 16 MiB)",
    )
    serve.add_argument("--no-migrate", action="store_true", help="do not migrate the schema first")
    serve.add_argument(
        "--tls-cert",
        default=os.environ.get("FLOE_METASTORE_TLS_CERT", ""),
        help="PEM certificate (chain): serve HTTPS only, clients use https://host:port and verify it"
        " against FLOE_METASTORE_CA (env FLOE_METASTORE_TLS_CERT; reloaded when the file changes)",
    )
    serve.add_argument(
        "--tls-key",
        default=os.environ.get("FLOE_METASTORE_TLS_KEY", ""),
        help="PEM private key of --tls-cert (env FLOE_METASTORE_TLS_KEY)",
    )
    migrate = msub.add_parser("migrate", help="bring the schema to the newest revision")
    _add_common(migrate, after_subcommand=True)


def _url(args: argparse.Namespace) -> str:
    url = args.metastore or os.environ.get("FLOE_METASTORE")
    if not url:
        raise SystemExit("floe metastore: --metastore (or FLOE_METASTORE) is required")
    if url.startswith(("http://", "https://")):
        raise SystemExit(
            "floe metastore: --metastore must be a database URL, not a served metastore"
        )
    return url


async def _serve(args: argparse.Namespace, url: str) -> None:
    from metastore import open_metastore
    from metastore.internal_auth import (
        ADMIN_ENV,
        METASTORE_ENV,
        env_token,
        metastore_token,
        require_token_or_loopback,
    )
    from metastore.service import ServerTls, serve

    # The agents' credential (FLOE_METASTORE_TOKEN, else the legacy FLOE_INTERNAL_TOKEN)
    # and the admin one (FLOE_METASTORE_ADMIN_TOKEN: ACL/SCRAM changes), issue 42.
    token = metastore_token(env_token(METASTORE_ENV), env_token())
    admin_token = env_token(ADMIN_ENV)
    require_token_or_loopback(
        token or admin_token, args.host, "floe metastore serve", f"{METASTORE_ENV} (or the legacy FLOE_INTERNAL_TOKEN)"
    )
    if bool(args.tls_cert) != bool(args.tls_key):
        raise SystemExit("floe metastore serve: --tls-cert and --tls-key go together")
    # Loaded before the database is opened: a wrong path or a key that does not match
    # the certificate fails the start with the reason, not the first client's handshake.
    try:
        tls = ServerTls(args.tls_cert, args.tls_key, what="metastore service: TLS") if args.tls_cert else None
    except (OSError, ssl.SSLError) as e:
        raise SystemExit(f"floe metastore serve: cannot load --tls-cert/--tls-key: {e}") from e
    meta = await open_metastore(url, auto_migrate=not args.no_migrate, pool_size=args.pool_size)
    runner, port, service = await serve(
        meta,
        args.host,
        args.port,
        batch_window_ms=args.batch_window_ms,
        token=token,
        admin_token=admin_token,
        max_request_bytes=args.max_request_bytes,
        tls=tls,
    )
    scheme = "https" if tls is not None else "http"
    print(f"floe metastore serving {url.split('@')[-1]} on {scheme}://{args.host}:{port}", flush=True)
    # The agent's runtime tuning (issue 13): a group commit of 1,000-partition objects
    # allocates ~10 objects per batch (16,000 batches a group), and with CPython's
    # default GC threshold the collections they trigger re-scanned the heap several
    # times per group (issue 18: the results of a 16-object group took longer to build
    # than its COPY took the server).
    from agent.server import tune_runtime

    tune_runtime()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop.set)
    try:
        await stop.wait()
    finally:
        await runner.cleanup()
        await service.close()
        await meta.close()


def run_metastore(args: argparse.Namespace) -> int:
    logging.basicConfig(
        level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    logging.getLogger("alembic").setLevel(logging.WARNING)
    url = _url(args)
    if args.metastore_command == "migrate":
        from metastore import migrate

        asyncio.run(migrate(url))
        print("metastore schema is up to date", flush=True)
        return 0
    try:
        asyncio.run(_serve(args, url))
    except KeyboardInterrupt:
        pass
    except Exception as e:
        print(f"floe metastore: {e}", file=sys.stderr)
        return 1
    return 0
