"""Metastore commit benchmark: ``python -m loadtest.metastore [--dsn postgresql://...]``.

Commits/s and p50/p99 commit latency on Postgres, for objects touching 16 and
1,000 partitions (each batch 1-5 records) at several concurrencies (callers
committing at once: agents, or one agent's ready segments), every path in the
same run, alternating short rounds so that load drift hits them alike:

* ``before #18``: the commit path before group commit, as a baseline - one
  ``floe_commit_object`` call (migration 0002) per object on each caller's own
  connection, argument arrays built before the clock starts;
* ``group commit``: today's path - the callers go through one
  :class:`~metastore.group_commit.GroupCommitter` (what ``floe metastore serve``
  runs) into ``PostgresMetastore.commit_objects``: each group one transaction,
  each touched partition row locked and updated once, the index rows COPYed
  (since 2026-11-28 one run row per partition a group of several objects
  touched, metastore.runs; one row per batch before);
* ``group (batch rows)``: the same path with run rows off
  (``PostgresMetastore.run_rows``): one index row per batch, what the product
  ran when issue 41 was filed, the baseline of its "1.5x today's path";
* ``group (memory)``: a PROTOTYPE of the alternative, a single fenced
  sequencer holding the high watermarks in memory (the WarpStream shape): the
  same grouping and COPY, offsets from a dict, a fencing check on a lease row
  instead of locking and updating the partition rows. Plain batches only; it
  measures what the partition rows cost, nothing more;
* ``group (runs)``: a PROTOTYPE of the way past the floor, one index row per
  (group, partition) run (loadtest/run_rows.py); plain batches only;
* ``floor``: the batch rows alone, COPYed with precomputed offsets (no object
  rows, no locks, no checks): what one index row per batch costs here.

Without ``--dsn`` it starts a private PostgreSQL (``metastore.pgserver``) with
fsync off, so absolute numbers are an upper bound for a durable server; the
ratios are the point. Batches carry no producer id unless ``--idempotent``.
"""

from __future__ import annotations

import argparse
import asyncio
import io
import itertools
import os
import random
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import asyncpg

from agent.server import tune_runtime
from loadtest.run_rows import RunRowSequencer, insert_objects
from metastore import BatchToCommit, ObjectToCommit, open_metastore
from metastore.engine import asyncpg_dsn
from metastore.group_commit import GroupCommitter
from metastore.pg_group import BATCH_COLUMNS, GroupCommit
from metastore.pgserver import PostgresServer
from metastore.postgres import COMMIT_SQL, PostgresMetastore
from metastore.types import CommitResult, ErrorCode, ObjectCommitResult

TOTAL_PARTITIONS = 1000
ROUNDS = 4
PATHS = ("before #18", "group commit", "group (batch rows)", "group (memory)", "group (runs)", "floor")
_FLOOR_OFFSETS = itertools.count()  # the floor's rows only need unique offsets
_PRODUCER_IDS = itertools.count()
GROUP_OPTIONS: dict[str, Any] = {}  # GroupCommitter options (--max-group-objects)


@dataclass
class Outcome:
    label: str
    commits: int = 0
    seconds: float = 0.0
    latencies_ms: list[float] = field(default_factory=list)

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
        self.producer_id = 1_000_000 + next(_PRODUCER_IDS)  # a fresh producer per workload
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
                    self.topic_id, partition, pos * 1024, 1024, records, records - 1, 1, 2,
                    pid, epoch, seq,
                )
            )  # fmt: skip
        return batches


