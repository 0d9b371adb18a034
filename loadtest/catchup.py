"""``python -m loadtest.catchup``: catch-up read of a backlog, Floe from storage vs Kafka from page cache.

Where it sits: a benchmark beside :mod:`loadtest.run` (issue 43, AIMD read-ahead,
:mod:`agent.fetch.readahead`); it starts its backend with
:func:`loadtest.services.start_backend`.

1. Start the backend: ``dev`` (SQLite + ``file://`` objects under
   ``--store-latency``, default ``s3-standard``; ``--workers`` agent workers) or
   ``kafka`` (Apache Kafka 4.1, :mod:`loadtest.kafka_broker`).
2. Write a backlog of ``--mib`` MiB of 1 KiB records to a ``--partitions``
   topic (librdkafka, records dealt round-robin over the partitions).
3. Floe: restart the agent on the same metastore, objects and ports, so its
   block cache is empty and the read comes from storage. Kafka: nothing, the
   backlog just written is in the page cache.
4. ``--groups`` consumers (one process each, each its own group, ``assign()``
   of every partition from the beginning, at the same time) read the whole
   backlog; each reports MB/s from its assign to its last record.
5. Print a JSON summary: MB/s per group, and for Floe the agents' metric diffs
   over the read (object GETs and bytes, read-ahead bytes used and wasted), so
   ``--groups 2`` shows whether two groups cost twice the GETs of one, and the
   server processes' CPU seconds over the read per GB read (``/proc`` times).

``--readahead off`` starts the agent with ``FLOE_READAHEAD=false`` (the
comparison without read-ahead).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import sys
import time
from typing import Any

from loadtest.services import Backend, diff, scrape_all, start_agent, start_backend

MiB = 1 << 20
RECORD = 1024


def produce(bootstrap: str, topic: str, partitions: int, mib: int) -> dict[str, Any]:
    """Write ``mib`` MiB of 1 KiB records; the count and the seconds it took."""
    from confluent_kafka import Producer

    p = Producer(
        {
            "bootstrap.servers": bootstrap,
            "linger.ms": 50,
            "batch.size": 1_048_576,
            "acks": "all",
            "queue.buffering.max.messages": 2_000_000,
            "queue.buffering.max.kbytes": 1_048_576,
        }
    )
    value = os.urandom(RECORD)  # incompressible (no compression configured anyway)
    n = mib * MiB // RECORD
    failed = 0

    def on_delivery(err: Any, _msg: Any) -> None:
        nonlocal failed
        if err is not None:
            failed += 1

    t0 = time.perf_counter()
    for i in range(n):
        while True:
            try:
                p.produce(topic, value, partition=i % partitions, on_delivery=on_delivery)
                break
            except BufferError:
                p.poll(0.05)
        if i % 10_000 == 0:
            p.poll(0)
    left = p.flush(300)
    secs = time.perf_counter() - t0
    if failed or left:
        raise RuntimeError(f"backlog not written: {failed} failed, {left} undelivered")
    return {"records": n, "seconds": round(secs, 2), "mb_per_s": round(n * RECORD / secs / 1e6, 1)}


def consume_main(
    bootstrap: str, topic: str, partitions: int, records: int, group: str, q: Any
) -> None:
    """One consumer (its own group) reads ``records`` from the beginning of every partition."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    got = nbytes = errors = 0
    first = None
    cpu0 = time.process_time()  # every thread of this process: librdkafka's too
    t0 = time.perf_counter()
    c.assign([TopicPartition(topic, i, OFFSET_BEGINNING) for i in range(partitions)])
    deadline = t0 + 1800
    while got < records and time.perf_counter() < deadline:
        for m in c.consume(10_000, 1.0):
            if m.error() is not None:
                errors += 1
                continue
            got += 1
            nbytes += len(m.value() or b"")
        if first is None and got:
            first = time.perf_counter() - t0
    secs = time.perf_counter() - t0
    cpu = time.process_time() - cpu0
    c.close()
    q.put(
        {
            "group": group,
            "records": got,
            "bytes": nbytes,
            "errors": errors,
            "seconds": round(secs, 2),
            "first_record_s": round(first or secs, 2),  # connect, metadata, first Fetch
            "mb_per_s": round(nbytes / secs / 1e6, 1),
            "cpu_s": round(cpu, 2),  # the consumer's own CPU (it shares the box's cores)
        }
    )


def read_backlog(
    bootstrap: str, topic: str, partitions: int, records: int, groups: int
) -> list[dict[str, Any]]:
    """``groups`` consumers at once, each in its own process and group."""
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    procs = [
        ctx.Process(
            target=consume_main, args=(bootstrap, topic, partitions, records, f"catchup-{g}", q)
        )
        for g in range(groups)
    ]
    for pr in procs:
        pr.start()
    out = [q.get(timeout=2000) for _ in procs]
    for pr in procs:
        pr.join(30)
    return sorted(out, key=lambda r: str(r["group"]))


