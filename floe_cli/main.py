"""The `floe` command line: parses arguments and wires the parts together.

No part of Floe imports this package; it is the only place that knows about
all of them.

    floe dev                 # everything in one process on embedded defaults (+ compactor)
    floe agent --metastore postgresql://... --objects s3://bucket/prefix?endpoint=...
    floe version
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any


def floe_version() -> str:
    try:
        return version("floe")
    except PackageNotFoundError:  # running from a source tree without install
        return "0.0.0+unknown"


def _agent_flags(p: argparse.ArgumentParser, workers_default: str = "auto") -> None:
    p.add_argument("--host", help="bind address (env FLOE_HOST, default 0.0.0.0)")
    p.add_argument("--port", type=int, help="Kafka port (env FLOE_PORT, default 9092)")
    p.add_argument("--advertised-host", help="host clients connect to (env FLOE_ADVERTISED_HOST)")
    p.add_argument("--advertised-port", type=int, help="port clients connect to (env FLOE_ADVERTISED_PORT)")
    p.add_argument(
        "--metastore",
        help="metastore URL: sqlite:///path, postgresql://..., or http(s)://host:port for"
        " `floe metastore serve` (env FLOE_METASTORE)",
    )
    p.add_argument("--objects", help="object store URL: file:///dir, s3://bucket/prefix, memory:// (env FLOE_OBJECTS)")
    p.add_argument(
        "--journal",
        help="journal tier: comma-separated object store URLs, one per journal bucket (env FLOE_JOURNAL);"
        " produce is acknowledged once a small journal object is on --journal-quorum of them",
    )
    p.add_argument("--journal-quorum", type=int, help="journal buckets an object must reach (env FLOE_JOURNAL_QUORUM, default 2)")
    p.add_argument("--zone", help="availability zone (env FLOE_ZONE)")
    p.add_argument(
        "--agent-id", help="unique, stable id of this agent; its Kafka node id derives from it (env FLOE_AGENT_ID)"
    )
    p.add_argument(
        "--peer-address",
        help="private host[:port] peers reach this agent's admin HTTP on (env FLOE_PEER_ADDRESS; default: discovered)",
    )
    p.add_argument("--cluster-id", help="cluster id reported to clients (env FLOE_CLUSTER_ID)")
    p.add_argument("--admin-port", type=int, help="HTTP port for /metrics and /healthz (env FLOE_ADMIN_PORT)")
    p.add_argument("--flush-interval-ms", type=int, help="segment flush interval (env FLOE_FLUSH_INTERVAL_MS)")
    p.add_argument(
        "--flush-min-interval-ms", type=int,
        help="adaptive sealing lower bound (env FLOE_FLUSH_MIN_INTERVAL_MS; >= flush interval: fixed)",
    )
    p.add_argument("--flush-bytes", type=int, help="segment flush size (env FLOE_FLUSH_BYTES)")
    p.add_argument(
        "--virtual-brokers", type=int,
        help="Kafka node ids each agent process is listed as (env FLOE_VIRTUAL_BROKERS; equal on every agent)",
    )
    p.add_argument(
        "--workers", default=os.environ.get("FLOE_WORKERS", workers_default),
        help="agent processes sharing the Kafka port (SO_REUSEPORT), each a full agent in the ring;"
             " 'auto': one per CPU (1 with --port 0 or with several listeners)"
             f" (env FLOE_WORKERS, default {workers_default})",
    )
    p.add_argument(
        "--worker-port-base", type=int, default=os.environ.get("FLOE_WORKER_PORT_BASE") or "0",
        help="with --workers N: worker i binds its own Kafka port at BASE+i, for firewall rules"
             " (env FLOE_WORKER_PORT_BASE; default 0: any free port)",
    )
    p.add_argument(
        "--auto-create-topics", dest="auto_create_topics", action="store_true", default=None,
        help="create unknown topics on Metadata/Produce (env FLOE_AUTO_CREATE_TOPICS; floe dev: on, floe agent: off)",
    )
    p.add_argument(
        "--no-auto-create-topics", dest="auto_create_topics", action="store_false", help="refuse unknown topics"
    )
    p.add_argument("--admin-host", help="bind address of the admin HTTP port (env FLOE_ADMIN_HOST, default: --host)")
    p.add_argument("--log-level", default="INFO")


# `floe dev`'s cluster id; `floe agent` must be given one (stored in the metastore).
DEV_CLUSTER_ID = "floe-dev-cluster"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="floe", description="Floe: a diskless Kafka on object storage")
    parser.add_argument("--version", action="version", version=f"floe {floe_version()}")
    parser.add_argument(
        "--debug", action="store_true", help="show tracebacks of failures (env FLOE_DEBUG=1); default: one line"
    )
    sub = parser.add_subparsers(dest="command")
    sub.add_parser("version", help="print the version")
    dev = sub.add_parser(
        "dev", help="run everything in one process on embedded defaults (SQLite, ./floe-data, port 9092)"
    )
    dev.add_argument(
        "--data-dir", default="floe-data", help="where the SQLite metastore and objects live (default ./floe-data)"
    )
    _agent_flags(dev)
    dev.add_argument(
        "--no-compactor", action="store_true",
        help="do not run the compactor (merges, retention, Parquet, Iceberg) in this process",
    )
    dev.add_argument(
        "--compactor-interval-ms", type=int,
        default=int(os.environ.get("FLOE_COMPACTOR_INTERVAL_MS", "10000")),
        help="pause between compactor passes (env FLOE_COMPACTOR_INTERVAL_MS, default 10000)",
    )
    dev.add_argument("--sasl", action="store_true", help="also a SASL_PLAINTEXT listener (port+1) with a printed dev user")
    dev.add_argument("--tls", action="store_true", help="also an SSL listener (port+2; with --sasl SASL_SSL on port+3), self-signed cert in --data-dir")
    agent = sub.add_parser("agent", help="run one agent")
    _agent_flags(agent)
    from floe_cli.topics import add_topics_parser

    add_topics_parser(sub)
    from floe_cli.groups import add_groups_parser

    add_groups_parser(sub)
    from floe_cli.users import add_users_parser

    add_users_parser(sub)
    from floe_cli.compactor_cmd import add_compactor_parser

    add_compactor_parser(sub)
    from floe_cli.metastore_cmd import add_metastore_parser

    add_metastore_parser(sub)
    from floe_cli.doctor import add_doctor_parser

    add_doctor_parser(sub, _agent_flags)
    return parser


def _config_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    kw: dict[str, Any] = {
        "host": args.host,
        "port": args.port,
        "advertised_host": args.advertised_host,
        "advertised_port": args.advertised_port,
        "metastore": args.metastore,
        "objects": args.objects,
        "journal": args.journal,
        "journal_quorum": args.journal_quorum,
        "zone": args.zone,
        "agent_id": args.agent_id,
        "peer_address": args.peer_address,
        "cluster_id": args.cluster_id,
        "admin_port": args.admin_port,
        "admin_host": args.admin_host,
        "flush_interval_ms": args.flush_interval_ms,
        "flush_min_interval_ms": args.flush_min_interval_ms,
        "flush_bytes": args.flush_bytes,
        "virtual_brokers": args.virtual_brokers,
    }
    if args.auto_create_topics is not None:
        kw["auto_create_topics"] = args.auto_create_topics
    return {k: v for k, v in kw.items() if v is not None}


def _run(kw: dict[str, Any], log_level: str) -> int:
    from agent.config import AgentConfig
    from agent.server import run_agent

    logging.basicConfig(level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("alembic").setLevel(logging.WARNING)
    from floe_cli.topics import ensure_sqlite_dir

    try:
        config = AgentConfig(**kw)
    except Exception as e:  # pydantic ValidationError: say what is wrong, no traceback
        print(f"floe: invalid configuration: {e}", file=sys.stderr)
        return 2
    ensure_sqlite_dir(config.metastore)
    try:
        import uvloop

        runner: Any = uvloop.run
    except ImportError:  # pragma: no cover - uvloop is a dependency on Linux
        runner = asyncio.run
    from agent.broker import ClusterIdError
    from agent.cluster.membership import DuplicateAgentError

    try:
        runner(run_agent(config))
    except KeyboardInterrupt:
        pass
    except (DuplicateAgentError, ClusterIdError) as e:
        print(f"floe: {e}", file=sys.stderr)
        return 1
    return 0


# floe dev's shutdown: how long its compactor may take to stop after the agents have.
COMPACTOR_STOP_S = 2.0


def _exit_within(seconds: float) -> None:
    """Exit (status 1) ``seconds`` from now if the process is still there: the
    interpreter's exit joins executor threads a stuck compactor pass may hold."""
    import threading

    timer = threading.Timer(seconds, os._exit, (1,))
    timer.daemon = True
    timer.start()


