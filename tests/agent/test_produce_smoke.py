"""Produce through a real librdkafka client lands in the metastore and object store."""

from __future__ import annotations

import pytest
from confluent_kafka import Producer

pytestmark = pytest.mark.interop


def test_confluent_produce_acks_all(floe_agent):
    p = Producer({"bootstrap.servers": floe_agent.bootstrap, "linger.ms": 5, "acks": "all"})
    delivered: list[tuple[int, int]] = []

    def on_delivery(err, msg):
        assert err is None, err
        delivered.append((msg.partition(), msg.offset()))

    for i in range(100):
        p.produce("smoke", f"value-{i}".encode(), key=str(i).encode(), on_delivery=on_delivery)
    assert p.flush(30) == 0
    assert sorted(o for _, o in delivered) == list(range(100))

    async def hwm():
        t = await floe_agent.broker.meta.get_topic("smoke")
        res = await floe_agent.broker.meta.list_offsets(t.id, 0, -1)
        return res.offset

    assert floe_agent.call(hwm()) == 100
    objects = list((floe_agent.data_dir / "objects").rglob("*.obj"))
    assert objects, "no segment object was written"
