"""The optimistic group commit on Postgres (migration 0014, metastore/expected_hwm.py).

A sequencer that knows the high watermarks its groups leave behind COPYs the
next group's rows at the expected offsets before taking any partition lock;
``floe_group_seal`` checks the expectation under the locks. Here: the path is
taken once the watermarks are known, pipelined groups come out contiguous, and
a second writer moving the watermarks behind the sequencer's back (another
agent connected directly) makes the seal decline, the group is committed the
ordinary way, and nothing is lost, doubled or misplaced.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict

import asyncpg
import pytest

from metastore import BatchToCommit, ErrorCode, ObjectToCommit, open_metastore
from metastore.engine import asyncpg_dsn
from metastore.group_commit import GroupCommitter
from metastore.postgres import COPY_MIN_BATCHES, PostgresMetastore
from tests.metastore.helpers import stored_batches

pytestmark = [pytest.mark.postgres]

PARTITIONS = 600  # one object is a COPY-sized group on its own


def _object(topic_id: object, key: str, records: int, pid: int = -1, seq: int = -1) -> ObjectToCommit:
    batches = [
        BatchToCommit(topic_id, p, p * 10, 10, records, records - 1, 0, 0, pid, 0 if pid >= 0 else -1,  # type: ignore[arg-type]
                      seq)
        for p in range(PARTITIONS)
    ]  # fmt: skip
    return ObjectToCommit(key, 10 * PARTITIONS, "a", batches)


async def _caller(
    committer: GroupCommitter, topic_id: object, prefix: str, i: int, count: int,
    acked: dict[int, list[tuple[int, int]]],
) -> None:
    """One committer's objects of 1-3 records, one at a time; every batch acknowledged."""
    for n in range(count):
        obj = _object(topic_id, f"{prefix}/{n}", 1 + (i + n) % 3)
        (res,) = await committer.commit_objects([obj])
        for b, r in zip(obj.batches, res.results, strict=True):
            assert r.error is ErrorCode.NONE
            acked[b.partition].append((r.base_offset, r.base_offset + b.last_offset_delta))


async def _check_tiling(url: str, acked: dict[int, list[tuple[int, int]]]) -> None:
    con = await asyncpg.connect(asyncpg_dsn(url))
    try:
        hwms = {r[0]: r[1] for r in await con.fetch("SELECT partition, high_watermark FROM partitions")}
        rows = await stored_batches(con)  # run rows unpacked
    finally:
        await con.close()
    stored: dict[int, list[tuple[int, int]]] = defaultdict(list)
    for _, partition, base, last, _ in rows:
        stored[partition].append((base, last))
    for p in range(PARTITIONS):
        expected = 0
        for base, last in stored[p]:
            assert base == expected, f"gap or overlap in partition {p} at {base}"
            expected = last + 1
        assert hwms[p] == expected
        assert sorted(acked[p]) == stored[p]


async def test_pipelined_groups_take_the_optimistic_path(postgres_url: str) -> None:
    assert PARTITIONS >= COPY_MIN_BATCHES
    meta = await open_metastore(postgres_url, auto_migrate=False, pool_size=4)
    assert isinstance(meta, PostgresMetastore)
    topic = (await meta.create_topic("opt", PARTITIONS)).topic
    assert topic is not None
    committer = GroupCommitter(meta)
    acked: dict[int, list[tuple[int, int]]] = defaultdict(list)
    pid = (await meta.init_producer_id()).producer_id

    async def caller(i: int) -> None:
        await _caller(committer, topic.id, f"k{i}", i, 6, acked)

    async def idempotent() -> None:
        for n in range(6):  # one producer, in order: the seal's producer check
            obj = _object(topic.id, f"p/{n}", 2, pid, 2 * n)
            (res,) = await committer.commit_objects([obj])
            for b, r in zip(obj.batches, res.results, strict=True):
                assert r.error is ErrorCode.NONE
                acked[b.partition].append((r.base_offset, r.base_offset + b.last_offset_delta))

    try:
        await asyncio.gather(*(caller(i) for i in range(4)), idempotent())
        # a retry of the producer's last batch: a duplicate with its original offset
        last = _object(topic.id, "p/retry", 2, pid, 10)
        (dup,) = await committer.commit_objects([last])
        assert all(r.error is ErrorCode.NONE for r in dup.results)
        assert meta._expected.hits > 0
    finally:
        await committer.close()
        await meta.close()
    await _check_tiling(postgres_url, acked)


async def test_another_writer_makes_the_seal_decline(postgres_url: str) -> None:
    a = await open_metastore(postgres_url, auto_migrate=False, pool_size=2)
    b = await open_metastore(postgres_url, auto_migrate=False, pool_size=2)
    assert isinstance(a, PostgresMetastore) and isinstance(b, PostgresMetastore)
    topic = (await a.create_topic("two", PARTITIONS)).topic
    assert topic is not None
    acked: dict[int, list[tuple[int, int]]] = defaultdict(list)

    async def commit(meta: PostgresMetastore, key: str, records: int) -> None:
        obj = _object(topic.id, key, records)
        (res,) = await meta.commit_objects([obj])
        for bt, r in zip(obj.batches, res.results, strict=True):
            assert r.error is ErrorCode.NONE
            acked[bt.partition].append((r.base_offset, r.base_offset + bt.last_offset_delta))

    try:
        await commit(a, "a0", 1)  # a learns the watermarks
        await commit(a, "a1", 2)  # optimistic
        assert a._expected.hits == 1
        await commit(b, "b0", 3)  # behind a's back
        await commit(a, "a2", 1)  # a's expectation is stale: declined, committed anyway
        assert a._expected.declined == 1
        for n in range(8):  # a pauses, learns again, and is optimistic again
            await commit(a, f"a3/{n}", 1)
        assert a._expected.hits >= 2
        # an object key already taken: the optimistic attempt declines too
        obj = _object(topic.id, "a1", 1)
        (res,) = await a.commit_objects([obj])
        assert res.already_committed
    finally:
        await a.close()
        await b.close()
    await _check_tiling(postgres_url, acked)


async def test_split_groups_copy_side_by_side_and_seal_in_order(postgres_url: str) -> None:
    """Many callers, groups split in two (GroupCommitter ``split_min_batches``):
    two optimistic groups are in flight at once, each COPYs before the other
    seals, they seal in the order they were planned (no decline), and the offsets
    tile every partition. At the start both groups in flight go the ordinary way;
    the next ones wait for their outcome (``settle``) instead of staying ordinary."""
    meta = await open_metastore(postgres_url, auto_migrate=False, pool_size=4)
    assert isinstance(meta, PostgresMetastore)
    topic = (await meta.create_topic("split", PARTITIONS)).topic
    assert topic is not None
    committer = GroupCommitter(meta, split_min_batches=PARTITIONS)
    acked: dict[int, list[tuple[int, int]]] = defaultdict(list)
    in_flight, most = 0, 0
    commit = meta.commit_objects

    async def counting(objects, **kw):  # type: ignore[no-untyped-def]
        nonlocal in_flight, most
        in_flight += 1
        most = max(most, in_flight)
        try:
            return await commit(objects, **kw)
        finally:
            in_flight -= 1

    meta.commit_objects = counting  # type: ignore[method-assign]

    async def caller(i: int) -> None:
        await _caller(committer, topic.id, f"s{i}", i, 5, acked)

    try:
        await asyncio.gather(*(caller(i) for i in range(8)))
        assert most == 2, "the groups were not split"
        assert meta._expected.hits > 0
        assert meta._expected.declined == 0
    finally:
        await committer.close()
        await meta.close()
    await _check_tiling(postgres_url, acked)
