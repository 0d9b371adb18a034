"""Idempotent producers through a fault proxy that swallows Produce responses.

Clients talk to the agent through :class:`FaultProxy` (the agent advertises the
proxy's port, so every reconnection goes through it too). For every third
Produce response the proxy closes the client's connection instead of
forwarding it: the batch is committed but the client must retry it with the
same producer id and sequence. The agent has to answer the retry with the
original offset (a duplicate), so the log ends up with every message exactly
once, in order, at contiguous offsets.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import pytest

from tests.interop._clients import confluent_consume, create_topic, unique_topic
from tests.interop._proxy import FaultProxy

pytestmark = [pytest.mark.interop, pytest.mark.slow, pytest.mark.timeout(180)]

PARTITIONS = 3
WAVES = 20
PER_WAVE = 15
N = WAVES * PER_WAVE


@pytest.fixture
def proxied_agent(
    agent_process_factory: Callable[..., object],
) -> Iterator[tuple[object, FaultProxy]]:
    proxy = FaultProxy(drop_every=3, max_drops=12).start()
    agent = agent_process_factory(start=False, advertised_port=proxy.port)
    proxy.upstream_port = agent.port  # type: ignore[attr-defined]
    agent.start()  # type: ignore[attr-defined]
    try:
        yield agent, proxy
    finally:
        proxy.close()


def _value(i: int) -> bytes:
    return f"seq={i:06d}".encode()


def _check_log(bootstrap: str, topic: str, proxy: FaultProxy) -> None:
    from confluent_kafka import Consumer, TopicPartition

    assert proxy.dropped >= 3, (
        f"the proxy swallowed only {proxy.dropped} of {proxy.produce_responses} Produce responses"
    )
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "wm", "enable.auto.commit": False})
    try:
        hwm = {
            p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
            for p in range(PARTITIONS)
        }
    finally:
        c.close()
    got = confluent_consume(bootstrap, topic, hwm)
    expected = {p: [_value(i) for i in range(N) if i % PARTITIONS == p] for p in range(PARTITIONS)}
    for p in range(PARTITIONS):
        recs = sorted((r for r in got if r.partition == p), key=lambda r: r.offset)
        values = [r.value for r in recs]
        dups = len(values) - len(set(values))
        lost = sorted(set(expected[p]) - set(values))
        assert dups == 0, (
            f"partition {p}: {dups} duplicates (high watermark {hwm[p]}, want {len(expected[p])})"
        )
        assert not lost, f"partition {p}: {len(lost)} messages lost, e.g. {lost[:5]}"
        assert [r.offset for r in recs] == list(range(len(recs))), (
            f"partition {p}: offsets not contiguous"
        )
        assert values == expected[p], f"partition {p}: order differs from the send order"
        assert hwm[p] == len(expected[p]), (
            f"partition {p}: high watermark {hwm[p]} != {len(expected[p])}"
        )


def test_confluent_idempotent_producer_survives_lost_responses(proxied_agent) -> None:
    from confluent_kafka import Producer

    _agent, proxy = proxied_agent
    bootstrap = f"127.0.0.1:{proxy.port}"
    topic = unique_topic("idem-cf")
    create_topic(bootstrap, topic, PARTITIONS)
    p = Producer(
        {
            "bootstrap.servers": bootstrap,
            "enable.idempotence": True,
            "linger.ms": 0,
            "batch.num.messages": 5,  # several in-flight requests per wave
            "retry.backoff.ms": 20,
            "reconnect.backoff.ms": 10,
            "reconnect.backoff.max.ms": 200,
            "message.timeout.ms": 60000,
        }
    )
    errors: list[str] = []

    def cb(err, msg) -> None:
        if err is not None:
            errors.append(str(err))

    for w in range(WAVES):
        for i in range(w * PER_WAVE, (w + 1) * PER_WAVE):
            p.produce(topic, _value(i), partition=i % PARTITIONS, on_delivery=cb)
        assert p.flush(60) == 0, f"wave {w} not delivered"
    assert not errors, f"delivery errors: {errors[:5]}"
    _check_log(bootstrap, topic, proxy)


def test_kafka_python_default_producer_survives_lost_responses(proxied_agent) -> None:
    from kafka import KafkaProducer

    _agent, proxy = proxied_agent
    bootstrap = f"127.0.0.1:{proxy.port}"
    topic = unique_topic("idem-kp")
    create_topic(bootstrap, topic, PARTITIONS)
    p = KafkaProducer(bootstrap_servers=bootstrap)  # defaults: idempotent, acks=all, retries=inf
    try:
        assert p.config["enable_idempotence"] is True
        futures = []
        for w in range(WAVES):
            futures += [
                p.send(topic, value=_value(i), partition=i % PARTITIONS)
                for i in range(w * PER_WAVE, (w + 1) * PER_WAVE)
            ]
            p.flush(60)
        deadline = time.monotonic() + 60
        for f in futures:
            f.get(timeout=max(0.1, deadline - time.monotonic()))
    finally:
        p.close(10)
    _check_log(bootstrap, topic, proxy)