def _workers(args: argparse.Namespace, kw: dict[str, Any]) -> int:
    w = str(args.workers)
    if w == "auto":
        # Workers share a fixed port; with --port 0 (any free port) there is nothing to
        # share, and only one listener can be shared.
        listeners = [x for x in str(kw.get("listeners") or os.environ.get("FLOE_LISTENERS") or "").split(",") if x.strip()]
        if len(listeners) > 1:
            return 1
        port = listeners[0].rpartition(":")[2].strip() if listeners else kw.get("port", os.environ.get("FLOE_PORT") or 9092)
        try:
            return 1 if int(port or 0) == 0 else (os.cpu_count() or 1)
        except ValueError:
            return 1  # a malformed listener: one agent says what is wrong
    try:
        n = int(w)
    except ValueError:
        raise SystemExit(f"floe: --workers must be a number or 'auto', got {w!r}") from None
    if n < 1:
        raise SystemExit("floe: --workers must be >= 1")
    return n


def _run_or_supervise(args: argparse.Namespace, kw: dict[str, Any]) -> int:
    n = _workers(args, kw)
    if n > 1:
        from agent.config import AgentConfig

        try:
            config = AgentConfig(**kw)  # say what is wrong once, not from every worker
        except Exception as e:
            print(f"floe: invalid configuration: {e}", file=sys.stderr)
            return 2
        from floe_cli.topics import ensure_sqlite_dir
        from floe_cli.workers import run_workers, shared_listener

        ensure_sqlite_dir(config.metastore)
        kw["port"] = config.port  # flag, FLOE_PORT or the default: the port the workers share
        if config.listeners.strip():
            try:
                kw["listeners"], kw["port"] = shared_listener(config)
            except ValueError as e:
                print(f"floe: --workers {n}: {e}", file=sys.stderr)
                return 2
        return run_workers(kw, n, args.log_level, port_base=args.worker_port_base)
    return _run(kw, args.log_level)


