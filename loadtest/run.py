"""``python -m loadtest run WORKLOAD.yaml``: an OMB-style run against Floe.

1. Start the backend (``dev``: SQLite + file store; ``postgres-s3``: private
   Postgres + moto S3; ``bootstrap=HOST:PORT``: nothing) and one agent process.
2. Measure the raw baselines of the same stores (before the load, so they do
   not compete with it): PUT/ranged GET, Postgres commit SQL, loopback TCP.
3. Create the topics, scrape the agent's /metrics, start consumer processes
   (explicit ``assign()``: a subscription is a set of consumers splitting the
   partitions between them; no group coordinator needed), then producer
   processes, open loop at ``producerRate``.
4. Show progress (rich), stop at warm-up + test duration, scrape /metrics
   again, write ``result.json`` (OMB field names, plus baselines, metric diffs,
   ratios and goals) and ``result.png``.

``--store-latency s3-standard`` (or the workload's ``storeLatency``) runs the
dev/postgres-s3 agent's object store under a simulated S3 latency profile
(:mod:`objectstore.latency`); the raw store baseline runs under the same
profile, and ``config.store_latency`` in every result names the profile and its
numbers (null: the store's own latency, e.g. a local disk or moto).
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing as mp
import os
import queue
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from loadtest import baselines as bl
from loadtest.driver import consumer_main, producer_main
from loadtest.proc import cpu_seconds, stat_fields
from loadtest.report import Collector, plot
from loadtest.services import Backend, diff, scrape_all, start_backend
from loadtest.slow_agent import SlowAgents
from loadtest.workload import Workload, load

MiB = 1 << 20
GiB = 1 << 30


def _create_topics(bootstrap: str, names: list[str], partitions: int) -> None:
    from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    # Kafka's controller refuses more than 10,000 records in one operation (a
    # 10,000-partition CreateTopics is one more): create half, then add the rest.
    first = min(partitions, 5000)
    for f in admin.create_topics([NewTopic(n, first) for n in names]).values():
        f.result(120)
    if first < partitions:
        for f in admin.create_partitions([NewPartitions(n, partitions) for n in names]).values():
            f.result(120)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        md = admin.list_topics(timeout=10)
        # Every partition with a leader: a Kafka broker answers "not leader" for a
        # moment after CreateTopics, while it becomes the leader of 1,000 partitions.
        if all(
            n in md.topics
            and len(md.topics[n].partitions) == partitions
            and all(p.leader >= 0 and p.error is None for p in md.topics[n].partitions.values())
            for n in names
        ):
            return
        time.sleep(0.1)
    raise RuntimeError("topics did not appear in metadata")


def _m(d: dict[str, float], name: str) -> float:
    return sum(v for k, v in d.items() if k == name or k.startswith(name + "{"))


def _hist_quantile(d: dict[str, float], name: str, q: float) -> float | None:
    """Upper bound (ms) of the bucket holding quantile ``q`` of a Prometheus histogram diff."""
    buckets = []
    for k, v in d.items():
        if k.startswith(name + "_bucket{"):
            bound = k.split('le="', 1)[1].split('"', 1)[0]
            buckets.append((math.inf if bound == "+Inf" else float(bound), v))
    buckets.sort()
    if not buckets or buckets[-1][1] <= 0:
        return None
    target = q * buckets[-1][1]
    for upper, count in buckets:
        if count >= target:
            return upper * 1000
    return None


def _cpu_seconds(pid: int) -> float | None:
    """utime + stime of a process, or None when it cannot be read (gone, not Linux)."""
    try:
        return cpu_seconds(pid)
    except (OSError, ValueError, IndexError):
        return None


def _postgres_cpu_seconds(backend: Backend) -> float | None:
    """CPU of a private Postgres: the postmaster, its live backends and the reaped
    ones (counted in the postmaster's cutime/cstime), from /proc (Linux)."""
    pg = backend.postgres
    if pg is None or getattr(pg, "tmp", None) is None:
        return None
    try:
        root = int((pg.data_dir / "postmaster.pid").read_text().split()[0])
        tick = os.sysconf("SC_CLK_TCK")
        total = 0
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                f = stat_fields(stat.parent.name)
            except OSError:
                continue
            pid = int(stat.parent.name)
            if pid == root:
                total += int(f[11]) + int(f[12]) + int(f[13]) + int(f[14])
            elif int(f[1]) == root:
                total += int(f[11]) + int(f[12])
        return total / tick
    except (OSError, ValueError, IndexError):
        return None


def _cpu_sum(pids: list[int]) -> float | None:
    vals = [_cpu_seconds(p) for p in pids]
    return sum(v for v in vals if v is not None) if pids and all(v is not None for v in vals) else None


# Public us-east-1 prices (aws.amazon.com/s3/pricing and the S3 FAQ's S3 Express One Zone
# examples, as of 2026): S3 Standard PUT $0.005 per 1,000; S3 Express One Zone PUT
# $0.00113 per 1,000 plus $0.0032 per GB uploaded. Journal storage (minutes per object at
# $0.11/GB-month) and inter-zone transfer are left out.
STANDARD_PUT_USD = 0.005 / 1000
EXPRESS_PUT_USD = 0.00113 / 1000
EXPRESS_UPLOAD_USD_PER_GB = 0.0032


def usd_per_gib(standard_puts_per_gib: float, journal_puts_per_gib: float, copies: float) -> float:
    """Request and upload dollars per GiB ingested: every journal copy of a GiB pays the
    Express upload fee (``copies``: journal PUTs per journal object, about N)."""
    usd = standard_puts_per_gib * STANDARD_PUT_USD + journal_puts_per_gib * EXPRESS_PUT_USD
    return round(usd + EXPRESS_UPLOAD_USD_PER_GB * (GiB / 1e9) * copies, 5)


def derive(result: dict[str, Any], cfg: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    d = result.get("agentMetrics", {}).get("diff", {})
    base = result.get("baselines", {})
    ratios: dict[str, Any] = {}
    puts = _m(d, "floe_object_puts_total")
    put_bytes = _m(d, "floe_object_put_bytes_total")
    commits = _m(d, "floe_metastore_commits_total")
    gets = _m(d, "floe_object_gets_total")
    produced = _m(d, "floe_produced_bytes_total")
    fetched = _m(d, "floe_fetched_bytes_total")
    raw_put = base.get("objectstore", {}).get("put", {})
    raw_get = base.get("objectstore", {}).get("get", {})
    raw_commit = base.get("metastore", {})
    if raw_put.get("MBps"):
        ratios["produce_MBps_over_raw_put_MBps"] = result["aggregatedPublishMBps"] / raw_put["MBps"]
    if raw_get.get("MBps"):
        ratios["consume_MBps_over_raw_get_MBps"] = result["aggregatedConsumeMBps"] / raw_get["MBps"]
    if puts:
        ratios["metastore_transactions_per_flushed_object"] = commits / puts
        ratios["avg_object_bytes"] = put_bytes / puts
    if produced:
        ratios["puts_per_GiB_produced"] = puts / (produced / GiB)
    if fetched:
        ratios["gets_per_GiB_consumed"] = gets / (fetched / GiB)
    if "loopback_tcp" in base and base["loopback_tcp"]["MBps"]:
        ratios["produce_MBps_over_loopback_MBps"] = (
            result["aggregatedPublishMBps"] / base["loopback_tcp"]["MBps"]
        )
    journal_objects = _m(d, "floe_journal_objects_total")
    journal_puts = sum(v for k, v in d.items() if k.startswith("floe_journal_puts_total{") and 'outcome="ok"' in k)
    if produced and (journal_objects or cfg.get("journal")):
        gib = produced / GiB
        ratios["journal_objects_per_GiB_produced"] = journal_objects / gib
        ratios["journal_puts_per_GiB_produced"] = journal_puts / gib
        ratios["journal_fallbacks"] = _m(d, "floe_journal_fallbacks_total")
    if produced:
        ratios["usd_per_GiB_ingested_requests"] = usd_per_gib(
            puts / (produced / GiB), journal_puts / (produced / GiB),
            journal_puts / journal_objects if journal_objects else 0.0,
        )
    ratios["agent_put_p99_ms_from_metrics"] = _hist_quantile(d, "floe_object_put_seconds", 0.99)
    ratios["agent_commit_p99_ms_from_metrics"] = _hist_quantile(
        d, "floe_metastore_commit_seconds", 0.99
    )
    goals: dict[str, Any] = {}
    if "produce_MBps_over_raw_put_MBps" in ratios:
        goals["throughput_ratio>=0.5"] = {
            "value": ratios["produce_MBps_over_raw_put_MBps"],
            "met": ratios["produce_MBps_over_raw_put_MBps"] >= 0.5,
            "note": "meaningful at max rate only",
        }
    if puts:
        # Group commit: several ready objects may share one transaction, never more.
        goals["at_most_one_transaction_per_object"] = {
            "value": commits / puts, "met": commits <= puts,
        }
    bound = cfg["flush_interval_ms"] + raw_put.get("p99_ms", 0.0) + raw_commit.get("p99_ms", 0.0) + 25
    p99 = result["aggregatedPublishLatency99pct"]
    goals["publish_p99<=flush+put_p99+commit_p99+25ms"] = {
        "value_ms": p99,
        "bound_ms": round(bound, 2),
        "met": bool(p99 <= bound),
        "note": "commit p99 term is 0 without a Postgres baseline (dev/sqlite)"
        if not raw_commit
        else "",
    }
    return ratios, goals


def _parse_store_stall(spec: str) -> tuple[float, float, float]:
    start, length, *period = spec.split(":")
    return float(start), float(length), float(period[0]) if period else 1e12


def _parse_stall(spec: str) -> tuple[int, float, float]:
    bucket, start, length = spec.split(":")
    return int(bucket), float(start), float(length)


def run(args: argparse.Namespace) -> dict[str, Any]:
    wl: Workload = load(args.workload)
    if args.idempotent:
        wl.idempotent_producer = True
    if args.duration_minutes is not None:
        wl.test_duration_minutes = args.duration_minutes
    if args.rate is not None:
        wl.producer_rate = args.rate
    if getattr(args, "store_latency", None) is not None:
        wl.store_latency = args.store_latency
        wl.validate()
    out_dir = Path(args.out or f"loadtest-results/{wl.name}-{args.backend.split('=')[0]}-{time.strftime('%Y%m%d-%H%M%S')}")
    out_dir.mkdir(parents=True, exist_ok=True)
    flush_ms = args.flush_interval_ms or 250
    min_ms = args.flush_min_interval_ms
    flush_bytes = args.flush_bytes or 8 * MiB
    cfg = {
        "backend": args.backend,
        "flush_interval_ms": flush_ms,
        "flush_min_interval_ms": min_ms,
        "flush_bytes": flush_bytes,
        "idempotent": (wl.idempotent_producer or bool(args.idempotent)
                       or (wl.producer_client == "java"
                           and str(wl.producer_config.get("enable.idempotence", "true")) == "true")),
        "producer_client": wl.producer_client,
        "consumer_client": wl.consumer_client,
        "workers": args.workers,
        "agents": args.agents,
        "virtual_brokers": args.virtual_brokers,
        "load_generator_nice": args.nice,
        "producer_defaults": wl.producer_defaults,
        "interval_s": args.interval,
        "cpus": os.cpu_count(),
        # floe dev runs NORMAL (durable across a crash, not a power loss); floe agent FULL
        "sqlite_synchronous": os.environ.get("FLOE_SQLITE_SYNCHRONOUS", "FULL"),
        "note": "agent, load-generator processes and services share this machine's CPUs",
    }
    say = print if not args.quiet else (lambda *a, **k: None)
    backend: Backend = start_backend(
        args.backend, flush_interval_ms=args.flush_interval_ms, flush_bytes=args.flush_bytes,
        flush_min_interval_ms=min_ms, workers=args.workers, virtual_brokers=args.virtual_brokers,
        admin_url=args.admin_url, keep=args.keep, store_latency=wl.store_latency,
        journal=args.journal, journal_latency=args.journal_latency, journal_quorum=args.journal_quorum,
        agents=args.agents, debug_faults=bool(args.slow_agent),
    )
    try:  # the slow-agent nemesis (loadtest.slow_agent); a bad --slow-agent stops the backend
        slow = SlowAgents([a.admin_url for a in backend.agents], [str(i + 1) for i in range(len(backend.agents))],
                          args.slow_agent or [], args.slow_agent_ms, say=say)
    except BaseException:
        backend.close()
        raise
    cfg["slow_agent"], cfg["slow_agent_ms"] = args.slow_agent, args.slow_agent_ms
    cfg["journal"] = args.journal
    cfg["journal_latency"] = backend.journal_latency
    stall = _parse_stall(args.journal_stall) if args.journal_stall else None
    if stall and not backend.journal_stall_files:
        raise SystemExit("--journal-stall needs --journal N on a dev or postgres-s3 backend")
    cfg["journal_stall"] = args.journal_stall
    store_stall = _parse_store_stall(args.store_stall) if args.store_stall else None
    if store_stall and backend.store_stall_file is None:
        raise SystemExit("--store-stall needs --store-latency on a dev or postgres-s3 backend")
    cfg["store_stall"] = args.store_stall
    store_stalls: list[tuple[float, float]] = []  # (from, to) run seconds, as they happened
    # Every latency figure of this run was measured under this profile (None: none simulated).
    cfg["store_latency"] = backend.store_latency
    if wl.store_latency and backend.store_latency is None:
        cfg["store_latency_not_applied"] = f"{wl.store_latency} (no object store on {backend.kind})"
    if args.nice:
        os.nice(args.nice)  # the load processes inherit it; the system under test started above
    ctx = mp.get_context("spawn")
    procs: list[Any] = []
    result: dict[str, Any] = {}
    try:
        say(f"backend {backend.kind}: bootstrap {backend.bootstrap}"
            + (f", server pid {backend.server_pid}" if backend.server_pid else ""))
        baselines: dict[str, Any] = {}
        if not args.no_baselines and backend.objects_url:
            say("measuring raw baselines (object store, metastore, loopback TCP)...")
            baselines = bl.measure_all(
                backend.objects_url, backend.metastore_url, flush_bytes, 4 * MiB, 4,
                wl.partitions_per_topic,
            )
        run_id = uuid.uuid4().hex[:6]
        topics = [f"{wl.name}-{i}-{run_id}" for i in range(wl.topics)]
        _create_topics(backend.bootstrap, topics, wl.partitions_per_topic)
        before = scrape_all(backend.admin_urls) if backend.admin_urls else {}

        q: Any = ctx.Queue()
        clock = ctx.Value("d", 0.0)
        resume = ctx.Event()
        duration = wl.warmup_seconds + wl.test_seconds
        backlog_mode = wl.backlog_bytes > 0
        if not backlog_mode:
            resume.set()
        cconf = dict(wl.consumer_config)
        consumer_target: Any = consumer_main
        if wl.consumer_client == "java":
            from loadtest.java_consumer import build as build_consumer
            from loadtest.java_consumer import java_consumer_main

            build_consumer()  # compile once, before the consumer processes start
            consumer_target = java_consumer_main
        n_consumers = 0
        for t in topics:
            for s in range(wl.subscriptions_per_topic):
                group = f"sub-{s}-{run_id}"
                for j in range(wl.consumer_per_subscription):
                    parts = [p for p in range(wl.partitions_per_topic) if p % wl.consumer_per_subscription == j]
                    procs.append(ctx.Process(
                        target=consumer_target,
                        args=(f"c-{t}-{s}-{j}", backend.bootstrap, t, parts, group, cconf,
                              backlog_mode, resume, clock, duration, args.interval, q),
                        daemon=True,
                    ))
                    n_consumers += 1
        n_producers = wl.topics * wl.producers_per_topic
        rate = wl.producer_rate / n_producers if wl.producer_rate else 0.0
        target: Any = producer_main
        if wl.producer_client == "java":
            from loadtest.java_driver import build, java_producer_main

            build()  # compile once, before the producer processes start
            target = java_producer_main
            pconf = dict(wl.producer_config)
            if args.idempotent or wl.idempotent_producer:
                pconf.setdefault("enable.idempotence", "true")
        else:
            pconf = {"enable.idempotence": wl.idempotent_producer, **wl.producer_config}
            if wl.producer_defaults:
                pconf["floe.defaults"] = True
        for t in topics:
            for i in range(wl.producers_per_topic):
                procs.append(ctx.Process(
                    target=target,
                    args=(f"p-{t}-{i}", backend.bootstrap, t, wl.partitions_per_topic,
                          wl.message_size, rate, wl.key_distributor, pconf, clock, duration,
                          args.interval, q),
                    daemon=True,
                ))
        for p in procs:
            p.start()
        ready: set[str] = set()
        deadline = time.monotonic() + 120
        while len(ready) < len(procs):
            try:
                msg = q.get(timeout=max(0.1, deadline - time.monotonic()))
            except queue.Empty:
                raise RuntimeError(f"only {len(ready)}/{len(procs)} load processes got ready") from None
            if msg["kind"] == "error":
                raise RuntimeError(f"{msg['id']}: {msg['error']}")
            ready.add(msg["id"])
        t0 = time.time() + 0.5
        clock.value = t0
        server_pid = backend.server_pid
        server_pids = backend.server_pids()
        agent_cpu0 = _cpu_sum(server_pids)
        pg_cpu0 = _postgres_cpu_seconds(backend)
        children0 = os.times()
        say(f"{n_producers} producers, {n_consumers} consumers ready; running "
            f"{wl.warmup_seconds:.0f}s warm-up + {wl.test_seconds:.0f}s")
        coll = Collector(args.interval)
        profiler = None
        prof_path = out_dir / "agent-profile.txt"
        subs = wl.subscriptions_per_topic
        backlog_reached_at = None
        hard_end = t0 + duration + 90
        live = None if args.quiet else _Progress(wl, args.interval)
        try:
            if live:
                live.start()
            while len(coll.finals) < len(procs) and time.time() < hard_end:
                if stall is not None:  # the journal bucket nemesis: stall file on, then off
                    bucket, start, length = stall
                    f = backend.journal_stall_files[bucket]
                    now = time.time() - t0
                    if start <= now < start + length and not f.exists():
                        f.write_text("stalled by loadtest --journal-stall")
                        say(f"journal bucket {bucket} stalled at {now:.1f} s")
                    elif now >= start + length and f.exists():
                        f.unlink()
                        say(f"journal bucket {bucket} resumed at {now:.1f} s")
                if store_stall is not None:  # the S3 nemesis: stalled START+k*PERIOD for SECONDS
                    sf, now = backend.store_stall_file, time.time() - t0
                    assert sf is not None
                    first, length, period = store_stall
                    on = now >= first and (now - first) % period < length
                    if on and not sf.exists():
                        sf.write_text("stalled by loadtest --store-stall")
                        store_stalls.append((now, now))
                    elif not on and sf.exists():
                        sf.unlink()
                        store_stalls[-1] = (store_stalls[-1][0], now)
                if slow.faults:  # the slow-agent nemesis (issue 43): delay on, then off
                    slow.tick(time.time() - t0)
                if (args.profile_seconds and profiler is None and server_pid
                        and time.time() >= t0 + wl.warmup_seconds):
                    profiler = subprocess.Popen(
                        [str(Path(sys.executable).parent / "py-spy"), "record", "-p",
                         str(server_pid), "-d", str(args.profile_seconds), "-f", "raw",
                         "-o", str(prof_path), "--nonblocking", "--subprocesses"],
                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                    )
                try:
                    msg = q.get(timeout=0.25)
                except queue.Empty:
                    if not any(p.is_alive() for p in procs):
                        break
                    continue
                if msg["kind"] == "error":
                    raise RuntimeError(f"{msg['id']}: {msg['error']}")
                if msg["kind"] in ("p", "c"):
                    coll.add(msg)
                if backlog_mode and not resume.is_set():
                    backlog = coll.total_acked_bytes * subs - coll.total_received_bytes
                    if backlog >= wl.backlog_bytes:
                        resume.set()
                        backlog_reached_at = time.time() - t0
                if live:
                    live.update(coll)
        finally:
            if live:
                live.stop()
            if backend.store_stall_file is not None:
                backend.store_stall_file.unlink(missing_ok=True)
        for p in procs:
            p.join(max(1.0, hard_end - time.time()) if p.is_alive() else 1)
        if profiler is not None:
            try:
                profiler.wait(max(5, args.profile_seconds + 10))
            except subprocess.TimeoutExpired:
                profiler.kill()
        after = scrape_all(backend.admin_urls) if backend.admin_urls else {}
        wall = time.time() - t0
        agent_cpu1 = _cpu_sum(server_pids)
        pg_cpu1 = _postgres_cpu_seconds(backend)
        children1 = os.times()
        cpu: dict[str, Any] = {"wall_seconds": round(wall, 2), "cpus": os.cpu_count()}
        if agent_cpu0 is not None and agent_cpu1 is not None:
            cpu["agent_cpu_seconds"] = round(agent_cpu1 - agent_cpu0, 2)
            cpu["agent_cores_busy"] = round((agent_cpu1 - agent_cpu0) / wall, 3)
            if result_bytes := _acked_bytes_hint(coll):
                cpu["agent_cpu_seconds_per_GB"] = round((agent_cpu1 - agent_cpu0) / (result_bytes / 1e9), 2)
        if pg_cpu0 is not None and pg_cpu1 is not None:
            cpu["postgres_cpu_seconds"] = round(pg_cpu1 - pg_cpu0, 2)
        gen = (children1.children_user + children1.children_system
               - children0.children_user - children0.children_system)
        cpu["load_generator_cpu_seconds"] = round(gen, 2)
        cpu["load_generator_cores_busy"] = round(gen / wall, 3)

        result = {
            "workload": wl.as_omb(),
            "driver": "floe-loadtest (confluent-kafka " + _ck_version() + ")",
            "messageSize": wl.message_size,
            "topics": wl.topics,
            "partitions": wl.partitions_per_topic,
            "producersPerTopic": wl.producers_per_topic,
            "consumersPerTopic": wl.subscriptions_per_topic * wl.consumer_per_subscription,
            "beginTime": time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(t0)),
            "latencyUnit": "ms",
            "config": cfg,
        }
        result |= coll.build(wl.warmup_seconds, wl.test_seconds, subs, wl.message_size)
        if slow.faults:
            result["slowAgents"] = slow.summary(result)
        if store_stall is not None:
            result["storeStalls"] = [[round(a, 1), round(b, 1)] for a, b in store_stalls]
        if backlog_mode:
            result["backlogReachedAtSeconds"] = backlog_reached_at
            drained = [t for t, b, w in zip(result["timeSeconds"], result["backlog"], result["warmup"], strict=True)
                       if backlog_reached_at is not None and t > backlog_reached_at + args.interval
                       and b <= max(1, wl.producer_rate) * 2]
            result["backlogDrainedAtSeconds"] = drained[0] if drained else None
        result["cpu"] = cpu
        result["baselines"] = baselines
        result["agentMetrics"] = {"before": before, "after": after, "diff": diff(before, after)}
        produced_gb = _m(result["agentMetrics"]["diff"], "floe_produced_bytes_total") / 1e9
        if produced_gb > 0:  # CPU per GB produced over the whole run (warm-up included)
            for k in ("agent_cpu_seconds", "postgres_cpu_seconds"):
                if k in cpu:
                    cpu[k.replace("_seconds", "_s_per_GB")] = round(cpu[k] / produced_gb, 1)
        result["ratios"], result["goals"] = derive(result, cfg)
        if profiler is not None:
            result["profile"] = str(prof_path)
        (out_dir / "result.json").write_text(json.dumps(result, indent=1, default=_json_default))
        try:
            plot(result, out_dir / "result.png")
        except Exception as e:  # a plot failure must not lose the numbers
            say(f"plot failed: {e}")
        say(summary(result))
        say(f"wrote {out_dir / 'result.json'} and {out_dir / 'result.png'}")
        return result
    finally:
        for p in procs:
            if p.is_alive():
                p.terminate()
                p.join(5)
        slow.stop()
        backend.close()


def table(paths: list[str]) -> str:
    """Markdown rows: the figures RESULTS.md compares across backends and settings."""
    head = ("| run | backend | client | idem | min ms | target msg/s | publish msg/s | pub p50 / p99 ms "
            "| e2e p99 ms | server CPU s/GB | PUTs/GiB | seals (reason: n) |\n|" + "---|" * 12)
    rows = [head]
    for p in paths:
        f = Path(p)
        r = json.loads((f / "result.json" if f.is_dir() else f).read_text())
        c, d = r["config"], r.get("agentMetrics", {}).get("diff", {})
        seals = {k.split('"')[1]: int(v) for k, v in d.items() if k.startswith("floe_segment_seals_total{")}
        ppg = r.get("ratios", {}).get("puts_per_GiB_produced")
        workers = f" (workers {c['workers']})" if (c.get("workers") or 1) > 1 else ""
        latency = f" [{_latency_name(c)}]" if c.get("store_latency") else ""
        rows.append(
            f"| {f.name if f.is_dir() else f.parent.name} | {c['backend']}{workers}{latency}"
            f" | {c.get('producer_client', '-')}"
            f"{' (defaults)' if c.get('producer_defaults') else ''} | {c['idempotent']} "
            f"| {c.get('flush_min_interval_ms') or '-'} | {r['workload']['producerRate']:.0f} "
            f"| {r['aggregatedPublishRate']:.0f} | {r['aggregatedPublishLatency50pct']:.0f} / "
            f"{r['aggregatedPublishLatency99pct']:.0f} | {r['aggregatedEndToEndLatency99pct']:.0f} "
            f"| {r.get('cpu', {}).get('agent_cpu_seconds_per_GB', '-')} | {f'{ppg:.0f}' if ppg else '-'} "
            f"| {', '.join(f'{k}: {v}' for k, v in sorted(seals.items())) or '-'} |"
        )
    return "\n".join(rows)


def _latency_name(cfg: dict[str, Any]) -> str:
    """The simulated store latency profile a result ran under ("none": not simulated)."""
    sl = cfg.get("store_latency")
    return str(sl.get("profile", "?")) if isinstance(sl, dict) else "none"


def _acked_bytes_hint(coll: Collector) -> int:
    return sum(c.get("acked_bytes", 0) for c in coll.counts.values())


def _json_default(o: Any) -> Any:
    return str(o)


def _ck_version() -> str:
    try:
        import confluent_kafka

        return f"{confluent_kafka.version()[0]}, librdkafka {confluent_kafka.libversion()[0]}"
    except Exception:
        return "?"


def summary(r: dict[str, Any]) -> str:
    lines = [
        f"== {r['workload']['name']} on {r['config']['backend']} "
        f"(flush {r['config']['flush_interval_ms']} ms, idempotent={r['config']['idempotent']}, "
        f"store latency {_latency_name(r['config'])}) ==",
        f"publish {r['aggregatedPublishRate']:.0f} msg/s = {r['aggregatedPublishMBps']:.1f} MB/s "
        f"(errors {r['aggregatedPublishErrors']}); consume {r['aggregatedConsumeRate']:.0f} msg/s "
        f"= {r['aggregatedConsumeMBps']:.1f} MB/s; final backlog {r['finalBacklog']}",
    ]
    for omb, label in (("PublishLatency", "publish"), ("PublishDelayLatency", "publish delay"),
                       ("EndToEndLatency", "end-to-end")):
        lines.append(
            f"{label:>14} ms: p50 {r[f'aggregated{omb}50pct']:.1f}  p99 {r[f'aggregated{omb}99pct']:.1f}  "
            f"p99.9 {r[f'aggregated{omb}999pct']:.1f}  max {r[f'aggregated{omb}Max']:.1f}"
        )
    b = r.get("baselines", {})
    if "objectstore" in b:
        o = b["objectstore"]
        lines.append(
            f"raw store: PUT {o['put']['MBps']:.0f} MB/s p99 {o['put']['p99_ms']:.1f} ms "
            f"({o['object_bytes'] >> 20} MiB x{o['concurrency']}); GET {o['get']['MBps']:.0f} MB/s "
            f"p99 {o['get']['p99_ms']:.1f} ms ({o['range_bytes'] >> 20} MiB ranges)"
        )
    if "metastore" in b:
        m = b["metastore"]
        lines.append(f"raw Postgres commit: {m['commits_per_s']:.0f}/s p50 {m['p50_ms']:.2f} p99 {m['p99_ms']:.2f} ms")
    if "loopback_tcp" in b:
        lines.append(f"loopback TCP: {b['loopback_tcp']['MBps']:.0f} MB/s")
    if r.get("cpu"):
        lines.append("cpu: " + ", ".join(f"{k}={v}" for k, v in r["cpu"].items()))
    lines.append("ratios: " + ", ".join(
        f"{k}={v:.3g}" for k, v in r.get("ratios", {}).items() if isinstance(v, float | int)))
    for k, g in r.get("goals", {}).items():
        lines.append(f"goal {k}: {'MET' if g['met'] else 'missed'} ({ {x: y for x, y in g.items() if x != 'met'} })")
    return "\n".join(lines)


class _Progress:
    """A rich live line: elapsed, rates, backlog, last interval's p99s."""

    def __init__(self, wl: Workload, interval: float) -> None:
        from rich.console import Console
        from rich.live import Live

        self.wl = wl
        self.interval = interval
        self.console = Console(stderr=True)
        self.live = Live(console=self.console, refresh_per_second=4, transient=False)
        self.t_start = time.time()

    def start(self) -> None:
        self.live.start()

    def stop(self) -> None:
        self.live.stop()

    def update(self, coll: Collector) -> None:
        from rich.table import Table

        k = coll.last_complete()
        if k < 0:
            return
        c = coll.counts.get(k, {})
        h = coll.hists.get(k, {})

        def p(name: str, q: float) -> str:
            hist = h.get(name)
            return f"{hist.get_value_at_percentile(q) / 1000:.0f}" if hist and hist.get_total_count() else "-"

        total = self.wl.warmup_seconds + self.wl.test_seconds
        t = Table(title=f"{self.wl.name}: {(k + 1) * self.interval:.0f}/{total:.0f}s"
                  + (" (warm-up)" if k * self.interval < self.wl.warmup_seconds else ""))
        for col in ("pub msg/s", "pub MB/s", "cons msg/s", "backlog", "pub p50", "pub p99",
                    "delay p99", "e2e p50", "e2e p99", "errors"):
            t.add_column(col, justify="right")
        backlog = (coll.total_acked_bytes * self.wl.subscriptions_per_topic - coll.total_received_bytes)
        t.add_row(
            f"{c.get('acked', 0) / self.interval:.0f}",
            f"{c.get('acked_bytes', 0) / self.interval / 1e6:.1f}",
            f"{c.get('received', 0) / self.interval:.0f}",
            f"{backlog / max(1, self.wl.message_size):.0f}",
            p("pub", 50), p("pub", 99), p("delay", 99), p("e2e", 50), p("e2e", 99),
            str(c.get("errors", 0)),
        )
        self.live.update(t)


def add_parser(sub: Any) -> None:
    p = sub.add_parser("run", help="run an OMB workload file against Floe")
    p.add_argument("workload", help="OMB workload YAML (loadtest/workloads/*.yaml)")
    p.add_argument("--backend", default="dev",
                   help="dev | postgres-s3 | kafka (Apache Kafka 4.1, KRaft) | bootstrap=HOST:PORT")
    p.add_argument("--admin-url", help="with bootstrap=: the agent's admin URL for /metrics")
    p.add_argument("--out", help="result directory (default loadtest-results/<name>-<backend>-<time>)")
    p.add_argument("--idempotent", action="store_true", help="enable.idempotence=true producers")
    p.add_argument("--rate", type=float, help="override producerRate (messages/s, 0 = max)")
    p.add_argument("--duration-minutes", type=float, help="override testDurationMinutes")
    p.add_argument("--flush-interval-ms", type=int, help="agent flush interval (default 250)")
    p.add_argument("--flush-bytes", type=int, help="agent flush size (default 8 MiB)")
    p.add_argument("--flush-min-interval-ms", type=int,
                   help="agent adaptive-sealing lower bound (default the agent's; = interval: fixed)")
    p.add_argument("--interval", type=float, default=1.0, help="stats interval seconds")
    p.add_argument("--workers", type=int, default=1, help="agent --workers N (dev, postgres-s3)")
    p.add_argument("--virtual-brokers", type=int, help="agent --virtual-brokers K (default the agent's)")
    p.add_argument("--nice", type=int, default=0,
                   help="run the load generator with this niceness (the agent keeps its priority)")
    p.add_argument("--profile-seconds", type=int, default=0,
                   help="py-spy the agent for N s after warm-up (raw output in --out)")
    p.add_argument("--store-latency", metavar="PROFILE",
                   help="simulate S3 latency on the dev/postgres-s3 object store: s3-standard | "
                        "s3-express | none, or latency URL options "
                        "(latency=none&latency_put_p50_ms=20); default the workload's storeLatency")
    p.add_argument("--journal", type=int, default=0, metavar="N",
                   help="give the agent a journal tier of N buckets (dev, postgres-s3; issue 40)")
    p.add_argument("--journal-quorum", type=int, default=2, help="journal buckets a write needs (default 2)")
    p.add_argument("--journal-latency", default="s3-express", metavar="PROFILE",
                   help="the journal buckets' latency profile (default s3-express)")
    p.add_argument("--store-stall", metavar="START_S:SECONDS[:PERIOD_S]",
                   help="stall the standard object store from START_S (run time, warm-up"
                        " included) for SECONDS, again every PERIOD_S (needs --store-latency)")
    p.add_argument("--journal-stall", metavar="BUCKET:START_S:SECONDS",
                   help="stall journal bucket BUCKET from START_S (run time, warm-up included) for SECONDS")
    p.add_argument("--agents", type=int, default=1, help="agents on one metastore and store (dev, postgres-s3)")
    p.add_argument("--slow-agent", action="append", metavar="INDEX:START_S:SECONDS",
                   help="slow agent INDEX (0-based) from START_S (run time, warm-up included) for SECONDS"
                        " through its /debug/delay hook (issue 43); repeat to slow several")
    p.add_argument("--slow-agent-ms", type=int, default=2000, help="delay added to each request (default 2000)")
    p.add_argument("--no-baselines", action="store_true", help="skip the raw baselines")
    p.add_argument("--keep", action="store_true", help="keep the backend's temp dir")
    p.add_argument("--quiet", action="store_true", help="no progress display, no summary")
