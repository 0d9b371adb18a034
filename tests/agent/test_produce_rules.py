"""Produce rules a Kafka client relies on: keys on compacted topics, and the request's
``timeout_ms`` (REQUEST_TIMED_OUT, then an idempotent retry lands exactly once)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, Producer

from agent.metrics import METRICS
from kafka_protocol.messages import ProduceRequest
from kafka_protocol.records import RecordBatchBuilder
from tests.agent.test_fetch_protocol import make_topic, raw_call

pytestmark = pytest.mark.interop

PT = ProduceRequest.TopicProduceData


def _produce_raw(agent: Any, topic: str, records: list[tuple[bytes | None, bytes]], **builder: Any) -> Any:
    b = RecordBatchBuilder(**builder)
    for key, value in records:
        b.append(key, value)
    req = ProduceRequest(
        acks=-1, timeout_ms=10_000,
        topic_data=[PT(name=topic, partition_data=[PT.PartitionProduceData(index=0, records=b.build())])],
    )  # fmt: skip
    return raw_call(agent, req, 9).responses[0].partition_responses[0]


def _deliver(agent: Any, topic: str, keys: list[bytes | None], **conf: Any) -> list[Any]:
    p = Producer({"bootstrap.servers": agent.bootstrap, "linger.ms": 5, **conf})
    errors: list[Any] = []
    for i, key in enumerate(keys):
        p.produce(topic, f"v{i}".encode(), key=key, on_delivery=lambda err, msg: errors.append(err))
    assert p.flush(30) == 0
    return errors


def test_compacted_topic_refuses_records_without_a_key(floe_agent: Any) -> None:
    make_topic(floe_agent, "compacted", config={"cleanup.policy": "compact"})
    make_topic(floe_agent, "both", config={"cleanup.policy": "compact,delete"})
    make_topic(floe_agent, "plain")
    # librdkafka, uncompressed and compressed: a keyless record is refused, a keyed one lands
    # (each in its own batch: a batch with one keyless record is refused whole, as in Kafka).
    for compression in ("none", "lz4"):
        conf = {"compression.type": compression}
        assert [e.code() for e in _deliver(floe_agent, "compacted", [None], **conf)] == [KafkaError.INVALID_RECORD]
        assert _deliver(floe_agent, "compacted", [b"k"], **conf) == [None], compression
    assert [e.code() if e else None for e in _deliver(floe_agent, "both", [None])] == [KafkaError.INVALID_RECORD]
    assert _deliver(floe_agent, "plain", [None]) == [None]  # a delete-policy topic takes them
    # One keyless record refuses its whole batch, with Kafka's message.
    pr = _produce_raw(floe_agent, "compacted", [(b"a", b"1"), (None, b"2")])
    assert pr.error_code == 87  # INVALID_RECORD
    assert pr.error_message == "Compacted topic cannot accept message without key in topic partition compacted-0."

    async def hwm(name: str) -> int:
        t = await floe_agent.broker.meta.get_topic(name)
        return int((await floe_agent.broker.meta.list_offsets(t.id, 0, -1)).offset)

    assert floe_agent.call(hwm("compacted")) == 2  # the two keyed records, nothing else


class _HeldPuts:
    """The agent's object store with PUTs held until released (a stalled bucket)."""

    def __init__(self, store: Any) -> None:
        self._store = store
        self.release = asyncio.Event()
        self.held = 0

    async def put(self, key: str, data: bytes) -> None:
        self.held += 1
        await self.release.wait()
        await self._store.put(key, data)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)


def _until(cond: Any, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.02)


def test_produce_past_its_timeout_is_request_timed_out_and_an_idempotent_retry_lands_once(floe_agent: Any) -> None:
    """A stalled bucket: the Produce is answered REQUEST_TIMED_OUT at its timeout_ms (as
    Kafka answers acks it cannot satisfy), the client retries with the same epoch and
    sequences, and once the bucket answers every record is in the log exactly once."""
    make_topic(floe_agent, "stalled")
    pipeline = floe_agent.broker.pipeline
    held = _HeldPuts(pipeline._store)
    pipeline._store = held
    timeouts = METRICS.produce_timeouts._value.get()
    p = Producer({
        "bootstrap.servers": floe_agent.bootstrap, "enable.idempotence": True, "linger.ms": 5,
        "request.timeout.ms": 1000, "message.timeout.ms": 60_000, "retry.backoff.ms": 50,
    })  # fmt: skip
    errors: list[Any] = []
    for i in range(50):
        p.produce("stalled", f"v{i}".encode(), key=str(i).encode(), on_delivery=lambda err, msg: errors.append(err))
    p.poll(0)
    # The first requests time out on the agent (not in the client: it gets an answer).
    _until(lambda: METRICS.produce_timeouts._value.get() > timeouts)
    floe_agent.loop.call_soon_threadsafe(held.release.set)
    assert p.flush(60) == 0
    assert errors == [None] * 50
    c = Consumer({"bootstrap.servers": floe_agent.bootstrap, "group.id": "g", "auto.offset.reset": "earliest"})
    c.subscribe(["stalled"])
    values: list[bytes] = []
    deadline = time.monotonic() + 30
    while len(values) < 50 and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is not None and m.error() is None:
            values.append(m.value())
    extra = c.consume(num_messages=100, timeout=1.0)  # nothing more: no duplicate landed
    c.close()
    assert sorted(values) == sorted(f"v{i}".encode() for i in range(50))
    assert [m for m in extra if m.error() is None] == []
    assert held.held >= 1
