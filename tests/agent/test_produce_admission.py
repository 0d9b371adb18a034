"""Fast failure under overload (issue 43): a Produce that does not fit the memory budget,
or arrives while the store is slow, is answered at once with a retriable error
(NOT_ENOUGH_REPLICAS, throttle_time_ms set) instead of queueing; an idempotent
producer's retries then land exactly once, in order, with no epoch bump.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from agent.clock import ManualClock
from agent.metrics import METRICS
from agent.produce.admission import (
    FENCE_TTL_S,
    OVERLOADED,
    REJECTED,
    Admission,
    cache_bytes_of,
    memory_budget_of,
)
from agent.produce.budget import ByteBudget, share
from agent.produce.segment import ProduceItem
from agent.security.limits import ResponseBudget
from kafka_protocol.errors import ErrorCode
from kafka_protocol.messages import InitProducerIdRequest, ProduceRequest
from kafka_protocol.records import RecordBatchBuilder
from objectstore.segment import BatchMeta
from tests.agent.test_fetch_protocol import make_topic, raw_call

PT = ProduceRequest.TopicProduceData
TOPIC_ID = uuid.uuid4()


def _item(partition: int, seq: int, pid: int = 7, epoch: int = 0) -> ProduceItem:
    return ProduceItem(TOPIC_ID, partition, b"x" * 10, BatchMeta(1, 0, 0, 0, pid, epoch, seq, 0))


def _admission(
    capacity: int = 100, oldest: float = 0.0
) -> tuple[Admission, ManualClock, list[float]]:
    clock = ManualClock()
    pending = [oldest]
    return Admission(ByteBudget(capacity), clock, lambda: pending[0]), clock, pending


def _rejected(reason: str) -> float:
    return REJECTED.labels(reason)._value.get()


def _bumps() -> float:
    return METRICS.producer_epoch_bumps.labels("idempotent")._value.get()


# -- the decision -------------------------------------------------------------------


def test_slow_store_is_the_oldest_unacknowledged_segment_past_the_threshold() -> None:
    adm, _, pending = _admission()
    assert not adm.slow_store(5000)
    pending[0] = 4.9
    assert not adm.slow_store(5000)
    pending[0] = 5.1
    assert adm.slow_store(5000)
    assert not adm.slow_store(0)  # 0: never


def test_admit_at_once_within_the_grace_or_not_at_all() -> None:
    async def run() -> None:
        adm, _, _ = _admission(100)
        assert await adm.admit(60, 0)
        assert not await adm.admit(60, 0)  # over budget, no grace: refused now
        waiting = asyncio.ensure_future(adm.admit(60, 30.0))
        await asyncio.sleep(0)  # let it queue
        assert not waiting.done()
        adm.budget.release_nowait(60)  # room within the grace: admitted
        assert await waiting
        assert adm.budget.used == 60
        assert not await adm.admit(60, 0.001)  # the grace passes: refused, nothing held
        assert adm.budget.used == 60

    asyncio.run(run())


def test_a_refused_sequence_fences_later_ones_until_it_comes_back() -> None:
    adm, clock, _ = _admission()
    adm.fence([_item(0, 10), _item(1, 3), ProduceItem(TOPIC_ID, 2, b"", BatchMeta(1, 0, 0, 0))])
    assert adm.fences == 2  # not the non-idempotent batch
    # Pipelined after the refused one: same producer, partition and epoch, higher sequence.
    assert adm.fenced([_item(0, 15), _item(1, 8), _item(2, 99), _item(0, 15, pid=8)]) == [0, 1]
    # The retry of sequence 10 lifts partition 0's fence; a new epoch lifts partition 1's.
    assert adm.fenced([_item(0, 10), _item(1, 0, epoch=1)]) == []
    assert adm.fenced([_item(0, 15), _item(1, 8)]) == []
    # A fence whose retry never comes ends (the sequencer still refuses the gap).
    adm.fence([_item(3, 4)])
    clock._mono += FENCE_TTL_S + 1
    assert adm.fenced([_item(3, 9)]) == []


def test_produce_and_responses_share_one_budget() -> None:
    produce, responses = ByteBudget(100), ResponseBudget(100)
    share(produce, responses, 150)
    assert produce.try_acquire(40)
    assert responses.capacity == 100 and responses.available() == 100
    responses.add(100)  # unread responses and frames being read
    assert not produce.try_acquire(20)  # 40 + 20 + 100 > 150
    assert produce.try_acquire(10)
    assert responses.capacity == 100  # 150 - 50 produce
    assert produce.try_acquire(0) and produce.used == 50
    produce.release_nowait(50)
    assert produce.try_acquire(30)  # 30 + 100 <= 150
    assert responses.capacity == 100 and responses.available() == 0
    responses.sub(100)
    assert produce.try_acquire(60)  # 90 <= 100 (its own cap)
    # A Fetch plans into what is left.
    assert responses.capacity == 60 and responses.available() == 60


def test_the_budget_defaults_to_the_larger_of_the_old_knobs() -> None:
    from agent.config import AgentConfig

    cfg = AgentConfig(max_buffered_bytes=64 << 20, queued_max_request_bytes=128 << 20)
    assert memory_budget_of(cfg) == 128 << 20
    assert cache_bytes_of(cfg) == cfg.fetch_cache_bytes
    # One budget set: the block cache gets at most half, produce and responses the rest.
    one = cfg.with_overrides(memory_budget_bytes=300 << 20)
    assert cache_bytes_of(one) == 150 << 20 and memory_budget_of(one) == 150 << 20
    small_cache = cfg.with_overrides(memory_budget_bytes=300 << 20, fetch_cache_bytes=64 << 20)
    assert cache_bytes_of(small_cache) == 64 << 20 and memory_budget_of(small_cache) == 236 << 20


# -- the handler --------------------------------------------------------------------


def _produce(agent: Any, topic: str, seq: int, pid: int, epoch: int, n: int = 5) -> Any:
    b = RecordBatchBuilder(producer_id=pid, producer_epoch=epoch, base_sequence=seq)
    for i in range(n):
        b.append(None, f"v{seq + i}".encode())
    req = ProduceRequest(
        acks=-1, timeout_ms=10_000,
        topic_data=[PT(name=topic, partition_data=[PT.PartitionProduceData(index=0, records=b.build())])],
    )  # fmt: skip
    return raw_call(agent, req, 9)


def _set(agent: Any, fn: Callable[[], None]) -> None:
    async def run() -> None:
        fn()

    agent.call(run())


@pytest.mark.interop
def test_over_budget_produce_is_refused_at_once_and_its_retry_lands(agent_factory: Any) -> None:
    agent = agent_factory(produce_admission_wait_ms=0, produce_reject_throttle_ms=250)
    make_topic(agent, "adm")
    init = raw_call(
        agent, InitProducerIdRequest(transactional_id=None, transaction_timeout_ms=60_000), 4
    )
    pid, epoch = init.producer_id, init.producer_epoch
    budget = agent.broker.pipeline.budget
    full = _rejected("budget")
    _set(agent, lambda: budget.try_acquire(budget.capacity))  # someone holds it all
    t0 = time.monotonic()
    resp = _produce(agent, "adm", 0, pid, epoch)
    assert time.monotonic() - t0 < 2  # answered at once, not queued
    pr = resp.responses[0].partition_responses[0]
    assert (pr.error_code, pr.base_offset, resp.throttle_time_ms) == (
        ErrorCode.NOT_ENOUGH_REPLICAS,
        -1,
        250,
    )
    assert _rejected("budget") == full + 1
    _set(agent, lambda: budget.release_nowait(budget.capacity))
    # The next batch of that producer (pipelined behind the refused one) is refused too ...
    later = _produce(agent, "adm", 5, pid, epoch).responses[0].partition_responses[0]
    assert later.error_code == OVERLOADED
    # ... until the refused sequence is retried: then both land, in order, once.
    assert (
        _produce(agent, "adm", 0, pid, epoch).responses[0].partition_responses[0].base_offset == 0
    )
    assert (
        _produce(agent, "adm", 5, pid, epoch).responses[0].partition_responses[0].base_offset == 5
    )
    # A slow store refuses at once as well.
    slow = _rejected("slow_store")
    _set(agent, lambda: setattr(agent.broker.pipeline.admission, "_oldest", lambda: 60.0))
    pr = _produce(agent, "adm", 10, pid, epoch).responses[0].partition_responses[0]
    assert pr.error_code == OVERLOADED and _rejected("slow_store") == slow + 1


# -- a real client --------------------------------------------------------------------


@pytest.mark.interop
def test_idempotent_librdkafka_under_a_tiny_budget_delivers_each_message_once_in_order(
    agent_factory: Any,
) -> None:
    agent = agent_factory(
        max_buffered_bytes=1 << 20, memory_budget_bytes=256 << 10, produce_admission_wait_ms=0,
        produce_reject_throttle_ms=20, flush_interval_ms=100, flush_min_interval_ms=100,
    )  # fmt: skip  # segments of ~0.5 MB: a few in flight fill the budget
    make_topic(agent, "tiny", partitions=3)
    refused, bumps = sum(_rejected(r) for r in ("budget", "sequence")), _bumps()
    p = Producer({
        "bootstrap.servers": agent.bootstrap, "enable.idempotence": True, "linger.ms": 20,
        "batch.size": 256 * 1024, "message.timeout.ms": 60_000, "retry.backoff.ms": 20, "retry.backoff.max.ms": 100,
    })  # fmt: skip
    errors: list[Any] = []
    value = b"." * 1000
    n = 3000  # ~3 MB through a 256 KiB budget
    for i in range(n):
        p.produce("tiny", f"{i % 3}:{i // 3}:".encode() + value, partition=i % 3,
                  on_delivery=lambda err, msg: err and errors.append(err))  # fmt: skip
        if i % 500 == 0:
            p.poll(0)
    assert p.flush(60) == 0 and errors == []
    assert (
        sum(_rejected(r) for r in ("budget", "sequence")) > refused
    )  # the fast failure was exercised
    assert _bumps() == bumps  # and no producer was bumped for it

    c = Consumer(
        {
            "bootstrap.servers": agent.bootstrap,
            "group.id": "tiny-check",
            "enable.auto.commit": False,
        }
    )
    c.assign([TopicPartition("tiny", part, 0) for part in range(3)])
    seen: dict[int, list[int]] = {0: [], 1: [], 2: []}
    deadline = time.monotonic() + 30
    while sum(map(len, seen.values())) < n and time.monotonic() < deadline:
        for m in c.consume(500, 1.0):
            if m.error() is None:
                part, k, _ = m.value().split(b":", 2)
                seen[int(part)].append(int(k))
    c.close()
    for part in range(3):  # every message exactly once, in order
        assert seen[part] == list(range(len(range(part, n, 3)))), part