class MemorySequencer:
    """PROTOTYPE (benchmark only): a single sequencer holding the high watermarks in
    memory, fenced by a lease row - what the partition rows would save. Plain
    batches only; no producer checks, no takeover."""

    def __init__(self, url: str, epoch: int) -> None:
        self.dsn = asyncpg_dsn(url)
        self.epoch = epoch
        self.hwm: dict[tuple[uuid.UUID, int], int] = {}
        self.con: asyncpg.Connection | None = None

    async def start(self) -> MemorySequencer:
        self.con = await asyncpg.connect(self.dsn, server_settings={"jit": "off"})
        await self.con.execute(
            "CREATE TABLE IF NOT EXISTS bench_sequencer_lease (id int PRIMARY KEY, epoch bigint)"
        )
        await self.con.execute(
            "INSERT INTO bench_sequencer_lease VALUES (1, $1) "
            "ON CONFLICT (id) DO UPDATE SET epoch = excluded.epoch",
            self.epoch,
        )
        # Takeover: the high watermarks from the rows, once.
        for r in await self.con.fetch("SELECT topic_id, partition, high_watermark FROM partitions"):
            self.hwm[(r[0], r[1])] = r[2]
        for r in await self.con.fetch(
            "SELECT topic_id, partition, max(last_offset) + 1 FROM batches GROUP BY 1, 2"
        ):
            self.hwm[(r[0], r[1])] = max(self.hwm.get((r[0], r[1]), 0), r[2])
        return self

    async def commit_objects(self, objects: Sequence[ObjectToCommit]) -> list[ObjectCommitResult]:
        assert self.con is not None
        group = GroupCommit(objects)
        hwms = [self.hwm[tp] for tp in zip(group.t_topic, group.t_part, strict=True)]
        now = int(time.time() * 1000)
        async with self.con.transaction():
            fenced = await self.con.fetchval(
                "UPDATE bench_sequencer_lease SET epoch = epoch WHERE id = 1 AND epoch = $1 "
                "RETURNING epoch",
                self.epoch,
            )
            if fenced is None:
                raise RuntimeError("fenced: another sequencer took over")
            ids = await insert_objects(self.con, objects, now)
            rows = group.copy_rows(ids, hwms, now)
            await self.con.copy_to_table(
                "batches", source=io.BytesIO(rows), columns=BATCH_COLUMNS, format="binary"
            )
        for tp, hwm, size in zip(
            zip(group.t_topic, group.t_part, strict=True), hwms, group.t_size.tolist(), strict=True
        ):
            self.hwm[tp] = hwm + size
        return group.fast_results(hwms, [0] * len(hwms), now)

    async def close(self) -> None:
        if self.con is not None:
            await self.con.close()


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


def _check(results: list[CommitResult] | ObjectCommitResult) -> None:
    rs = results.results if isinstance(results, ObjectCommitResult) else results
    if not rs or rs[0].error is not ErrorCode.NONE:
        raise RuntimeError(f"commit failed: {rs[:1]}")