def describe_error(e: BaseException) -> str:
    """One line for an operator: the innermost cause's type and first line."""
    root = e
    while root.__cause__ is not None or (root.__context__ is not None and not root.__suppress_context__):
        root = root.__cause__ or root.__context__  # type: ignore[assignment]
    lines = [str(x).strip().splitlines() for x in (e, root)]
    text = lines[0][0] if lines[0] else ""
    if root is not e and lines[1] and lines[1][0] not in text:
        text = f"{text}: {lines[1][0]}" if text else lines[1][0]
    return f"{type(root).__name__}: {text[:400]}" if text else type(root).__name__


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in argv  # accepted anywhere on the line
    args = build_parser().parse_args([a for a in argv if a != "--debug"])
    args.debug = debug
    try:
        return _dispatch(args)
    except KeyboardInterrupt:
        return 130
    except Exception as e:  # connection and configuration failures: one line, no traceback
        if args.debug or os.environ.get("FLOE_DEBUG"):
            raise
        print(f"floe {args.command}: {describe_error(e)} (--debug shows the traceback)", file=sys.stderr)
        return 1


# Secrets delivered as environment (ECS injects Secrets Manager values that way)
# whose content the agent reads from a file: PEM variable -> the FLOE_* path it goes to.
PEM_SECRETS = (
    ("TLS_CERT_PEM", "FLOE_SSL_CERTFILE"),
    ("TLS_KEY_PEM", "FLOE_SSL_KEYFILE"),
    ("TLS_CA_PEM", "FLOE_SSL_CAFILE"),
)


