"""Kafka consumer throughput on Parquet-compacted data vs the same data in segments.

``python -m loadtest.parquet_fetch [--records 200000] [--value-bytes 1024] [--partitions 4]``

One agent (its own process; SQLite + ``file://`` store in a temp dir) gets the same
records produced into two topics; a forced compactor pass merges both and converts
``pq`` (``floe.parquet.enable=true``) to Parquet, so ``seg`` is served from segment
bytes and ``pq`` from batches rebuilt out of Parquet rows. A confluent-kafka consumer
then reads each topic from the start to its end, alternating (cold caches right after
an agent restart, then warm), ``--rounds`` times, and reports the median records/s and
MB/s; the ratio pq/seg of the same run is the result.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from loadtest.services import start_agent


def produce(bootstrap: str, topic: str, n: int, value_bytes: int, partitions: int) -> None:
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    cfg = {"floe.parquet.enable": "true"} if topic == "pq" else {}
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1, config=cfg)])[topic].result(30)
    blob = os.urandom(1 << 22)
    p = Producer(
        {
            "bootstrap.servers": bootstrap,
            "linger.ms": 20,
            "batch.size": 256 * 1024,
            "compression.type": "none",
            "queue.buffering.max.kbytes": 512 * 1024,
        }
    )
    for i in range(n):
        o = (i * 7919) % ((1 << 22) - value_bytes)
        while True:
            try:
                p.produce(topic, blob[o : o + value_bytes], key=b"k%d" % i, partition=i % partitions)
                break
            except BufferError:
                p.poll(0.05)
        if i % 10_000 == 0:
            p.poll(0)
    assert p.flush(120) == 0


def consume(bootstrap: str, topic: str, partitions: int, n: int) -> tuple[float, int, int]:
    """Read ``topic`` from offset 0 to its end: ``(seconds, records, payload bytes)``."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"bench-{topic}-{time.monotonic_ns()}",
            "enable.auto.commit": False,
            "fetch.max.bytes": 64 * 1024 * 1024,
            "max.partition.fetch.bytes": 8 * 1024 * 1024,
        }
    )
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    got = nbytes = 0
    t0 = time.perf_counter()
    deadline = t0 + 300
    while got < n and time.perf_counter() < deadline:
        for m in c.consume(10_000, 1.0):
            if m.error() is None:
                got += 1
                nbytes += len(m.value() or b"")
    secs = time.perf_counter() - t0
    c.close()
    return secs, got, nbytes


async def compact(metastore: str, objects: str) -> Any:
    from compactor.config import CompactorConfig
    from compactor.runner import Compactor
    from metastore import open_metastore
    from objectstore import open_object_store

    meta = await open_metastore(metastore)
    store = open_object_store(objects)
    try:
        cfg = CompactorConfig(l0_trigger=1, parquet_min_level=0, delete_grace_ms=0)
        return await Compactor(meta, store, cfg).run_pass(force=True)
    finally:
        await store.close()
        await meta.close()


def run(args: argparse.Namespace) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix="floe-pqbench-"))
    metastore, objects = f"sqlite:///{work / 'meta.db'}", f"file://{work / 'objects'}"
    (work / "objects").mkdir()
    agent = start_agent(metastore, objects, work, flush_interval_ms=100)
    try:
        for topic in ("seg", "pq"):
            produce(agent.bootstrap, topic, args.records, args.value_bytes, args.partitions)
        summary = asyncio.run(compact(metastore, objects))
        results: dict[str, Any] = {"compaction": summary.lines(), "records": args.records}
        samples: dict[str, list[tuple[float, int]]] = {}
        for _ in range(args.rounds):
            agent.stop()  # cold caches
            agent = start_agent(metastore, objects, work, flush_interval_ms=100)
            for rnd in ("cold", "warm"):
                for topic in ("seg", "pq"):
                    secs, got, nbytes = consume(
                        agent.bootstrap, topic, args.partitions, args.records
                    )
                    assert got == args.records, (topic, got)
                    samples.setdefault(f"{topic}_{rnd}", []).append((secs, nbytes))
        for name, xs in samples.items():
            secs, nbytes = sorted(xs)[len(xs) // 2]
            results[name] = {
                "records_per_s": round(args.records / secs),
                "mb_per_s": round(nbytes / secs / 1e6, 1),
                "all_records_per_s": [round(args.records / s) for s, _ in xs],
            }
        for rnd in ("cold", "warm"):
            results[f"ratio_{rnd}"] = round(
                results[f"pq_{rnd}"]["records_per_s"] / results[f"seg_{rnd}"]["records_per_s"], 2
            )
        results["load_avg"] = os.getloadavg()
        return results
    finally:
        agent.stop()
        shutil.rmtree(work, ignore_errors=True)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m loadtest.parquet_fetch", description=__doc__)
    ap.add_argument("--records", type=int, default=200_000)
    ap.add_argument("--value-bytes", type=int, default=1024)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=3)
    print(json.dumps(run(ap.parse_args(argv)), indent=2))


if __name__ == "__main__":
    main()