async def run_scenario(
    url: str,
    meta: PostgresMetastore,
    rows_meta: PostgresMetastore | None,
    memory: MemorySequencer | None,
    runs: RunRowSequencer | None,
    topics: dict[str, uuid.UUID],
    partitions: int,
    concurrency: int,
    duration: float,
    warmup: float,
    idempotent: bool,
    run_id: str,
    paths: Sequence[str] = PATHS,
) -> dict[str, Outcome]:
    dsn = asyncpg_dsn(url)
    connections: list[asyncpg.Connection] = []
    outcomes = {p: Outcome(p) for p in PATHS}
    committer = GroupCommitter(meta, **GROUP_OPTIONS)
    rows_committer = GroupCommitter(rows_meta, **GROUP_OPTIONS) if rows_meta is not None else None
    # the prototype commits on one connection: one group at a time
    memory_committer = GroupCommitter(memory, max_in_flight=1) if memory is not None else None
    runs_committer = GroupCommitter(runs, max_in_flight=1) if runs is not None else None

    async def before_worker(i: int) -> Worker:
        con = await asyncpg.connect(dsn, server_settings={"jit": "off"})
        connections.append(con)
        wl = Workload(topics["before #18"], partitions, idempotent, seed=4 * (partitions * 100 + i))
        prepared = [list(zip(*wl.next_object(), strict=True)) for _ in range(50)]

        async def commit(n: int) -> None:
            columns = list(zip(*wl.next_object(), strict=True)) if idempotent else prepared[n % 50]
            key = f"{run_id}/before/{partitions}/{concurrency}/{i}/{n}"
            row = await con.fetchrow(COMMIT_SQL, key, 1 << 20, "bench", 0, *columns)
            if row["errors"][0] != 0:
                raise RuntimeError(f"commit failed: error {row['errors'][0]}")

        return commit

    def group_worker(i: int, path: str, target: GroupCommitter, seed: int) -> Worker:
        wl = Workload(topics[path], partitions, idempotent, seed=seed)
        prepared = [wl.next_object() for _ in range(50)]

        async def commit(n: int) -> None:
            batches = wl.next_object() if idempotent else prepared[n % 50]
            key = f"{run_id}/{path[7:-1]}/{partitions}/{concurrency}/{i}/{n}"
            (res,) = await target.commit_objects([ObjectToCommit(key, 1 << 20, "bench", batches)])
            _check(res)

        return commit

    async def floor_worker(i: int) -> Worker:
        con = await asyncpg.connect(dsn, server_settings={"jit": "off"})
        connections.append(con)
        wl = Workload(topics["floor"], partitions, False, seed=4 * (partitions * 100 + i) + 3)
        groups = [GroupCommit([ObjectToCommit("floor", 1, "bench", wl.next_object())]) for _ in range(20)]

        async def commit(n: int) -> None:
            g = groups[n % 20]
            base = [next(_FLOOR_OFFSETS) * 10]
            rows = g.copy_rows([0], base * len(g.t_topic), 0)
            await con.copy_to_table(
                "batches", source=io.BytesIO(rows), columns=BATCH_COLUMNS, format="binary"
            )

        return commit

    try:
        workers: dict[str, list[Worker]] = {
            "before #18": [await before_worker(i) for i in range(concurrency)],
            "group commit": [
                group_worker(i, "group commit", committer, 4 * (partitions * 100 + i) + 1)
                for i in range(concurrency)
            ],
            "floor": [await floor_worker(i) for i in range(concurrency)],
        }
        if rows_committer is not None:
            workers["group (batch rows)"] = [
                group_worker(i, "group (batch rows)", rows_committer, 4 * (partitions * 100 + i) + 1)
                for i in range(concurrency)
            ]
        if memory_committer is not None and not idempotent:
            workers["group (memory)"] = [
                group_worker(i, "group (memory)", memory_committer, 4 * (partitions * 100 + i) + 2)
                for i in range(concurrency)
            ]
        if runs_committer is not None and not idempotent:
            workers["group (runs)"] = [
                group_worker(i, "group (runs)", runs_committer, 4 * (partitions * 100 + i) + 1)
                for i in range(concurrency)
            ]
        workers = {p: ws for p, ws in workers.items() if p in paths}
        counters = dict.fromkeys(workers, 0)
        for _ in range(ROUNDS):
            for path, ws in workers.items():
                counters[path] = await _drive(
                    ws, duration / ROUNDS, warmup, outcomes[path], counters[path]
                )
    finally:
        for con in connections:
            await con.close()
        await committer.close()
        if rows_committer is not None:
            await rows_committer.close()
        if memory_committer is not None:
            await memory_committer.close()
        if runs_committer is not None:
            await runs_committer.close()
    hints = meta._expected  # the optimistic path (migration 0014): groups sealed / declined
    outcomes["group commit"].label += (
        f" [{committer.objects / max(1, committer.groups):.1f}/group, opt {hints.hits}/{hints.declined}]"
    )
    if runs_committer is not None:
        per_group = runs_committer.objects / max(1, runs_committer.groups)
        outcomes["group (runs)"].label += f" [{per_group:.1f}/group]"
    return outcomes


