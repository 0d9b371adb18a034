"""`floe compactor run [--once] [--spark] [--dry-run-orphans]`: the compactor loop.

Opens the metastore and object store by URL (same flags and env as the agent:
``--metastore``/``FLOE_METASTORE``, ``--objects``/``FLOE_OBJECTS``; defaults
are `floe dev`'s ./floe-data), runs passes in-process, or with ``--spark`` hands
each phase's tasks to a PySpark job (``--spark-master``, default local[*]) and
commits from this process. Shows a rich progress bar per phase and a summary
per pass. ``floe compactor orphans`` lists (or deletes) unregistered objects.
Topics with ``floe.iceberg.enable=true`` are committed to the Iceberg catalog of
``--iceberg-catalog`` (default: the SQL catalog in the metastore's database).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
from pathlib import Path
from typing import Any


def add_compactor_parser(sub: Any) -> None:
    comp = sub.add_parser(
        "compactor", help="merge objects, enforce retention, write Parquet, collect garbage"
    )
    comp.add_argument(
        "--metastore", default=None, help="metastore URL (env FLOE_METASTORE; default ./floe-data)"
    )
    comp.add_argument(
        "--objects", default=None, help="object store URL (env FLOE_OBJECTS; default ./floe-data)"
    )
    comp.add_argument(
        "--journal", default=os.environ.get("FLOE_JOURNAL", ""),
        help="the agents' journal buckets, comma-separated URLs (env FLOE_JOURNAL): merges read"
        " and the GC deletes journal objects there",
    )
    comp.add_argument(
        "--journal-quorum", type=int, default=int(os.environ.get("FLOE_JOURNAL_QUORUM", "2")),
        help="as the agents' (env FLOE_JOURNAL_QUORUM, default 2)",
    )
    comp.add_argument("--log-level", default="WARNING")
    csub = comp.add_subparsers(dest="compactor_command", required=True)
    run = csub.add_parser("run", help="run compaction passes (a loop unless --once)")
    run.add_argument("--once", action="store_true", help="one pass, then exit")
    run.add_argument(
        "--deadline-s", type=float, default=float(os.environ.get("FLOE_COMPACTOR_DEADLINE_S", "900")),
        help="--once: give up (exit 1) when the pass has not finished after this long; the object"
        " store is probed first and must answer within --probe-timeout-s (env FLOE_COMPACTOR_DEADLINE_S, default 900)",
    )
    run.add_argument(
        "--probe-timeout-s", type=float, default=10.0,
        help="--once: the object store must answer a listing within this long before the pass starts (default 10)",
    )
    run.add_argument("--force", action="store_true", help="merge levels below their trigger too")
    run.add_argument("--spark", action="store_true", help="run the tasks as a PySpark job")
    run.add_argument("--spark-master", default="local[*]")
    run.add_argument("--interval-ms", type=int, default=None, help="pause between passes")
    run.add_argument("--l0-trigger", type=int, default=None)
    run.add_argument("--l1-trigger", type=int, default=None)
    run.add_argument("--delete-grace-ms", type=int, default=None)
    run.add_argument("--orphan-grace-ms", type=int, default=None)
    run.add_argument(
        "--metrics-port", type=int, default=None, help="serve Prometheus /metrics on this port"
    )
    run.add_argument(
        "--iceberg-catalog", default=os.environ.get("FLOE_ICEBERG_CATALOG", ""),
        help="Iceberg catalog of floe.iceberg.enable topics: '' or 'sql' (the metastore's own"
        " database), sql+<sqlalchemy url>, rest+https://host/path, glue://?region=... (env FLOE_ICEBERG_CATALOG)",
    )
    health = csub.add_parser(
        "health",
        help="exit 0 when the compactor serving --metrics-port made progress recently (a container health check)",
    )
    health.add_argument("--metrics-port", type=int, required=True, help="the running compactor's --metrics-port")
    health.add_argument(
        "--max-stall-s", type=float, default=1800.0,
        help="unhealthy when no task or pass finished for this long (default 1800)",
    )
    health.add_argument("--timeout-s", type=float, default=3.0)
    orph = csub.add_parser("orphans", help="objects no metastore row references (crashed uploads)")
    orph.add_argument(
        "--delete", action="store_true", help="delete them (default: dry run, list only)"
    )
    orph.add_argument("--grace-ms", type=int, default=3_600_000)
    sconf = csub.add_parser(
        "spark-conf",
        help="spark-submit/pyspark arguments that read the Iceberg tables through Spark's Iceberg catalog",
    )
    sconf.add_argument(
        "--spark-version", default="4.1.4",
        help="the Spark that will read (Iceberg publishes runtimes up to Spark 4.1; default 4.1.4)",
    )


def _urls(args: argparse.Namespace) -> tuple[str, str]:
    data = Path("floe-data").resolve()
    meta = args.metastore or os.environ.get("FLOE_METASTORE") or f"sqlite:///{data / 'meta.db'}"
    objects = args.objects or os.environ.get("FLOE_OBJECTS") or f"file://{data / 'objects'}"
    return meta, objects


async def _main(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.progress import Progress

    from compactor.config import CompactorConfig
    from compactor.gc import collect_orphans
    from compactor.runner import Compactor, PassSummary, TaskExecutor
    from floe_cli.topics import ensure_sqlite_dir, open_or_report
    from objectstore.journal import open_journaled_store, parse_journal_urls

    console = Console(stderr=True)
    meta_url, objects_url = _urls(args)
    ensure_sqlite_dir(meta_url)
    meta = await open_or_report(meta_url)
    if meta is None:
        return 1
    store = open_journaled_store(objects_url, parse_journal_urls(args.journal), quorum=args.journal_quorum)
    try:
        if args.compactor_command == "orphans":
            found = await collect_orphans(meta, store, args.grace_ms, dry_run=not args.delete)
            for o in found:
                print(f"{o.key}\t{o.size}\t{o.last_modified.isoformat()}")
            verb = "deleted" if args.delete else "found (dry run)"
            console.print(f"{len(found)} orphan(s) {verb}")
            return 0
        overrides = {
            "interval_ms": args.interval_ms,
            "l0_trigger": args.l0_trigger,
            "l1_trigger": args.l1_trigger,
            "delete_grace_ms": args.delete_grace_ms,
            "orphan_grace_ms": args.orphan_grace_ms,
        }
        try:
            cfg = CompactorConfig(**{k: v for k, v in overrides.items() if v is not None})
        except Exception as e:  # pydantic ValidationError: say what is wrong
            print(f"floe: invalid compactor configuration: {e}", file=sys.stderr)
            return 2
        if args.metrics_port is not None:
            from prometheus_client import start_http_server

            from compactor.metrics import REGISTRY

            start_http_server(args.metrics_port, registry=REGISTRY)
        executor: TaskExecutor | None = None
        if args.spark:
            from compactor.spark import SparkExecutor, local_spark_session

            executor = SparkExecutor(local_spark_session(args.spark_master), objects_url)
        with Progress(console=console, transient=True) as progress:
            bars: dict[str, Any] = {}

            def on_progress(phase: str, done: int, total: int) -> None:
                if phase not in bars:
                    bars[phase] = progress.add_task(phase, total=total)
                progress.update(bars[phase], completed=done, total=total)

            from compactor.iceberg import IcebergSync

            iceberg = IcebergSync.from_urls(meta, args.iceberg_catalog, meta_url, objects_url)
            comp = Compactor(
                meta, store, cfg, executor=executor, progress=on_progress, iceberg=iceberg
            )

            def report(s: PassSummary) -> None:
                for line in s.lines():
                    console.print(line)
                for task_id in bars.values():
                    progress.remove_task(task_id)
                bars.clear()

            if args.once:
                where = objects_url.split("?")[0]
                try:
                    await asyncio.wait_for(_probe(store), args.probe_timeout_s)
                except Exception as e:  # TimeoutError, or the store's last error after its retries
                    reason = str(e) or f"no answer within {args.probe_timeout_s:g} s"
                    print(f"floe compactor: object store {where} unreachable: {reason}", file=sys.stderr)
                    return 1
                try:
                    report(await asyncio.wait_for(comp.run_pass(force=args.force), args.deadline_s))
                except TimeoutError:
                    print(f"floe compactor: the pass did not finish within {args.deadline_s:g} s", file=sys.stderr)
                    return 1
                return 0
            await comp.run_forever(on_pass=report)
        return 0
    finally:
        await store.close()
        await meta.close()


async def _probe(store: Any) -> None:
    async for _obj in store.list("_health/"):
        break


def compactor_health(port: int, max_stall_s: float, timeout_s: float, now_s: float) -> tuple[bool, str]:
    """(healthy, one line) from the running compactor's /metrics on 127.0.0.1:``port``."""
    import urllib.request

    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=timeout_s) as r:
            text = r.read().decode()
    except OSError as e:
        return False, f"no compactor metrics on 127.0.0.1:{port}: {e}"
    for line in text.splitlines():
        if line.startswith("floe_compactor_last_progress_seconds "):
            stalled = now_s - float(line.split()[1])
            if stalled > max_stall_s:
                return False, f"no compactor progress for {stalled:.0f} s (limit {max_stall_s:g} s)"
            return True, f"last progress {stalled:.0f} s ago"
    return False, "the compactor's metrics have no floe_compactor_last_progress_seconds"


