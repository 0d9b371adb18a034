"""Aborting stalled segments (issue 43): a Produce whose segment's upload stalls past
produce_abort_ms is answered NOT_ENOUGH_REPLICAS ("not persisted", retriable) and is
never committed, even once the store recovers; an idempotent librdkafka producer
rides a stall out with every message stored once, in order, and no epoch bump.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from agent.clock import ManualClock
from agent.metrics import METRICS
from agent.produce import ProduceItem, ProducePipeline
from kafka_protocol.errors import ErrorCode as KafkaErrorCode
from kafka_protocol.messages import InitProducerIdRequest, ProduceRequest
from kafka_protocol.records import RecordBatchBuilder
from metastore import ErrorCode, open_metastore
from objectstore import open_object_store
from objectstore.segment import BatchMeta
from tests.agent.test_fetch_protocol import make_topic, raw_call

NOT_PERSISTED = KafkaErrorCode.NOT_ENOUGH_REPLICAS
PT = ProduceRequest.TopicProduceData


def _batch(seq: int = -1, pid: int = -1, n: int = 3, tag: str = "v") -> bytes:
    b = RecordBatchBuilder(producer_id=pid, producer_epoch=0 if pid >= 0 else -1, base_sequence=seq)
    for i in range(n):
        b.append(None, f"{tag}{i}".encode())
    return b.build()


def _item(topic_id: uuid.UUID, data: bytes, partition: int = 0) -> ProduceItem:
    return ProduceItem(topic_id, partition, data, BatchMeta.from_record_batch(data))


def _aborted() -> float:
    return METRICS.produce_aborted.labels("stalled_upload")._value.get()


def _bumps() -> float:
    return METRICS.producer_epoch_bumps.labels("idempotent")._value.get()


class StallingStore:
    """A store whose PUTs wait while ``stalled`` (a SIGSTOPped endpoint)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.running = asyncio.Event()
        self.running.set()

    async def put(self, key: str, data: bytes | memoryview) -> None:
        await self.running.wait()
        await self.inner.put(key, data)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


