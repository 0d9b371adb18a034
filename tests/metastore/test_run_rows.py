"""Run rows (metastore.runs): every reader answers as if each batch had its own row.

On both metastores a partition's committed rows are packed into one run row
directly (``runify``, what a group commit of several objects writes on
Postgres), and lookups, ListOffsets, the compactor's queries and swap,
retention and the GC must answer exactly as they did over one row per batch.
On Postgres the group commit itself must write runs, and the same holds.
Runs of 1, 2 and many batches; the Spark source's read plans; a transaction's
aborted range beside runs (a group never packs a transactional batch).
"""

from __future__ import annotations

import dataclasses
import uuid

import numpy as np
import pytest
from sqlalchemy import delete, func, insert, select, update

from metastore import Metastore, ObjectToCommit, open_metastore, runs
from metastore import schema as s
from metastore.types import (
    EARLIEST_TIMESTAMP,
    MAX_TIMESTAMP,
    BatchLocation,
    BatchToCommit,
    ErrorCode,
    NewObject,
    StoredBatch,
)
from spark_source.plan import covering, spans_for
from tests.metastore.helpers import FakeClock, batch

E = ErrorCode
B = s.batches.c


def _batch(topic: uuid.UUID, partition: int, records: int, pos: int, ts: int) -> BatchToCommit:
    return BatchToCommit(topic, partition, pos, 100 + records, records, records - 1, ts - 5, ts, -1, -1, -1)


def _objects(topic: uuid.UUID, partitions: int, objects: int, per_partition: int) -> list[ObjectToCommit]:
    """``objects`` objects, each with ``per_partition`` batches on every partition;
    timestamps go up and down so that ListOffsets has something to look for."""
    out = []
    for o in range(objects):
        batches = []
        pos = 0
        for p in range(partitions):
            for i in range(per_partition):
                records = 1 + (o + i) % 3
                ts = 10_000 + 100 * o + 7 * i - 50 * (i % 2)
                batches.append(_batch(topic, p, records, pos, ts))
                pos += 100 + records
        out.append(ObjectToCommit(f"obj/{uuid.uuid4()}", pos, "agent-1", batches))
    return out


async def runify(
    ms: Metastore, topic: uuid.UUID, partition: int, offsets: tuple[int, int] = (0, 1 << 62)
) -> None:
    """Pack every plain, non-transactional row of a partition (with base offsets in
    ``offsets``, a stretch of consecutive batches) into one run row, as a group
    commit of several objects writes it: head = the first object, run_head on each."""
    async with ms._write() as conn:  # type: ignore[attr-defined]
        rows = list(
            await conn.execute(
                select(s.batches).where(
                    B.topic_id == topic, B.partition == partition, B.entries.is_(None),
                    B.is_transactional.is_(False), B.base_offset >= offsets[0], B.base_offset < offsets[1],
                )
            )
        )  # fmt: skip
        rows.sort(key=lambda r: r.last_offset)
        e = np.zeros(len(rows), dtype=runs.ENTRY)
        for name in runs.ENTRY.names or ():
            e[name] = [getattr(r, name) for r in rows]
        ids = sorted({r.object_id for r in rows})
        await conn.execute(
            delete(s.batches).where(
                B.topic_id == topic, B.partition == partition, B.last_offset.in_([r.last_offset for r in rows])
            )
        )
        run = {
            "topic_id": topic, "partition": partition, "last_offset": rows[-1].last_offset,
            "base_offset": rows[0].base_offset, "object_id": ids[0], "byte_pos": 0,
            "byte_len": sum(r.byte_len for r in rows), "record_count": sum(r.record_count for r in rows),
            "base_timestamp": min(r.base_timestamp for r in rows),
            "max_timestamp": max(r.max_timestamp for r in rows), "append_time": rows[0].append_time,
            "producer_id": -1, "producer_epoch": -1, "base_sequence": -1, "is_transactional": False,
            "entries": runs.pack(e),
        }  # fmt: skip
        await conn.execute(insert(s.batches).values(**run))
        await conn.execute(update(s.objects).where(s.objects.c.id.in_(ids)).values(run_head=ids[0]))


async def _run_rows(ms: Metastore) -> int:
    async with ms._read() as conn:  # type: ignore[attr-defined]
        return int((await conn.execute(select(func.count()).where(B.entries.is_not(None)))).scalar_one())


