"""The sequencer's Postgres session killed in the middle of group commits.

Twelve committers send wide objects (100-300 of 300 partitions, half of them
with idempotent producers) through one ``GroupCommitter`` (what ``floe
metastore serve`` runs) while a killer terminates the sequencer's backend
(``pg_terminate_backend``) whenever it is inside a group commit: in
``floe_group_begin``, the COPY of the batch rows, the general function or
before COMMIT, and in the optimistic path (migration 0014: the object rows, the
COPY at the expected offsets, ``floe_group_seal``). A killed group fails as a whole and is retried call by call;
callers whose commit fails retry (as the agent's pipeline does: an object that
did land is not acknowledged again). Afterwards every partition's batches must
tile ``[0, high watermark)`` exactly, and every acknowledged batch must be
stored at the offsets it was acknowledged with.
"""

from __future__ import annotations

import asyncio
import random
from collections import defaultdict

import asyncpg
import pytest

from metastore import BatchToCommit, ErrorCode, MetastoreError, ObjectToCommit, open_metastore
from metastore.engine import asyncpg_dsn
from metastore.group_commit import GroupCommitter
from metastore.postgres import COPY_MIN_BATCHES
from tests.metastore.helpers import stored_batches

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

PARTITIONS = 300
COMMITTERS = 12
OBJECTS_EACH = 12
KILLS = 8


async def test_killed_sequencer_session_loses_no_acknowledged_batch(postgres_url: str) -> None:
    meta = await open_metastore(postgres_url, auto_migrate=False, pool_size=2)
    topic = (await meta.create_topic("kill", PARTITIONS)).topic
    assert topic is not None
    committer = GroupCommitter(meta)
    acked: list[tuple[int, int, int]] = []  # partition, base, last
    dsn = asyncpg_dsn(postgres_url)
    database = postgres_url.rsplit("/", 1)[1]
    done = asyncio.Event()
    kills: list[str] = []

    pids = [(await meta.init_producer_id()).producer_id if i % 2 else -1 for i in range(COMMITTERS)]

    async def registered(key: str) -> bool:
        for _ in range(50):  # the killer may hit this session too
            try:
                return await meta.object_key_registered(key)
            except MetastoreError:
                await asyncio.sleep(0.01)
        raise AssertionError("object_key_registered kept failing")

    async def produce(index: int) -> None:
        rng = random.Random(index)
        pid = pids[index]
        seqs: dict[int, int] = defaultdict(int)
        for n in range(OBJECTS_EACH):
            chosen = sorted(rng.sample(range(PARTITIONS), rng.randint(100, PARTITIONS)))
            batches = []
            for p in chosen:
                records = rng.randint(1, 4)
                seq = seqs[p] if pid >= 0 else -1
                batches.append(
                    BatchToCommit(topic.id, p, 0, 10, records, records - 1, 0, 0, pid,
                                  0 if pid >= 0 else -1, seq)
                )  # fmt: skip
            for attempt in range(20):
                key = f"c{index}/{n}/{attempt}"
                try:
                    (res,) = await committer.commit_objects([ObjectToCommit(key, 10, "a", batches)])
                except MetastoreError:
                    if await registered(key):
                        break  # it landed, unacknowledged (a client would retry)
                    continue
                if res.already_committed:
                    break  # a killed group's retry found it landed: unacknowledged
                for b, r in zip(batches, res.results, strict=True):
                    # A retry of a batch that landed unacknowledged is a duplicate:
                    # NONE with its original offset, acknowledged now.
                    assert r.error is ErrorCode.NONE, r
                    acked.append((b.partition, r.base_offset, r.base_offset + b.last_offset_delta))
                break
            else:
                raise AssertionError(f"committer {index} could not commit object {n}")
            for b in batches:
                if pid >= 0:
                    seqs[b.partition] += b.record_count

    async def killer() -> None:
        con = await asyncpg.connect(dsn)
        try:
            while not done.is_set() and len(kills) < KILLS:
                rows = await con.fetch(
                    "SELECT pid, query FROM pg_stat_activity WHERE datname = $1 AND state <> 'idle' "
                    "AND pid <> pg_backend_pid() AND (query LIKE '%floe_group_begin%' "
                    "OR query LIKE '%floe_commit_objects%' OR query LIKE 'COPY%' "
                    "OR query LIKE '%floe_group_seal%' OR query LIKE '%INSERT INTO objects%' "
                    "OR state = 'idle in transaction')",
                    database,
                )
                for row in rows:
                    if await con.fetchval("SELECT pg_terminate_backend($1)", row["pid"]):
                        kills.append(row["query"][:40])
                await asyncio.sleep(random.uniform(0.005, 0.05))
        finally:
            await con.close()

    # Every partition once, before the killer starts: the sequencer then knows every
    # high watermark, so the first groups take the optimistic path (migration 0014).
    # Two batches a partition: a group below COPY_MIN_BATCHES goes the small path,
    # which teaches the sequencer nothing (one batch a partition left the first
    # groups to chance: they found no hints in 1 full-suite run of several).
    warm = [BatchToCommit(topic.id, p, 0, 10, 1, 0, 0, 0, -1, -1, -1) for p in range(PARTITIONS) for _ in range(2)]
    assert len(warm) >= COPY_MIN_BATCHES
    (res,) = await committer.commit_objects([ObjectToCommit("warm", 10, "a", warm)])
    acked.extend((b.partition, r.base_offset, r.base_offset) for b, r in zip(warm, res.results, strict=True))
    assert len(meta._expected._hwm) == PARTITIONS  # every high watermark known: the next group is optimistic

    kill_task = asyncio.create_task(killer())
    try:
        await asyncio.wait_for(asyncio.gather(*(produce(i) for i in range(COMMITTERS))), 240)
    finally:
        done.set()
        await kill_task
        await committer.close()
        await meta.close()
    assert len(kills) >= 3, kills  # the sessions were really killed mid-commit
    assert meta._expected.hits + meta._expected.declined > 0  # the optimistic path was taken too

    con = await asyncpg.connect(dsn)
    try:
        hwms = {
            r["partition"]: r["high_watermark"]
            for r in await con.fetch("SELECT partition, high_watermark FROM partitions")
        }
        rows = await stored_batches(con)  # run rows unpacked
        named = sorted({r[4] for r in rows})
        live = await con.fetchval(
            "SELECT count(*) FROM objects WHERE id = ANY($1::bigint[]) AND state = 'live'", named
        )
    finally:
        await con.close()
    orphans = len(named) - live  # batches naming an object that is not live
    stored: dict[int, list[tuple[int, int]]] = defaultdict(list)
    for _, partition, base, last, _ in rows:
        stored[partition].append((base, last))
    for p in range(PARTITIONS):
        expected = 0
        for base, last in stored[p]:
            assert base == expected, f"gap or overlap in partition {p} at {base}"
            expected = last + 1
        assert hwms[p] == expected, p
    stored_set = {(p, base, last) for p, ranges in stored.items() for base, last in ranges}
    missing = [a for a in acked if a not in stored_set]
    assert not missing, missing[:5]
    assert orphans == 0
    assert len(acked) > COMMITTERS * OBJECTS_EACH * 100 * 0.9
