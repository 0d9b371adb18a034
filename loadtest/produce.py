"""Quick produce benchmark: confluent-kafka against a real agent process.

    python -m loadtest.produce [--backend dev|postgres-s3] [--messages 200000] [--size 1024]

Starts the services it needs (a private Postgres and moto's S3 server for
``postgres-s3``), starts ``floe agent`` as its own process, and drives it
with confluent-kafka (librdkafka) producers in separate processes so the load
generator is not the bottleneck. Reports MB/s and per-message delivery latency
(send -> acknowledgement) p50/p99, and the raw PUT baseline of the same object
store at the agent's flush size measured in the same run. The full OMB-style
suite is a separate piece of work; this is the closing-note measurement.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import multiprocessing as mp
import os
import time
from typing import Any


def _producer_proc(
    bootstrap: str, topic: str, n: int, size: int, partitions: int, out: Any, rate: float = 0.0
) -> None:
    from confluent_kafka import Producer

    p = Producer(
        {
            "bootstrap.servers": bootstrap,
            "linger.ms": 5,
            "batch.size": 1_000_000,
            "acks": "all",
            "queue.buffering.max.messages": 1_000_000,
            "queue.buffering.max.kbytes": 1_048_576,
            "enable.idempotence": True,
        }
    )
    lat: list[float] = []
    errors = 0
    payload = os.urandom(size)

    def cb(err: Any, msg: Any, t0: float) -> None:
        nonlocal errors
        if err is not None:
            errors += 1
        else:
            lat.append(time.perf_counter() - t0)

    start = time.perf_counter()
    for i in range(n):
        if rate > 0:
            # Open loop at a fixed rate: latency is measured from the intended send time.
            due = start + i / rate
            while (now := time.perf_counter()) < due:
                p.poll(min(0.005, due - now))
            t0 = due
        else:
            t0 = time.perf_counter()
        while True:
            try:
                p.produce(topic, payload, partition=i % partitions, on_delivery=functools.partial(_cb_at, cb, t0))
                break
            except BufferError:
                p.poll(0.01)
        if i % 1000 == 0:
            p.poll(0)
    p.flush(120)
    elapsed = time.perf_counter() - start
    out.put({"elapsed": elapsed, "latencies": lat, "errors": errors})


def _cb_at(cb: Any, t0: float, err: Any, msg: Any) -> None:
    cb(err, msg, t0)


def _pct(xs: list[float], q: float) -> float:
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


async def _raw_put_baseline(objects_url: str, size: int, count: int) -> float:
    from objectstore import open_object_store

    store = open_object_store(objects_url, retry=False)
    data = os.urandom(size)
    t0 = time.perf_counter()
    sem = asyncio.Semaphore(4)

    async def one(i: int) -> None:
        async with sem:
            await store.put(f"baseline/{time.time_ns()}-{i}", data)

    await asyncio.gather(*(one(i) for i in range(count)))
    dt = time.perf_counter() - t0
    await store.close()
    return size * count / dt / 1e6


def run(args: argparse.Namespace) -> dict[str, Any]:
    from loadtest.services import scrape, start_backend

    backend = start_backend(args.backend)
    try:
        assert backend.objects_url is not None
        objects = backend.objects_url
        aport = backend.agents[0].admin_port
        bootstrap = backend.bootstrap

        from confluent_kafka.admin import AdminClient, NewTopic

        admin = AdminClient({"bootstrap.servers": bootstrap})
        for f in admin.create_topics([NewTopic("bench", args.partitions)]).values():
            f.result(30)

        per = args.messages // args.producers
        q: Any = mp.Queue()
        rate = args.rate / args.producers
        procs = [
            mp.Process(target=_producer_proc, args=(bootstrap, "bench", per, args.size, args.partitions, q, rate))
            for _ in range(args.producers)
        ]
        t0 = time.perf_counter()
        for p in procs:
            p.start()
        results = [q.get(timeout=600) for _ in procs]
        wall = time.perf_counter() - t0
        for p in procs:
            p.join(30)
        lat = [x for r in results for x in r["latencies"]]
        total = per * args.producers
        puts = scrape(f"http://127.0.0.1:{aport}").get("floe_object_puts_total", 0.0)
        raw = asyncio.run(_raw_put_baseline(objects, 8 * 1024 * 1024 if args.backend == "dev" else 4 * 1024 * 1024, 16))
        out = {
            "backend": args.backend,
            "messages": total,
            "message_bytes": args.size,
            "target_rate_msgs": args.rate or "max",
            "errors": sum(r["errors"] for r in results),
            "produce_MBps": total * args.size / wall / 1e6,
            "msgs_per_s": total / wall,
            "latency_ms_p50": _pct(lat, 0.50) * 1000,
            "latency_ms_p99": _pct(lat, 0.99) * 1000,
            "segment_puts": puts,
            "raw_put_MBps_same_store": raw,
        }
        out["ratio_produce_to_raw_put"] = out["produce_MBps"] / raw if raw else None
        return out
    finally:
        backend.close()


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m loadtest.produce", description=__doc__)
    ap.add_argument("--backend", choices=["dev", "postgres-s3"], default="dev")
    ap.add_argument("--messages", type=int, default=200_000)
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--partitions", type=int, default=16)
    ap.add_argument("--producers", type=int, default=2)
    ap.add_argument("--rate", type=float, default=0.0, help="total messages/s (0 = as fast as possible)")
    args = ap.parse_args(argv)
    print(json.dumps(run(args), indent=2))


if __name__ == "__main__":
    main()