async def _answers(ms: Metastore, topic: uuid.UUID, partition: int, hwm: int) -> list[object]:
    """Every lookup and ListOffsets answer a reader can get from the partition."""
    out: list[object] = []
    for offset in range(hwm + 1):
        for max_bytes in (1, 250, 1_000, 1 << 20):
            for max_batches in (1, 3, 1000):
                out.append(await ms.find_batches(topic, partition, offset, max_bytes, max_batches))
        (many,) = await ms.find_batches_many([(topic, partition, offset, 700)])
        out.append(many)
    for ts in (0, 9_990, 10_003, 10_050, 10_120, 10_200, 99_999, MAX_TIMESTAMP, EARLIEST_TIMESTAMP):
        for since in (0, 1, 7, hwm // 2, hwm):
            out.append(await ms.list_offsets(topic, partition, ts, from_offset=since))
    # what the Spark source plans for every offset range (spark_source.plan)
    every = (await ms.find_batches(topic, partition, 0, 1 << 30, 10_000)).batches
    for start in range(hwm):
        for end in range(start + 1, hwm + 1):
            out.append(spans_for(covering(every, start, end), start, end))
    return out


@pytest.mark.parametrize(("objects", "per_partition"), [(1, 1), (1, 2), (3, 4)], ids=["1", "2", "many"])
async def test_run_rows_answer_as_batch_rows(
    ms: Metastore, clock: FakeClock, objects: int, per_partition: int
) -> None:
    created = await ms.create_topic("runs", 2, {})
    assert created.topic is not None
    t = created.topic.id
    # one object per commit: one row per batch on every metastore
    for o in _objects(t, 2, objects, per_partition):
        (res,) = await ms.commit_objects([o])
        assert all(r.error is E.NONE for r in res.results)
    hwm = (await ms.find_batches(t, 0, 0, 1)).high_watermark
    before = await _answers(ms, t, 0, hwm)
    await runify(ms, t, 0)
    assert await _run_rows(ms) == 1
    assert await _answers(ms, t, 0, hwm) == before
    # DeleteRecords splits the run (the log start inside it, which retention keeps):
    # the same answers
    assert (await ms.delete_records(t, 1, hwm // 2)).error is E.NONE
    before = await _answers(ms, t, 1, hwm)
    await runify(ms, t, 1)
    assert (await ms.enforce_retention(t, 1)).removed_batches == 0
    assert await _run_rows(ms) == 2
    assert await _answers(ms, t, 1, hwm) == before


async def test_aborted_transaction_beside_runs(ms: Metastore, clock: FakeClock) -> None:
    """Plain batches packed in runs before and after an aborted transaction's
    batches and marker (which stay rows of their own): the last stable offset, the
    aborted range and every lookup are what they were over one row per batch."""
    created = await ms.create_topic("runs", 1, {})
    assert created.topic is not None
    t = created.topic.id
    r = await ms.txn_init("tx", 60_000)
    assert r.txn is not None
    pid, ep = r.txn.producer_id, r.txn.producer_epoch

    async def append(*batches: BatchToCommit) -> int:
        results = await ms.commit_object(f"obj/{uuid.uuid4()}", 1000, "a1", list(batches))
        assert all(x.error is E.NONE for x in results), results
        return results[0].base_offset

    for _ in range(3):
        await append(batch(t, 0, 2))  # offsets 0-5
    assert (await ms.txn_add_partitions("tx", pid, ep, [(t, 0)])).error is E.NONE
    first = await append(batch(t, 0, 2, pid=pid, epoch=ep, seq=0)._replace(is_transactional=True))
    await append(batch(t, 0, 1))  # another producer, inside the open transaction's range
    await append(batch(t, 0, 2, pid=pid, epoch=ep, seq=2)._replace(is_transactional=True))
    assert (await ms.txn_prepare_end("tx", pid, ep, False)).error is E.NONE
    marker = await append(batch(t, 0, 1, pid=pid, epoch=ep, seq=-1)._replace(is_transactional=True))
    assert (await ms.txn_complete("tx", pid, ep, [(t, 0, marker)])).error is E.NONE
    for _ in range(2):
        await append(batch(t, 0, 3))
    hwm = (await ms.find_batches(t, 0, 0, 1)).high_watermark

    async def view() -> tuple[object, ...]:
        (v,) = await ms.stable_offsets([(t, 0, 0)])
        return (v.last_stable_offset, v.high_watermark, v.aborted)

    state = await view()
    assert state == (hwm, hwm, [(pid, first, marker)])
    before = await _answers(ms, t, 0, hwm)
    await runify(ms, t, 0, (0, first))
    await runify(ms, t, 0, (marker + 1, hwm))
    assert await _run_rows(ms) == 2
    assert await view() == state
    assert await _answers(ms, t, 0, hwm) == before
    got = (await ms.find_batches(t, 0, 0, 1 << 30, 10_000)).batches
    assert [b.base_offset for b in got] == sorted(b.base_offset for b in got)
    assert len(got) == 3 + 4 + 2 and all(isinstance(b, BatchLocation) for b in got)


async def test_compactor_and_gc_over_run_rows(ms: Metastore, clock: FakeClock) -> None:
    created = await ms.create_topic("runs", 2, {})
    assert created.topic is not None
    t = created.topic.id
    objs = _objects(t, 2, 3, 4)
    for o in objs:
        await ms.commit_objects([o])
    infos = [await ms.get_object(o.key) for o in objs]
    ids = [i.id for i in infos if i is not None]
    plain = await ms.batches_in_objects([ids[1]])
    for p in (0, 1):
        await runify(ms, t, p)
    # the compactor's view is the same, batch by batch, with each batch's own object
    assert await ms.batches_in_objects([ids[1]]) == plain
    assert {b.object_id for b in await ms.partition_batches(t, 0)} == set(ids)
    # every object is referenced while a run names it through its head
    clock.advance(1000)
    assert await ms.mark_objects_deleting(created_before_ms=clock.now) == []
    # a swap of object 1's batches into a new object: the runs go back to rows
    new = NewObject(f"obj/{uuid.uuid4()}", 10_000, 1)
    repl = [dataclasses.replace(b, object_key=new.key, byte_pos=b.byte_pos + 1) for b in plain]
    swap = await ms.swap_batches(plain, repl, [new])
    assert swap.ok, swap.message
    assert swap.objects_deleting == [objs[1].key]
    assert await _run_rows(ms) == 0
    found = await ms.find_batches(t, 0, 0, 1 << 20)
    assert [(b.object_key, b.base_offset) for b in found.batches if b.object_key == new.key] == [
        (new.key, b.base_offset) for b in plain if b.partition == 0
    ]
    # retention over runs: every object goes once the log is gone, each when the
    # last run naming it (through its head) goes
    gone: list[str] = []
    for p in (0, 1):
        await runify(ms, t, p)
        await ms.delete_records(t, p, -1)
        res = await ms.enforce_retention(t, p)
        assert res.error is E.NONE
        gone += res.objects_deleting
        if p == 0:
            assert gone == []  # partition 1's run still names them all
    assert await _run_rows(ms) == 0
    assert sorted(gone) == sorted([objs[0].key, objs[2].key, new.key])
    clock.advance(1000)
    assert await ms.mark_objects_deleting(created_before_ms=clock.now) == []


@pytest.mark.postgres
async def test_postgres_group_commit_writes_run_rows(postgres_url: str, clock: FakeClock) -> None:
    """A group of several objects commits one row per partition; every batch is
    found at the offset its commit answered, in its own object."""


    ms = await open_metastore(postgres_url, now_ms=clock, auto_migrate=False)
    try:
        created = await ms.create_topic("runs", 8, {})
        assert created.topic is not None
        t = created.topic.id
        objs = _objects(t, 8, 4, 20)  # 640 batches: the COPY path
        answered = await ms.commit_objects(objs)
        assert await _run_rows(ms) == 8
        for o, res in zip(objs, answered, strict=True):
            for b, r in zip(o.batches, res.results, strict=True):
                assert r.error is E.NONE
                found = await ms.find_batches(t, b.partition, r.base_offset, 1, 1)
                (loc,) = found.batches
                want = (o.key, b.byte_pos, b.byte_len, r.base_offset)
                assert (loc.object_key, loc.byte_pos, loc.byte_len, loc.base_offset) == want
                assert loc.last_offset == r.base_offset + b.last_offset_delta
        # offsets contiguous, batch by batch
        for p in range(8):
            got = (await ms.find_batches(t, p, 0, 1 << 30, 10_000)).batches
            assert [b.base_offset for b in got[1:]] == [b.last_offset + 1 for b in got[:-1]]
            assert got[-1].last_offset + 1 == (await ms.find_batches(t, p, 0, 1)).high_watermark
        ids = [i.id for i in [await ms.get_object(o.key) for o in objs] if i is not None]
        stored: list[StoredBatch] = await ms.batches_in_objects([ids[2]])
        assert [(b.byte_pos, b.byte_len) for b in stored] == [(b.byte_pos, b.byte_len) for b in objs[2].batches]
        # one object alone with many batches per partition: runs too
        (one,) = _objects(t, 8, 1, 80)
        (res,) = await ms.commit_objects([one])
        assert await _run_rows(ms) == 16
        for b, r in zip(one.batches, res.results, strict=True):
            (loc,) = (await ms.find_batches(t, b.partition, r.base_offset, 1, 1)).batches
            assert (loc.object_key, loc.byte_pos, loc.base_offset) == (one.key, b.byte_pos, r.base_offset)
    finally:
        await ms.close()


async def test_postgres_key_cache_keeps_what_an_answer_needs(monkeypatch: pytest.MonkeyPatch) -> None:
    """The bounded id -> key cache of run rows' objects: when it is cleared to make
    room, the keys the current answer needs are all fetched again."""
    from metastore import postgres

    fetched: list[list[int]] = []

    class Fake(postgres.PostgresMetastore):
        def __init__(self) -> None:
            self._keys = {}

        async def _fetch(self, what: str, sql: str, *args: object) -> list[tuple[int, str]]:
            ids = list(args[0])  # type: ignore[call-overload]
            fetched.append(sorted(ids))
            return [(i, f"k{i}") for i in ids]

    def entries(*ids: int) -> bytes:
        e = np.zeros(len(ids), dtype=runs.ENTRY)
        e["object_id"] = ids
        return runs.pack(e)

    monkeypatch.setattr(postgres, "_KEY_CACHE", 3)
    fake = Fake()
    assert (await fake._run_keys([entries(1, 2), None]))[2] == "k2"
    keys = await fake._run_keys([entries(2, 3, 4)])
    assert {i: keys[i] for i in (2, 3, 4)} == {2: "k2", 3: "k3", 4: "k4"}
    assert fetched == [[1, 2], [2, 3, 4]]
    await fake._run_keys([entries(3, 4)])  # cached: no query
    assert len(fetched) == 2