async def bench(
    url: str,
    duration: float,
    warmup: float,
    idempotent: bool,
    scenarios: list[tuple[int, int]],
    with_memory: bool,
    paths: Sequence[str] = PATHS,
) -> list[dict[str, Any]]:
    run_id = uuid.uuid4().hex[:8]
    admin = await open_metastore(url)
    topics: dict[str, uuid.UUID] = {}
    for n, path in enumerate(PATHS):  # one topic per path: their offsets never mix
        created = await admin.create_topic(f"bench-{run_id}-{n}", TOTAL_PARTITIONS)
        assert created.topic is not None, created.message
        topics[path] = created.topic.id
    meta = await open_metastore(url, auto_migrate=False, pool_size=2)
    assert isinstance(meta, PostgresMetastore)
    rows_meta: PostgresMetastore | None = None
    if "group (batch rows)" in paths:
        opened = await open_metastore(url, auto_migrate=False, pool_size=2)
        assert isinstance(opened, PostgresMetastore)
        rows_meta, opened.run_rows = opened, False
    tune_runtime()  # as `floe metastore serve` (and an agent) runs: GC threshold, switch interval
    print(
        f"floe metastore commit benchmark ({'idempotent' if idempotent else 'plain'} batches, "
        f"{duration:.0f}s per path and scenario, {ROUNDS} alternating rounds)"
    )
    print(
        f"{'partitions':>10} {'conc':>4}  {'path':<28} {'commits/s':>10} {'p50 ms':>8} "
        f"{'p99 ms':>8} {'x before':>9}"
    )
    table: list[dict[str, Any]] = []
    try:
        for partitions, concurrency in scenarios:
            memory = runs = None
            if with_memory and not idempotent:
                memory = await MemorySequencer(url, epoch=len(table) + 1).start()
            if "group (runs)" in paths and not idempotent:
                runs = await RunRowSequencer(url).start()
            try:
                outcomes = await run_scenario(
                    url, meta, rows_meta, memory, runs, topics, partitions, concurrency, duration, warmup,
                    idempotent, run_id, paths,
                )  # fmt: skip
            finally:
                if memory is not None:
                    await memory.close()
                if runs is not None:
                    await runs.close()
            before = outcomes["before #18"].rate or float("nan")
            for o in outcomes.values():
                if not o.commits:
                    continue
                ratio = o.rate / before if before else float("nan")
                print(
                    f"{partitions:>10} {concurrency:>4}  {o.label:<28} {o.rate:>10.1f} "
                    f"{o.quantile(0.5):>8.2f} {o.quantile(0.99):>8.2f} {ratio:>9.2f}",
                    flush=True,
                )
                table.append(
                    {
                        "partitions": partitions,
                        "concurrency": concurrency,
                        "path": o.label,
                        "commits_per_s": round(o.rate, 1),
                        "p50_ms": round(o.quantile(0.5), 2),
                        "p99_ms": round(o.quantile(0.99), 2),
                        "x_before": round(ratio, 2),
                    }
                )
    finally:
        await meta.close()
        if rows_meta is not None:
            await rows_meta.close()
        await admin.close()
    return table


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--dsn",
        default=os.environ.get("FLOE_BENCH_POSTGRES_DSN"),
        help="postgresql://... (default: a private server)",
    )
    parser.add_argument("--duration", type=float, default=4.0, help="seconds measured per path")
    parser.add_argument("--warmup", type=float, default=0.2, help="unmeasured seconds per round")
    parser.add_argument(
        "--idempotent", action="store_true", help="batches carry producer ids and sequences"
    )
    parser.add_argument("--partitions", type=int, nargs="+", default=[16, 1000])
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 4, 16])
    parser.add_argument(
        "--no-memory", action="store_true", help="skip the in-memory sequencer prototype"
    )
    parser.add_argument(
        "--paths", nargs="+", choices=PATHS, default=list(PATHS),
        help="paths to run (default all; the ratios need 'before #18')",
    )
    parser.add_argument("--max-group-objects", type=int, help="GroupCommitter max_objects")
    parser.add_argument("--split-min-batches", type=int, help="GroupCommitter split_min_batches")
    parser.add_argument("--max-in-flight", type=int, help="GroupCommitter max_in_flight")
    parser.add_argument(
        "--pg-options", default="", help="more settings for the private server: '-c name=value ...'"
    )
    args = parser.parse_args(argv)
    if args.max_group_objects:
        GROUP_OPTIONS["max_objects"] = args.max_group_objects
    if args.split_min_batches:
        GROUP_OPTIONS["split_min_batches"] = args.split_min_batches
    if args.max_in_flight:
        GROUP_OPTIONS["max_in_flight"] = args.max_in_flight
    scenarios = [(p, c) for p in args.partitions for c in args.concurrency]

    def go(url: str) -> None:
        asyncio.run(
            bench(
                url, args.duration, args.warmup, args.idempotent, scenarios,
                not args.no_memory and "group (memory)" in args.paths, args.paths,
            )
        )

    if args.dsn:
        go(args.dsn)
        return
    server = PostgresServer().start(args.pg_options)
    try:
        print(f"started a private PostgreSQL on port {server.port} (fsync off) {args.pg_options}")
        go(server.url())
    finally:
        server.stop()


if __name__ == "__main__":
    main()