def write_pem_secrets(environ: dict[str, str] | None = None) -> list[str]:
    """Write each PEM secret present in the environment to the file its FLOE_*
    variable names (mode 0600 in a 0700 directory); the paths written."""
    env = os.environ if environ is None else environ
    written = []
    for pem_var, path_var in PEM_SECRETS:
        pem, path = env.get(pem_var, ""), env.get(path_var, "")
        if not pem or not path:
            continue
        target = Path(path)
        target.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        tmp = target.with_name(f".{target.name}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(pem if pem.endswith("\n") else pem + "\n")
        os.replace(tmp, target)  # atomic: a reloading listener never sees half a file
        written.append(str(target))
    return written


def _dispatch(args: argparse.Namespace) -> int:
    if args.command in (None, "version"):
        print(f"floe {floe_version()}")
        return 0
    kw = _config_kwargs(args) if args.command in ("dev", "agent") else {}
    if args.command in ("dev", "agent"):
        write_pem_secrets()
    if args.command == "dev":
        data = Path(args.data_dir).resolve()
        (data / "objects").mkdir(parents=True, exist_ok=True)
        kw.setdefault("metastore", f"sqlite:///{data / 'meta.db'}")
        kw.setdefault("objects", f"file://{data / 'objects'}")
        kw.setdefault("host", "127.0.0.1")
        kw.setdefault("admin_port", 9644)
        if not os.environ.get("FLOE_CLUSTER_ID"):
            kw.setdefault("cluster_id", DEV_CLUSTER_ID)
        # Trying it out: SQLite may lose the last commits on a power failure (not on
        # a crash); floe agent keeps synchronous=FULL (metastore.engine).
        os.environ.setdefault("FLOE_SQLITE_SYNCHRONOUS", "NORMAL")
        if not os.environ.get("FLOE_AUTO_CREATE_TOPICS"):
            kw.setdefault("auto_create_topics", True)  # floe dev: on; floe agent: off
        if args.sasl or args.tls:
            from floe_cli.dev_security import dev_security

            for line in dev_security(kw, data, sasl=args.sasl, tls=args.tls):
                print(line, flush=True)
            args.workers = "1"  # extra listeners are per process
        if args.no_compactor:
            return _run_or_supervise(args, kw)
        from floe_cli.dev_compactor import DevCompactor
        from floe_cli.topics import ensure_sqlite_dir

        ensure_sqlite_dir(kw["metastore"])
        compactor = DevCompactor(
            kw["metastore"], kw["objects"], args.compactor_interval_ms,
            os.environ.get("FLOE_ICEBERG_CATALOG", ""),
            journal=kw.get("journal") or os.environ.get("FLOE_JOURNAL", ""),
            journal_quorum=kw.get("journal_quorum") or int(os.environ.get("FLOE_JOURNAL_QUORUM", "2")),
        ).start()
        try:
            return _run_or_supervise(args, kw)
        finally:
            # Bounded (issue 43): the compactor is crash-safe (every step a metastore
            # compare-and-swap, orphans collected), so a pass still running is left to
            # die with its daemon thread; the interpreter's exit may not wait on it either.
            _exit_within(COMPACTOR_STOP_S + 1)
            compactor.stop(COMPACTOR_STOP_S)
    if args.command == "agent":
        return _run_or_supervise(args, kw)
    if args.command == "topics":
        from floe_cli.topics import run_topics

        return run_topics(args)
    if args.command == "groups":
        from floe_cli.groups import run_groups

        return run_groups(args)
    if args.command == "users":
        from floe_cli.users import run_users

        return run_users(args)
    if args.command == "compactor":
        from floe_cli.compactor_cmd import run_compactor

        return run_compactor(args)
    if args.command == "doctor":
        from floe_cli.doctor import run_doctor

        return run_doctor(args, _config_kwargs(args))
    if args.command == "metastore":
        from floe_cli.metastore_cmd import run_metastore

        return run_metastore(args)
    return 2


if __name__ == "__main__":
    sys.exit(main())
