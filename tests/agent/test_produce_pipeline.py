"""The produce pipeline: acknowledge only after PUT + commit, flush by size and by
time (injected clock, no sleeps), commit in seal order, back-pressure, failures."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator

import pytest

from agent.clock import ManualClock
from agent.produce import KAFKA_STORAGE_ERROR, ProduceItem, ProducePipeline
from kafka_protocol.records import RecordBatchBuilder
from metastore import ErrorCode, open_metastore
from objectstore import open_object_store
from objectstore.errors import TransientError
from objectstore.faults import Fault, FaultyStore
from objectstore.segment import BatchMeta
from objectstore.segment_index import read_index


def batch(n: int = 3, value: bytes = b"v") -> bytes:
    b = RecordBatchBuilder()
    for i in range(n):
        b.append(None, value + str(i).encode(), timestamp_ms=1000 + i)
    return b.build()


def item(topic_id: uuid.UUID, partition: int, data: bytes) -> ProduceItem:
    return ProduceItem(topic_id, partition, data, BatchMeta.from_record_batch(data))


@pytest.fixture
async def meta(tmp_path) -> AsyncIterator:
    ms = await open_metastore(f"sqlite:///{tmp_path / 'meta.db'}")
    yield ms
    await ms.close()


@pytest.fixture
async def topic(meta):
    res = await meta.create_topic("t", 4)
    assert res.error == ErrorCode.NONE
    return res.topic


def make(store, meta, clock, **kw) -> ProducePipeline:
    opts = dict(
        agent_id="agent-1", flush_bytes=1 << 20, flush_interval_ms=250,
        upload_concurrency=2, max_buffered_bytes=1 << 20, clock=clock,
    )
    opts.update(kw)
    return ProducePipeline(store, meta, **opts)


async def test_time_flush_acknowledges_only_after_commit(meta, topic):
    clock = ManualClock()
    store = open_object_store("memory://", retry=False)
    p = make(store, meta, clock)
    p.start(ticker=False)
    data = batch()
    await p.reserve(len(data))
    fut = p.append([item(topic.id, 0, data), item(topic.id, 1, data)], len(data) * 2)
    p.tick()  # interval not reached yet: nothing sealed
    await asyncio.sleep(0)
    assert not fut.done()
    assert [o async for o in store.list("")] == []
    clock.advance(0.25)
    p.tick()
    results = await asyncio.wait_for(fut, 10)
    assert [r.error for r in results] == [ErrorCode.NONE, ErrorCode.NONE]
    assert [r.base_offset for r in results] == [0, 0]
    objs = [o async for o in store.list("")]
    assert len(objs) == 1
    index = await read_index(store, objs[0].key)
    assert sorted((e.partition, e.record_count) for e in index) == [(0, 3), (1, 3)]
    await p.close()


async def test_size_flush_and_commit_order(meta, topic):
    clock = ManualClock()
    store = open_object_store("memory://", retry=False)
    data = batch(50, b"x" * 100)
    p = make(store, meta, clock, flush_bytes=len(data) * 2)
    p.start(ticker=False)
    futs = []
    for _ in range(6):
        await p.reserve(len(data))
        futs.append(p.append([item(topic.id, 2, data)], len(data)))
    results = await asyncio.wait_for(asyncio.gather(*futs), 10)
    # Size-triggered seals, committed in order: offsets follow append order.
    assert [r[0].base_offset for r in results] == [i * 50 for i in range(6)]
    assert len([o async for o in store.list("")]) == 3
    await p.close()


async def test_upload_failure_is_an_error_not_an_ack(meta, topic):
    clock = ManualClock()
    store = FaultyStore(open_object_store("memory://", retry=False))
    store.inject("put", Fault.TIMEOUT)
    p = make(store, meta, clock)
    p.start(ticker=False)
    data = batch()
    await p.reserve(len(data))
    fut = p.append([item(topic.id, 0, data)], len(data))
    p.seal()
    (res,) = await asyncio.wait_for(fut, 10)
    assert res.error == KAFKA_STORAGE_ERROR
    found = await meta.find_batches(topic.id, 0, 0, 1 << 20)
    assert found.high_watermark == 0
    # The next segment goes through and gets offset 0: nothing was half-committed.
    await p.reserve(len(data))
    fut2 = p.append([item(topic.id, 0, data)], len(data))
    p.seal()
    (res2,) = await asyncio.wait_for(fut2, 10)
    assert (res2.error, res2.base_offset) == (ErrorCode.NONE, 0)
    await p.close()


async def test_lost_put_response_with_retries_still_commits(meta, topic):
    from objectstore.retry import RetryingStore, RetryPolicy

    clock = ManualClock()
    faulty = FaultyStore(open_object_store("memory://", retry=False))
    faulty.inject("put", Fault.LOST_RESPONSE)
    delays: list[float] = []

    async def fake_sleep(d: float) -> None:
        delays.append(d)

    store = RetryingStore(faulty, RetryPolicy(max_attempts=3), sleep=fake_sleep)
    p = make(store, meta, clock)
    p.start(ticker=False)
    data = batch()
    await p.reserve(len(data))
    fut = p.append([item(topic.id, 3, data)], len(data))
    p.seal()
    (res,) = await asyncio.wait_for(fut, 10)
    assert (res.error, res.base_offset) == (ErrorCode.NONE, 0)
    assert len(delays) == 1
    await p.close()


async def test_unknown_partition_is_per_batch(meta, topic):
    clock = ManualClock()
    store = open_object_store("memory://", retry=False)
    p = make(store, meta, clock)
    p.start(ticker=False)
    data = batch()
    await p.reserve(len(data) * 2)
    fut = p.append([item(topic.id, 0, data), item(uuid.uuid4(), 0, data)], len(data) * 2)
    p.seal()
    ok, bad = await asyncio.wait_for(fut, 10)
    assert ok.error == ErrorCode.NONE
    assert bad.error == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    await p.close()


async def test_backpressure_blocks_until_commit(meta, topic):
    clock = ManualClock()
    store = open_object_store("memory://", retry=False)
    data = batch()
    p = make(store, meta, clock, max_buffered_bytes=len(data))
    p.start(ticker=False)
    await p.reserve(len(data))
    fut = p.append([item(topic.id, 0, data)], len(data))
    second = asyncio.ensure_future(p.reserve(len(data)))
    await asyncio.sleep(0)
    assert not second.done(), "second request admitted over the memory budget"
    p.seal()
    await asyncio.wait_for(fut, 10)
    await asyncio.wait_for(second, 10)
    assert p.budget.used == len(data)
    await p.budget.release(len(data))
    await p.close()


async def test_close_flushes_buffered_data(meta, topic):
    clock = ManualClock()
    store = open_object_store("memory://", retry=False)
    p = make(store, meta, clock)
    p.start(ticker=False)
    data = batch()
    await p.reserve(len(data))
    fut = p.append([item(topic.id, 1, data)], len(data))
    await p.close()
    (res,) = fut.result()
    assert res.error == ErrorCode.NONE


def test_transient_error_type_is_retriable():
    assert TransientError("k").retriable


class _GatedMeta:
    """The real metastore, with the first commit held until released (so that
    the following segments finish uploading meanwhile) and every group recorded."""

    def __init__(self, meta) -> None:
        self.meta = meta
        self.gate = asyncio.Event()
        self.first = asyncio.Event()
        self.groups: list[list[str]] = []

    async def commit_objects(self, objects):
        self.groups.append([o.key for o in objects])
        if len(self.groups) == 1:
            self.first.set()
            await self.gate.wait()
        return await self.meta.commit_objects(objects)

    def __getattr__(self, name):
        return getattr(self.meta, name)


class _CountingStore:
    """Sets ``done`` after ``n`` PUTs."""

    def __init__(self, inner, n: int) -> None:
        self.inner = inner
        self.n = n
        self.done = asyncio.Event()

    async def put(self, key, data):
        await self.inner.put(key, data)
        self.n -= 1
        if self.n == 0:
            self.done.set()

    def __getattr__(self, name):
        return getattr(self.inner, name)


async def test_ready_segments_are_committed_as_one_group_in_seal_order(meta, topic):
    clock = ManualClock()
    store = _CountingStore(open_object_store("memory://", retry=False), 5)
    gated = _GatedMeta(meta)
    data = batch(10, b"y" * 50)
    p = make(store, gated, clock, flush_bytes=1)  # every append seals a segment
    p.start(ticker=False)
    futs = []
    for i in range(5):
        await p.reserve(len(data))
        futs.append(p.append([item(topic.id, i % 2, data), item(topic.id, 3, data)], len(data)))
        await asyncio.wait_for(gated.first.wait(), 10)  # the first commit is held
    await asyncio.wait_for(store.done.wait(), 10)  # all five uploaded
    gated.gate.set()
    results = await asyncio.wait_for(asyncio.gather(*futs), 10)
    assert [len(g) for g in gated.groups] == [1, 4]  # the other four waited together
    assert [r[1].base_offset for r in results] == [0, 10, 20, 30, 40]  # seal order
    assert [r[0].base_offset for r in results] == [0, 0, 10, 10, 20]
    assert all(r.error == ErrorCode.NONE for rs in results for r in rs)
    await p.close()