class GatedMeta:
    """A metastore whose commits wait at ``gate`` once ``entered`` is set (a commit in progress)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.gate = asyncio.Event()
        self.entered = asyncio.Event()

    async def commit_objects(self, objects: Any) -> Any:
        self.entered.set()
        await self.gate.wait()
        return await self.inner.commit_objects(objects)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


@pytest.fixture
async def meta(tmp_path: Path) -> AsyncIterator[Any]:
    ms = await open_metastore(f"sqlite:///{tmp_path / 'meta.db'}")
    yield ms
    await ms.close()


def _pipeline(store: Any, meta: Any, clock: ManualClock, **kw: Any) -> ProducePipeline:
    opts: dict[str, Any] = dict(
        agent_id="agent-1", flush_bytes=1 << 20, flush_interval_ms=250, upload_concurrency=2,
        max_buffered_bytes=1 << 20, clock=clock, abort_ms=300,
    )  # fmt: skip
    opts.update(kw)
    p = ProducePipeline(store, meta, **opts)
    p.start(ticker=False)
    return p


async def _until(cond: Any, seconds: float = 5.0) -> None:
    deadline = time.monotonic() + seconds
    while not cond():
        assert time.monotonic() < deadline, "condition not met in time"
        await asyncio.sleep(0.005)


# -- the pipeline ---------------------------------------------------------------------


@pytest.mark.parametrize("prefix", ["segments/", "journal/"])
async def test_a_stalled_segment_is_answered_not_persisted_and_never_committed(
    meta: Any, prefix: str
) -> None:
    topic = (await meta.create_topic("t", 1)).topic
    clock = ManualClock()
    store = StallingStore(open_object_store("memory://", retry=False))
    p = _pipeline(store, meta, clock, key_prefix=prefix)
    store.running.clear()
    first, later = _batch(seq=0, pid=7), _batch(seq=3, pid=7)
    await p.reserve(len(first) + len(later))
    fut = p.append([_item(topic.id, first)], len(first))
    p.seal()
    behind = p.append([_item(topic.id, later)], len(later))  # pipelined, in the open segment
    aborted = _aborted()
    clock.advance(0.29)
    p.tick()
    assert not fut.done()  # not yet past the deadline
    clock.advance(0.02)
    p.tick()
    # Both answered "not persisted" at once: the stalled one and the one behind it.
    assert [r.error for r in await fut] == [NOT_PERSISTED]
    assert [r.error for r in await behind] == [NOT_PERSISTED]
    assert _aborted() == aborted + 2  # requests
    assert p.budget.used == 0 and p.oldest_pending_s() == 0.0
    # Pipelined batches of that producer are fenced until sequence 0 is retried.
    assert p.admission.fenced([_item(topic.id, later)]) == [0]
    store.running.set()  # the store recovers
    await p.drain()
    found = await meta.find_batches(topic.id, 0, 0, 1 << 20)
    assert found.high_watermark == 0  # nothing of the aborted segments was committed
    # The retry (same epoch and sequence) lifts the fence and lands once, then the one behind it.
    assert p.admission.fenced([_item(topic.id, first)]) == []
    assert p.admission.fenced([_item(topic.id, later)]) == []
    await p.reserve(len(first) + len(later))
    retry = p.append([_item(topic.id, first)], len(first))
    again = p.append([_item(topic.id, later)], len(later))
    p.seal()
    assert [(r.error, r.base_offset) for r in await asyncio.wait_for(retry, 10)] == [
        (ErrorCode.NONE, 0)
    ]
    assert [(r.error, r.base_offset) for r in await asyncio.wait_for(again, 10)] == [
        (ErrorCode.NONE, 3)
    ]
    await p.close()
    assert (await meta.find_batches(topic.id, 0, 0, 1 << 20)).high_watermark == 6


async def test_a_segment_whose_commit_started_finishes_and_later_ones_are_cut(meta: Any) -> None:
    topic = (await meta.create_topic("t", 1)).topic
    clock = ManualClock()
    gated = GatedMeta(meta)
    p = _pipeline(open_object_store("memory://", retry=False), gated, clock)
    one, two = _batch(tag="a"), _batch(tag="b")
    await p.reserve(len(one) + len(two))
    committing = p.append([_item(topic.id, one)], len(one))
    p.seal()
    await asyncio.wait_for(gated.entered.wait(), 5)  # its commit has started
    waiting = p.append([_item(topic.id, two)], len(two))
    p.seal()  # uploaded, waits for the commit ahead of it
    clock.advance(10)
    p.tick()
    assert [r.error for r in await waiting] == [NOT_PERSISTED]
    assert not committing.done()  # not abortable: its commit goes on
    gated.gate.set()
    assert [(r.error, r.base_offset) for r in await asyncio.wait_for(committing, 10)] == [
        (ErrorCode.NONE, 0)
    ]
    await p.close()
    found = await meta.find_batches(topic.id, 0, 0, 1 << 20)
    assert found.high_watermark == 3 and len(found.batches) == 1  # "b" never committed
    assert p.budget.used == 0


async def test_no_abort_when_off(meta: Any) -> None:
    topic = (await meta.create_topic("t", 1)).topic
    clock = ManualClock()
    store = StallingStore(open_object_store("memory://", retry=False))
    p = _pipeline(store, meta, clock, abort_ms=0)
    store.running.clear()
    data = _batch()
    await p.reserve(len(data))
    fut = p.append([_item(topic.id, data)], len(data))
    p.seal()
    clock.advance(60)
    p.tick()
    await asyncio.sleep(0)
    assert not fut.done()
    store.running.set()
    assert [r.error for r in await asyncio.wait_for(fut, 10)] == [ErrorCode.NONE]
    await p.close()


# -- a real agent ---------------------------------------------------------------------


def _stalled_agent(agent_factory: Any, tmp_path: Path) -> tuple[Any, Path]:
    stall = tmp_path / "stall"
    objects = tmp_path / "objects"
    objects.mkdir()
    agent = agent_factory(
        objects=f"file://{objects}?latency_stall_file={stall}", produce_abort_ms=300
    )
    return agent, stall


@pytest.mark.interop
def test_a_produce_in_flight_when_the_store_stalls_is_refused_and_never_stored(
    agent_factory: Any, tmp_path: Path
) -> None:
    agent, stall = _stalled_agent(agent_factory, tmp_path)
    topic_id = make_topic(agent, "stall")
    init = raw_call(
        agent, InitProducerIdRequest(transactional_id=None, transaction_timeout_ms=60_000), 4
    )

    def produce(data: bytes) -> Any:
        req = ProduceRequest(
            acks=-1, timeout_ms=10_000,
            topic_data=[PT(name="stall", partition_data=[PT.PartitionProduceData(index=0, records=data)])],
        )  # fmt: skip
        return raw_call(agent, req, 9).responses[0].partition_responses[0]

    stall.touch()
    t0 = time.monotonic()
    pr = produce(_batch(seq=0, pid=init.producer_id, tag="lost"))
    assert (pr.error_code, pr.base_offset) == (NOT_PERSISTED, -1)
    assert 0.25 < time.monotonic() - t0 < 3  # about the deadline, not the stall
    stall.unlink()  # the store recovers
    agent.call(agent.broker.pipeline.drain())
    pr = produce(_batch(tag="kept"))
    assert (pr.error_code, pr.base_offset) == (0, 0)  # the aborted batch holds no offsets

    async def rows() -> Any:
        return await agent.broker.meta.find_batches(topic_id, 0, 0, 1 << 20)

    found = agent.call(rows())
    assert found.high_watermark == 3 and len(found.batches) == 1


@pytest.mark.interop
def test_idempotent_librdkafka_rides_out_a_stall_once_in_order_without_a_bump(
    agent_factory: Any, tmp_path: Path
) -> None:
    agent, stall = _stalled_agent(agent_factory, tmp_path)
    make_topic(agent, "ride", partitions=2)
    bumps, aborted = _bumps(), _aborted()
    p = Producer({
        "bootstrap.servers": agent.bootstrap, "enable.idempotence": True, "linger.ms": 5,
        "message.timeout.ms": 30_000, "retry.backoff.ms": 20, "retry.backoff.max.ms": 100,
    })  # fmt: skip
    errors: list[Any] = []
    n = 2000

    def send(i: int) -> None:
        p.produce("ride", f"{i % 2}:{i // 2}".encode(), partition=i % 2,
                  on_delivery=lambda err, msg: err and errors.append(err))  # fmt: skip

    for i in range(n // 2):
        send(i)
    assert p.flush(30) == 0
    stall.touch()
    for i in range(n // 2, n):
        send(i)
        p.poll(0)
    deadline = time.monotonic() + 15
    while _aborted() == aborted:  # the stall outlived produce_abort_ms with requests in it
        assert time.monotonic() < deadline, "nothing was aborted"
        p.poll(0.05)
    stall.unlink()
    assert p.flush(30) == 0 and errors == []
    assert _bumps() == bumps  # no epoch bump: every abort was retried with the same sequence

    c = Consumer(
        {"bootstrap.servers": agent.bootstrap, "group.id": "ride", "enable.auto.commit": False}
    )
    c.assign([TopicPartition("ride", part, 0) for part in range(2)])
    seen: dict[int, list[int]] = {0: [], 1: []}
    deadline = time.monotonic() + 30
    while sum(map(len, seen.values())) < n and time.monotonic() < deadline:
        for m in c.consume(500, 0.5):
            if m.error() is None:
                part, k = m.value().split(b":")
                seen[int(part)].append(int(k))
    c.close()
    for part in range(2):  # every message exactly once, in order
        assert seen[part] == list(range(n // 2)), part
