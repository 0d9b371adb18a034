"""Idempotent producers of other clients get a producer id (InitProducerId) and produce."""

from __future__ import annotations

import asyncio

import pytest
from aiokafka import AIOKafkaProducer
from confluent_kafka import Producer

pytestmark = pytest.mark.interop


def test_librdkafka_idempotent_producer(floe_agent):
    p = Producer({"bootstrap.servers": floe_agent.bootstrap, "enable.idempotence": True, "linger.ms": 5})
    delivered: list[tuple[int, int]] = []

    def on_delivery(err, msg):
        assert err is None, err
        delivered.append((msg.partition(), msg.offset()))

    for i in range(20):
        p.produce("idem-rdkafka", f"v{i}".encode(), partition=0, on_delivery=on_delivery)
    assert p.flush(15) == 0
    assert sorted(delivered) == [(0, i) for i in range(20)]


def test_aiokafka_idempotent_producer(floe_agent):
    async def run() -> list[int]:
        producer = AIOKafkaProducer(bootstrap_servers=floe_agent.bootstrap, enable_idempotence=True)
        await asyncio.wait_for(producer.start(), 15)
        try:
            offsets = []
            for i in range(5):
                md = await asyncio.wait_for(producer.send_and_wait("idem-aiokafka", f"v{i}".encode(), partition=0), 15)
                offsets.append(md.offset)
            return offsets
        finally:
            await asyncio.wait_for(producer.stop(), 15)

    assert asyncio.run(run()) == [0, 1, 2, 3, 4]
