"""Agent CPU per GB produced, at width, in process (issue 41, deliverable 2).

    python -m loadtest.produce_cpu [--gb 0.1] [--shapes wide,narrow] [--profile N]
        [--objects memory://] [--window 64]
    python -m loadtest.produce_cpu --shapes java6 --journal 3 [--rate 5] [--seconds 20]

Where it sits: a focused companion of :mod:`loadtest.reqcost` for the produce
path's per-batch costs. It starts an agent in THIS process (its own thread and
event loop, SQLite metastore in a temp dir, ``memory://`` objects unless
``--objects`` says otherwise, as tests/fixtures/agent.py does) and drives it
from a spawned process with raw, pre-encoded, pipelined Produce v9 requests, so
the load generator costs the agent nothing. Two request shapes, both of 1 KiB
records, non-idempotent (librdkafka's default):

- ``wide``: what librdkafka sends at 1,000 partitions: 100 partitions per
  request, ONE record per batch (so every per-batch cost is paid per KiB);
- ``narrow``: what it sends at 16 partitions: all 16 in each request, 64
  records per batch.

For each it reports the agent's CPU seconds per GB of record values
(``time.process_time`` of this process over the measured run: the agent's
event loop plus its SQLite and upload threads; the main thread only waits),
the loop thread's share, and the ratio wide / narrow. ``--profile N`` prints
the top N functions (by own time) of a cProfile of the agent's event-loop
thread during each shape.

The journal path (issue 40): ``--journal N`` gives the agent a journal tier of N
``file://`` buckets under the S3 Express latency profile, quorum 2, and the
standard store ``file://`` under S3 Standard's, as ``loadtest run --backend dev
--journal N --store-latency s3-standard`` builds them
(:func:`loadtest.services.journal_buckets`). The ``java6`` shape is what a Java
producer with default settings sends to a 6-partition topic: every request holds
one ~16 KiB batch (16 records of 1 KiB) for each of the 6 partitions, at most 5
requests in flight, PACED at ``--rate`` MB/s (default 5) for ``--seconds``, so the
agent seals journal objects at the cadence of the real run rather than as fast as
it can. Non-idempotent (the pre-encoded batches cannot carry fresh sequences), so
the commit writes no producer entries, which the Java default would. For it the
report adds the journal objects, metastore commits and consolidations per second
and the CPU per journal object.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import io
import json
import multiprocessing as mp
import os
import pstats
import socket
import tempfile
import threading
import time
from concurrent.futures import Future
from pathlib import Path
from typing import Any

SHAPES = {"wide": (1000, 100, 1), "narrow": (16, 16, 64)}  # partitions, per request, records/batch


def frames(topic: str, partitions: int, per_request: int, records: int, size: int) -> list[bytes]:
    """Encoded Produce v9 requests (acks=-1) of one shape (:data:`SHAPES`)."""
    from loadtest.reqcost import produce_frames

    return produce_frames(topic, partitions, per_request, records, size)


def drive(port: int, fr: list[bytes], n: int, window: int, q: Any) -> None:
    """Send ``n`` requests from ``fr`` round-robin, ``window`` in flight; put the
    number of partition errors seen on ``q``."""
    from loadtest.reqcost import pipeline

    s = socket.create_connection(("127.0.0.1", port))
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    errors = pipeline(s, fr, n, window)
    s.close()
    q.put(errors)


def _driver(port: int, shape: tuple[int, int, int], topic: str, size: int, plan: list[int],
            window: int, q: Any, go: Any) -> None:
    """Child process: encode once, then one run per entry of ``plan`` (warm-up, measured)."""
    fr = frames(topic, *shape, size)
    q.put("ready")
    for n in plan:
        go.get()
        drive(port, fr, n, window, q)


class InProcessAgent:
    """An agent on its own thread and loop (as tests/fixtures/agent.py starts one)."""

    def __init__(self, data_dir: Path, objects: str, **overrides: Any) -> None:
        from agent.broker import Broker
        from agent.config import AgentConfig
        from agent.server import AgentServer

        kw: dict[str, Any] = {
            "host": "127.0.0.1", "port": 0, "admin_port": 0, "cluster_id": "produce-cpu",
            "metastore": f"sqlite:///{data_dir / 'meta.db'}", "objects": objects,
        }
        kw.update(overrides)
        config = AgentConfig(**kw)
        try:
            import uvloop

            self.loop: asyncio.AbstractEventLoop = uvloop.new_event_loop()
        except ImportError:  # pragma: no cover
            self.loop = asyncio.new_event_loop()
        started: Future[Any] = Future()

        def run() -> None:
            asyncio.set_event_loop(self.loop)
            self.tid = threading.get_native_id()

            async def boot() -> None:
                try:
                    server = AgentServer(await Broker.open(config))
                    await server.start()
                    started.set_result(server)
                except BaseException as e:
                    started.set_exception(e)

            tasks = [self.loop.create_task(boot())]
            self.loop.run_forever()
            tasks.clear()
            self.loop.close()

        self.thread = threading.Thread(target=run, name="floe-agent", daemon=True)
        self.thread.start()
        self.server = started.result(60)

    def call(self, coro: Any, timeout: float = 60) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def on_loop(self, fn: Any) -> None:
        """Run ``fn`` on the loop thread and wait for it."""
        done: Future[None] = Future()

        def run() -> None:
            fn()
            done.set_result(None)

        self.loop.call_soon_threadsafe(run)
        done.result(30)

    def loop_cpu(self) -> float:
        """utime + stime of the event-loop thread (from /proc)."""
        from loadtest.proc import stat_fields

        f = stat_fields(f"{os.getpid()}/task/{self.tid}")
        return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")

    @staticmethod
    def threads_cpu() -> dict[str, float]:
        """utime + stime of every thread of this process, by thread name (/proc)."""
        from loadtest.proc import stat_fields

        names = {t.native_id: t.name for t in threading.enumerate()}
        out: dict[str, float] = {}
        for tid in os.listdir(f"/proc/{os.getpid()}/task"):
            try:
                f = stat_fields(f"{os.getpid()}/task/{tid}")
            except OSError:
                continue
            name = names.get(int(tid), "other")
            out[name] = out.get(name, 0.0) + (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")
        return out

    def stop(self) -> None:
        asyncio.run_coroutine_threadsafe(self.server.close(), self.loop).result(30)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(30)


def measure(agent: InProcessAgent, name: str, size: int, gb: float, window: int,
            profile: int) -> dict[str, Any]:
    parts, per, records = SHAPES[name]
    topic = f"cpu-{name}"
    res = agent.call(agent.server.broker.meta.create_topic(topic, parts))
    assert not getattr(res, "error", 0), res
    per_req_bytes = per * records * size
    n = max(1, int(gb * 1e9 / per_req_bytes))
    warm = max(2 * parts // per, 200)
    ctx = mp.get_context("spawn")
    q, go = ctx.Queue(), ctx.Queue()
    p = ctx.Process(target=_driver, args=(agent.server.port, SHAPES[name], topic, size, [warm, n],
                                          window, q, go))
    p.start()
    assert q.get(timeout=300) == "ready"
    go.put(1)
    warm_errors = q.get(timeout=600)
    # Timed by each thread's own CPU clock: wall time would charge whatever runs when
    # the other threads (SQLite writer, executor) hold the GIL.
    prof = cProfile.Profile(time.thread_time) if profile else None
    commit_prof = cProfile.Profile(time.thread_time) if profile else None
    if prof is not None:
        agent.on_loop(prof.enable)
        _profile_commits(commit_prof)
    c0, l0, t0 = time.process_time(), agent.loop_cpu(), agent.threads_cpu()
    go.put(1)
    errors = q.get(timeout=1800)
    c1, l1, t1 = time.process_time(), agent.loop_cpu(), agent.threads_cpu()
    if prof is not None:
        agent.on_loop(prof.disable)
        _profile_commits(None)
    p.join(60)
    total_gb = n * per_req_bytes / 1e9
    out: dict[str, Any] = {
        "shape": name, "partitions": parts, "batches_per_request": per, "records_per_batch": records,
        "requests": n, "gb": round(total_gb, 4), "errors": warm_errors + errors,
        "cpu_s": round(c1 - c0, 2), "cpu_s_per_gb": round((c1 - c0) / total_gb, 1),
        "loop_cpu_s_per_gb": round((l1 - l0) / total_gb, 1),
        "us_per_batch": round((c1 - c0) / (n * per) * 1e6, 2),
        "threads_cpu_s": {k: round(v - t0.get(k, 0.0), 2) for k, v in t1.items() if v - t0.get(k, 0.0) > 0.01},
    }
    if prof is not None and commit_prof is not None:
        if os.environ.get("PRODUCE_CPU_PSTATS"):  # for print_callers and friends
            prof.dump_stats(f"{os.environ['PRODUCE_CPU_PSTATS']}.{name}.loop")
            commit_prof.dump_stats(f"{os.environ['PRODUCE_CPU_PSTATS']}.{name}.commit")
        s = io.StringIO()
        pstats.Stats(prof, stream=s).sort_stats("tottime").print_stats(profile)
        s.write("--- the SQLite group commit (writer thread) ---\n")
        pstats.Stats(commit_prof, stream=s).sort_stats("tottime").print_stats(profile)
        out["profile"] = s.getvalue()
    return out


_ORIGINAL_COMMIT: Any = None


def _profile_commits(prof: cProfile.Profile | None) -> None:
    """Run metastore.log's SQLite group commit (on the writer thread) under ``prof``;
    ``None`` puts the original back."""
    import metastore.log as log

    global _ORIGINAL_COMMIT
    if _ORIGINAL_COMMIT is None:
        _ORIGINAL_COMMIT = log.sqlite_commit
    if prof is None:
        log.sqlite_commit = _ORIGINAL_COMMIT
        return
    original = _ORIGINAL_COMMIT
    log.sqlite_commit = lambda *a: prof.runcall(original, *a)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m loadtest.produce_cpu", description=__doc__.split("\n\n")[0])
    p.add_argument("--gb", type=float, default=0.1, help="GB of record values per shape")
    p.add_argument("--size", type=int, default=1024, help="record value bytes")
    p.add_argument("--shapes", default="wide,narrow")
    p.add_argument("--window", type=int, default=64, help="requests in flight")
    p.add_argument("--objects", default="memory://")
    p.add_argument("--profile", type=int, default=0, help="print the top N of a cProfile of the loop")
    p.add_argument("--journal", type=int, default=0, help="a journal tier of N file:// buckets")
    p.add_argument("--rate", type=float, default=5.0, help="MB/s of a paced shape (java6)")
    p.add_argument("--seconds", type=float, default=20.0, help="measured seconds of a paced shape")
    p.add_argument("--tmp", default=None, help="where the metastore and file:// buckets go (e.g. /dev/shm:"
                   " no file system cost in the numbers; default: the temp dir, as loadtest run)")
    p.add_argument("--agent-opt", action="append", default=[], metavar="FIELD=VALUE",
                   help="an AgentConfig field for the agent (e.g. consolidate_interval_ms=600000)")
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="produce-cpu-", dir=args.tmp) as d:
        objects = args.objects if args.objects != "file://" else f"file://{d}/objects"
        overrides: dict[str, Any] = {}
        if args.journal:
            from loadtest.services import journal_buckets
            from objectstore.latency import with_latency

            if args.objects == "memory://":  # as loadtest run --backend dev --store-latency s3-standard
                objects = with_latency(f"file://{d}/objects", "s3-standard")
            urls, _, _ = journal_buckets(Path(d), args.journal)
            os.environ.setdefault("FLOE_SQLITE_SYNCHRONOUS", "NORMAL")  # as floe dev sets it
            overrides = {"journal": ",".join(urls), "journal_quorum": min(2, args.journal)}
        overrides.update(o.split("=", 1) for o in args.agent_opt)
        agent = InProcessAgent(Path(d), objects, **overrides)
        try:
            from loadtest.produce_paced import PACED, measure_paced

            rows = [measure_paced(agent, s, args.size, args.seconds, args.rate, args.profile)
                    if s in PACED else measure(agent, s, args.size, args.gb, args.window, args.profile)
                    for s in args.shapes.split(",")]
        finally:
            agent.stop()
    for r in rows:
        prof = r.pop("profile", None)
        print(json.dumps(r))
        if prof:
            print(prof)
    by = {r["shape"]: r for r in rows}
    if "wide" in by and "narrow" in by:
        ratio = by["wide"]["cpu_s_per_gb"] / by["narrow"]["cpu_s_per_gb"]
        print(json.dumps({"ratio_wide_narrow": round(ratio, 2), "load_avg": os.getloadavg()}))
    else:
        print(json.dumps({"load_avg": os.getloadavg()}))


if __name__ == "__main__":
    main()