def print_spark_conf(args: argparse.Namespace) -> int:
    """``--packages`` and ``--conf`` arguments of the ``floe`` Iceberg catalog
    (:mod:`compactor.iceberg_spark`), one per line, for spark-submit/pyspark."""
    import shlex

    from compactor.iceberg_spark import spark_catalog_conf, spark_jars

    meta_url, objects_url = _urls(args)
    try:
        jars = spark_jars(args.spark_version, meta_url, objects_url)
        conf = spark_catalog_conf(meta_url, objects_url)
    except (LookupError, ValueError) as e:
        print(f"floe: {e}", file=sys.stderr)
        return 2
    print(f"--packages {','.join(jars)}")
    for k, v in conf.items():
        print(f"--conf {shlex.quote(f'{k}={v}')}")
    return 0


def run_compactor(args: argparse.Namespace) -> int:
    if args.compactor_command == "health":
        import time

        ok, line = compactor_health(args.metrics_port, args.max_stall_s, args.timeout_s, time.time())
        print(f"floe compactor: {line}", file=sys.stdout if ok else sys.stderr)
        return 0 if ok else 1
    if args.compactor_command == "spark-conf":
        return print_spark_conf(args)
    logging.basicConfig(
        level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    logging.getLogger("alembic").setLevel(logging.WARNING)
    try:
        return asyncio.run(_main(args))
    except KeyboardInterrupt:
        return 0
