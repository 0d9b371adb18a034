"""Metastore commit benchmark: ``python -m loadtest.metastore [--dsn postgresql://...]``.

Measures commits/s and p50/p99 commit latency of ``Metastore.commit_object`` on
Postgres at concurrency 1 and 4, for objects touching 16 and 1,000 partitions,
next to a baseline in the same run: the same plpgsql ``floe_commit_object`` call
sent with raw asyncpg (one dedicated connection per worker, argument arrays built
before the clock starts). Prints ours/raw; the target is >= 0.5.

Without ``--dsn`` it starts a private PostgreSQL (``metastore.pgserver``) with
fsync off, so absolute numbers are an upper bound for a durable server; the
ratio is the point. Batches carry no producer id unless ``--idempotent``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

import asyncpg

from metastore import BatchToCommit, Metastore, open_metastore
from metastore.engine import asyncpg_dsn
from metastore.pgserver import PostgresServer
from metastore.postgres import COMMIT_SQL

TOTAL_PARTITIONS = 1000
ROUNDS = 4


@dataclass
class Outcome:
    label: str
    commits: int
    seconds: float
    latencies_ms: list[float]

    @property
    def rate(self) -> float:
        return self.commits / self.seconds if self.seconds else 0.0

    def quantile(self, q: float) -> float:
        ordered = sorted(self.latencies_ms)
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


class Workload:
    """Random objects: each batch 1-5 records, a fresh subset of partitions per object."""

    def __init__(self, topic_id: uuid.UUID, partitions: int, idempotent: bool, seed: int) -> None:
        self.topic_id = topic_id
        self.partitions = partitions
        self.idempotent = idempotent
        self.rng = random.Random(seed)
        self.producer_id = 1_000_000 + seed
        self.sequences = [0] * TOTAL_PARTITIONS

    def next_object(self) -> list[BatchToCommit]:
        chosen = sorted(self.rng.sample(range(TOTAL_PARTITIONS), self.partitions))
        batches = []
        for pos, partition in enumerate(chosen):
            records = self.rng.randint(1, 5)
            pid, epoch, seq = -1, -1, -1
            if self.idempotent:
                pid, epoch, seq = self.producer_id, 0, self.sequences[partition]
                self.sequences[partition] += records
            batches.append(
                BatchToCommit(
                    self.topic_id,
                    partition,
                    pos * 1024,
                    1024,
                    records,
                    records - 1,
                    1,
                    2,
                    pid,
                    epoch,
                    seq,
                )
            )
        return batches


Worker = Callable[[int], Awaitable[None]]


async def _drive(
    workers: Sequence[Worker], seconds: float, warmup: float, outcome: Outcome, first: int
) -> int:
    """Run ``workers`` concurrently for ``warmup + seconds``; record the measured part."""
    start_at = time.perf_counter() + warmup
    stop_at = start_at + seconds
    counters = [first] * len(workers)

    async def loop(index: int, worker: Worker) -> None:
        while True:
            t0 = time.perf_counter()
            if t0 >= stop_at:
                return
            await worker(counters[index])
            counters[index] += 1
            if t0 >= start_at:
                outcome.latencies_ms.append((time.perf_counter() - t0) * 1000)

    await asyncio.gather(*(loop(i, w) for i, w in enumerate(workers)))
    outcome.commits = len(outcome.latencies_ms)
    outcome.seconds += seconds
    return max(counters)


async def run_pair(
    url: str,
    metastores: Sequence[Metastore],
    topic_id: uuid.UUID,
    partitions: int,
    concurrency: int,
    duration: float,
    warmup: float,
    idempotent: bool,
    run_id: str,
) -> tuple[Outcome, Outcome]:
    dsn = asyncpg_dsn(url)
    connections: list[asyncpg.Connection] = []

    async def raw_worker(i: int) -> Callable[[int], Awaitable[None]]:
        con = await asyncpg.connect(dsn, server_settings={"jit": "off"})
        connections.append(con)
        workload = Workload(topic_id, partitions, idempotent, seed=2 * (partitions * 10 + i))
        prepared = [list(zip(*workload.next_object(), strict=True)) for _ in range(200)]

        async def commit(n: int) -> None:
            if idempotent:  # sequences must advance: build on the fly
                columns = list(zip(*workload.next_object(), strict=True))
            else:
                columns = prepared[n % len(prepared)]
            await con.fetchrow(
                COMMIT_SQL,
                f"{run_id}/raw/{partitions}/{concurrency}/{i}/{n}",
                1 << 20,
                "bench",
                0,
                *columns,
            )

        return commit

    async def our_worker(i: int) -> Callable[[int], Awaitable[None]]:
        store = metastores[i]
        workload = Workload(topic_id, partitions, idempotent, seed=2 * (partitions * 10 + i) + 1)
        prepared = [workload.next_object() for _ in range(200)]

        async def commit(n: int) -> None:
            batches = workload.next_object() if idempotent else prepared[n % len(prepared)]
            await store.commit_object(
                f"{run_id}/floe/{partitions}/{concurrency}/{i}/{n}", 1 << 20, "bench", batches
            )

        return commit

    raw, ours = Outcome("raw asyncpg", 0, 0.0, []), Outcome("Metastore", 0, 0.0, [])
    try:
        raw_workers = [await raw_worker(i) for i in range(concurrency)]
        our_workers = [await our_worker(i) for i in range(concurrency)]
        # Alternate short rounds so that load drift on a shared box hits both alike.
        n_raw = n_ours = 0
        for _ in range(ROUNDS):
            n_raw = await _drive(raw_workers, duration / ROUNDS, warmup, raw, n_raw)
            n_ours = await _drive(our_workers, duration / ROUNDS, warmup, ours, n_ours)
    finally:
        for con in connections:
            await con.close()
    return ours, raw


async def bench(
    url: str, duration: float, warmup: float, idempotent: bool, scenarios: list[tuple[int, int]]
) -> None:
    run_id = uuid.uuid4().hex[:8]
    admin = await open_metastore(url)
    created = await admin.create_topic(f"bench-{run_id}", TOTAL_PARTITIONS)
    assert created.topic is not None, created.message
    topic_id = created.topic.id
    stores = [
        await open_metastore(url, auto_migrate=False, pool_size=1)
        for _ in range(max(c for _, c in scenarios))
    ]
    print(
        f"floe metastore commit benchmark ({'idempotent' if idempotent else 'plain'} batches, {duration:.0f}s per run)"
    )
    print(
        f"{'partitions':>10} {'conc':>4} {'impl':<12} {'commits/s':>10} {'p50 ms':>8} {'p99 ms':>8} {'ours/raw':>9}"
    )
    try:
        for partitions, concurrency in scenarios:
            ours, raw = await run_pair(
                url, stores, topic_id, partitions, concurrency, duration, warmup, idempotent, run_id
            )
            for outcome in (raw, ours):
                ratio = f"{ours.rate / raw.rate:9.2f}" if outcome is ours and raw.rate else ""
                print(
                    f"{partitions:>10} {concurrency:>4} {outcome.label:<12} {outcome.rate:>10.1f} "
                    f"{outcome.quantile(0.5):>8.2f} {outcome.quantile(0.99):>8.2f} {ratio}",
                    flush=True,
                )
    finally:
        for store in stores:
            await store.close()
        await admin.close()


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--dsn",
        default=os.environ.get("FLOE_BENCH_POSTGRES_DSN"),
        help="postgresql://... (default: a private server)",
    )
    parser.add_argument("--duration", type=float, default=4.0, help="seconds measured per run")
    parser.add_argument("--warmup", type=float, default=0.2, help="unmeasured seconds per round")
    parser.add_argument(
        "--idempotent", action="store_true", help="batches carry producer ids and sequences"
    )
    parser.add_argument("--partitions", type=int, nargs="+", default=[16, 1000])
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 4])
    args = parser.parse_args(argv)
    scenarios = [(p, c) for p in args.partitions for c in args.concurrency]
    if args.dsn:
        asyncio.run(bench(args.dsn, args.duration, args.warmup, args.idempotent, scenarios))
        return
    with PostgresServer() as server:
        print(f"started a private PostgreSQL on port {server.port} (fsync off)")
        asyncio.run(bench(server.url(), args.duration, args.warmup, args.idempotent, scenarios))


if __name__ == "__main__":
    main()