def restart_agent(b: Backend, workers: int) -> None:
    """Stop the agent and start it again on the same stores and ports: an empty cache."""
    old = b.agents[0]
    old.stop()
    assert b.metastore_url and b.objects_url and b.workdir
    new = start_agent(
        b.metastore_url,
        b.objects_url,
        b.workdir,
        workers=workers,
        name="agent-restarted",
        kafka_port=old.kafka_port,
        admin_port=old.admin_port,
    )
    b.agents[0] = new
    b._cleanups.append(new.stop)


def cpu_seconds(pids: list[int]) -> float:
    """User + system CPU seconds of processes so far (``/proc/<pid>/stat``; 0 for one gone)."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) / tick  # utime, stime
    return total


def _metrics(d: dict[str, float]) -> dict[str, float]:
    names = [
        "floe_object_gets_total",
        "floe_object_get_bytes_total",
        "floe_readahead_bytes_total",
        "floe_readahead_used_bytes_total",
        "floe_readahead_wasted_bytes_total",
        "floe_fetched_bytes_total",
        'floe_requests_total{api="Fetch"}',
        "floe_peer_gets_total",  # blocks a worker took from the ring owner's cache
        "floe_peer_get_bytes_total",
        "floe_peer_get_failures_total",  # fell back to the object store
        "floe_cache_hits",  # block reads served from the cache (or a load in flight) ...
        "floe_cache_misses",  # ... and those that had to load (read-ahead loads count in neither)
    ]
    return {n: d.get(n, 0.0) for n in names}


def run(args: argparse.Namespace) -> dict[str, Any]:
    if args.readahead == "off":
        os.environ["FLOE_READAHEAD"] = "false"
    latency = args.store_latency if args.backend == "dev" else None
    b = start_backend(args.backend, workers=args.workers, store_latency=latency)
    try:
        from loadtest.run import _create_topics

        topic = f"catchup-{int(time.time())}"
        _create_topics(b.bootstrap, [topic], args.partitions)
        written = produce(b.bootstrap, topic, args.partitions, args.mib)
        if b.agents:
            restart_agent(b, args.workers)
        before = scrape_all(b.admin_urls) if b.admin_urls else {}
        pids = b.server_pids()  # the agent's workers, or the Kafka broker
        cpu0 = cpu_seconds(pids)
        groups = read_backlog(b.bootstrap, topic, args.partitions, written["records"], args.groups)
        cpu = cpu_seconds(pids) - cpu0
        after = scrape_all(b.admin_urls) if b.admin_urls else {}
        total = sum(g["bytes"] for g in groups)
        out: dict[str, Any] = {
            "backend": args.backend,
            "workers": args.workers if b.agents else None,
            "store_latency": b.store_latency,
            "readahead": args.readahead if b.agents else None,
            "mib": args.mib,
            "partitions": args.partitions,
            "record_bytes": RECORD,
            "produce": written,
            "groups": groups,
            # Every group's bytes over the slowest group's time (the groups read at once).
            "read_mb_per_s": round(total / max(g["seconds"] for g in groups) / 1e6, 1),
            "complete": all(g["records"] == written["records"] for g in groups),
            "load_average": os.getloadavg(),
            # The server processes' CPU over the read (agent workers, or the Kafka
            # broker), and per GB (1e9 bytes) delivered.
            "server_cpu_s": round(cpu, 2),
            "server_cpu_s_per_gb": round(cpu / (total / 1e9), 2) if total else None,
        }
        if b.agents:
            m = _metrics(diff(before, after))
            gets = m["floe_object_gets_total"]
            out["metrics"] = m
            out["gets_per_group_gib"] = round(gets / args.groups / (args.mib / 1024), 1)
        return out
    finally:
        b.close()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m loadtest.catchup", description=__doc__.split("\n")[0]
    )
    ap.add_argument("--backend", default="dev", choices=["dev", "kafka"])
    ap.add_argument("--mib", type=int, default=1024, help="backlog size (MiB of 1 KiB records)")
    ap.add_argument("--partitions", type=int, default=16)
    ap.add_argument(
        "--groups", type=int, default=1, help="consumer groups reading the backlog at once"
    )
    ap.add_argument("--workers", type=int, default=2, help="agent workers (dev)")
    ap.add_argument(
        "--store-latency", default="s3-standard", help="object store latency profile (dev)"
    )
    ap.add_argument("--readahead", default="on", choices=["on", "off"])
    ap.add_argument("--out", help="also write the JSON summary here")
    args = ap.parse_args(argv)
    result = run(args)
    text = json.dumps(result, indent=2)
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")
    return 0 if result["complete"] else 1


if __name__ == "__main__":
    sys.exit(main())
