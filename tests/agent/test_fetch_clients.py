"""Fetch with real clients: confluent-kafka (librdkafka 2.16), kafka-python, aiokafka
and kcat (librdkafka 2.0) consume exactly what was produced, in every codec."""

from __future__ import annotations

import asyncio
import json
import subprocess
import time
from typing import Any

import pytest
from confluent_kafka import OFFSET_BEGINNING, OFFSET_END, Consumer, Producer, TopicPartition

from tests.agent.test_fetch_protocol import make_topic
from tests.fixtures.tools import require_tool

pytestmark = pytest.mark.interop

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]


def _expected(n: int, tag: str) -> list[tuple[bytes, bytes, list[tuple[str, bytes]]]]:
    return [(f"k{i}".encode(), f"{tag}-value-{i}".encode() * (1 + i % 7), [("i", str(i).encode())]) for i in range(n)]


def confluent_produce(agent: Any, topic: str, rows: list[tuple[bytes, bytes, list[tuple[str, bytes]]]],
                      partition: int = 0, **conf: Any) -> list[int]:
    p = Producer({"bootstrap.servers": agent.bootstrap, "linger.ms": 20, "acks": "all", **conf})
    offsets: list[int] = []

    def cb(err: Any, msg: Any) -> None:
        assert err is None, err
        offsets.append(msg.offset())

    for k, v, h in rows:
        p.produce(topic, v, key=k, headers=h, partition=partition, on_delivery=cb)
    assert p.flush(30) == 0
    return offsets


def confluent_consume(agent: Any, topic: str, n: int, *, offset: int = OFFSET_BEGINNING, partition: int = 0,
                      timeout: float = 30, **conf: Any) -> list[Any]:
    c = Consumer({
        "bootstrap.servers": agent.bootstrap, "group.id": "fetch-tests", "enable.auto.commit": False,
        "fetch.wait.max.ms": 100, **conf,
    })
    try:
        c.assign([TopicPartition(topic, partition, offset)])
        out: list[Any] = []
        deadline = time.monotonic() + timeout
        while len(out) < n and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is None:
                continue
            assert m.error() is None, m.error()
            out.append((m.offset(), m.key(), m.value(), m.headers() or []))
        return out
    finally:
        c.close()


@pytest.mark.parametrize("codec", CODECS)
def test_confluent_roundtrip(floe_agent, codec):
    rows = _expected(300, codec)
    offs = confluent_produce(floe_agent, f"cf-{codec}", rows, **{"compression.type": codec, "batch.num.messages": 50})
    assert sorted(offs) == list(range(300))
    got = confluent_consume(floe_agent, f"cf-{codec}", 300)
    assert [g[0] for g in got] == list(range(300))
    assert [(g[1], g[2], g[3]) for g in got] == rows


def test_confluent_from_middle_of_batch(floe_agent):
    rows = _expected(50, "mid")
    confluent_produce(floe_agent, "mid", rows, **{"linger.ms": 200})
    got = confluent_consume(floe_agent, "mid", 33, offset=17)
    assert [g[0] for g in got] == list(range(17, 50))
    assert [g[1] for g in got] == [r[0] for r in rows[17:]]


@pytest.mark.parametrize("reset", ["earliest", "latest"])
def test_offset_out_of_range_resets(floe_agent, reset):
    topic = f"oor-{reset}"
    confluent_produce(floe_agent, topic, _expected(10, "old"))
    c = Consumer({
        "bootstrap.servers": floe_agent.bootstrap, "group.id": "g", "enable.auto.commit": False,
        "auto.offset.reset": reset, "fetch.wait.max.ms": 100,
    })
    p = Producer({"bootstrap.servers": floe_agent.bootstrap, "linger.ms": 0})
    try:
        c.assign([TopicPartition(topic, 0, 1000)])
        deadline = time.monotonic() + 30
        msg = None
        while msg is None and time.monotonic() < deadline:
            m = c.poll(0.2)
            if m is not None:
                assert m.error() is None, m.error()
                msg = m
            elif reset == "latest":
                # We cannot observe the reset itself; keep appending until one arrives.
                p.produce(topic, b"new", key=b"new")
                p.flush(10)
        assert msg is not None
        if reset == "earliest":
            assert (msg.offset(), msg.key()) == (0, b"k0")
        else:
            assert msg.offset() >= 10 and msg.key() == b"new"
    finally:
        c.close()


def test_long_poll_delivers_new_record_quickly(floe_agent):
    topic = "longpoll"
    confluent_produce(floe_agent, topic, _expected(1, "first"))
    c = Consumer({
        "bootstrap.servers": floe_agent.bootstrap, "group.id": "g", "enable.auto.commit": False,
        "fetch.wait.max.ms": 5000, "fetch.min.bytes": 1,
    })
    p = Producer({"bootstrap.servers": floe_agent.bootstrap, "linger.ms": 0})
    try:
        c.assign([TopicPartition(topic, 0, 0)])
        deadline = time.monotonic() + 30
        m = None
        while m is None and time.monotonic() < deadline:
            m = c.poll(0.5)
        assert m is not None and m.error() is None and m.offset() == 0
        # Give librdkafka a bounded moment to issue its next (long-polling) fetch.
        assert c.poll(0.3) is None
        delivered: list[float] = []
        p.produce(topic, b"second", on_delivery=lambda err, msg: delivered.append(time.monotonic()))
        p.flush(10)
        assert delivered
        m = None
        deadline = time.monotonic() + 10
        while m is None and time.monotonic() < deadline:
            m = c.poll(0.05)
        arrived = time.monotonic()
        assert m is not None and m.error() is None and m.offset() == 1 and m.value() == b"second"
        assert arrived - delivered[0] < 2.0, f"took {arrived - delivered[0]:.2f}s (fetch.wait.max.ms=5000)"
    finally:
        c.close()


def test_large_message_with_small_fetch_limits(floe_agent):
    make_topic(floe_agent, "big", config={"max.message.bytes": str(4 << 20)})
    big = bytes(range(256)) * (2 << 12)  # 2 MiB
    assert len(big) == 2 << 20
    confluent_produce(floe_agent, "big", [(b"small", b"x", []), (b"big", big, []), (b"after", b"y", [])],
                      **{"message.max.bytes": 5 << 20, "linger.ms": 0, "batch.num.messages": 1})
    got = confluent_consume(floe_agent, "big", 3, **{
        "max.partition.fetch.bytes": 64 * 1024, "fetch.max.bytes": 1 << 20, "receive.message.max.bytes": 8 << 20,
    })
    assert [(g[0], g[1]) for g in got] == [(0, b"small"), (1, b"big"), (2, b"after")]
    assert got[1][2] == big


def test_many_partitions(floe_agent):
    make_topic(floe_agent, "multi", partitions=4)
    for p in range(4):
        confluent_produce(floe_agent, "multi", _expected(25, f"p{p}"), partition=p)
    c = Consumer({"bootstrap.servers": floe_agent.bootstrap, "group.id": "g", "enable.auto.commit": False,
                  "max.partition.fetch.bytes": 512})
    try:
        c.assign([TopicPartition("multi", p, 0) for p in range(4)])
        seen: dict[int, list[int]] = {p: [] for p in range(4)}
        deadline = time.monotonic() + 30
        while sum(map(len, seen.values())) < 100 and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None:
                assert m.error() is None, m.error()
                seen[m.partition()].append(m.offset())
        assert seen == {p: list(range(25)) for p in range(4)}
    finally:
        c.close()


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_kafka_python_roundtrip(floe_agent, codec):
    from kafka import KafkaConsumer, KafkaProducer
    from kafka import TopicPartition as KTP

    topic = f"kp-{codec}"
    prod = KafkaProducer(bootstrap_servers=floe_agent.bootstrap, compression_type=None if codec == "none" else codec,
                         linger_ms=10, batch_size=2048)
    rows = _expected(120, codec)
    futs = [prod.send(topic, key=k, value=v, headers=h, partition=0) for k, v, h in rows]
    prod.flush(30)
    assert sorted(f.get(10).offset for f in futs) == list(range(120))
    prod.close()

    cons = KafkaConsumer(bootstrap_servers=floe_agent.bootstrap, group_id=None, enable_auto_commit=False,
                         auto_offset_reset="earliest", fetch_max_wait_ms=100, consumer_timeout_ms=10_000)
    try:
        cons.assign([KTP(topic, 0)])
        cons.seek_to_beginning()
        got = []
        for m in cons:
            got.append((m.offset, m.key, m.value, list(m.headers)))
            if len(got) == 120:
                break
        assert [g[0] for g in got] == list(range(120))
        assert [(g[1], g[2], g[3]) for g in got] == rows
    finally:
        cons.close()


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_aiokafka_roundtrip(floe_agent, codec):
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka import TopicPartition as ATP

    topic = f"aio-{codec}"
    rows = _expected(80, codec)

    async def run() -> list[Any]:
        prod = AIOKafkaProducer(bootstrap_servers=floe_agent.bootstrap, compression_type=codec, linger_ms=10)
        await prod.start()
        try:
            for k, v, h in rows:
                await prod.send(topic, key=k, value=v, headers=h, partition=0)
            await prod.flush()
        finally:
            await prod.stop()
        cons = AIOKafkaConsumer(bootstrap_servers=floe_agent.bootstrap, enable_auto_commit=False,
                                auto_offset_reset="earliest", fetch_max_wait_ms=100)
        await cons.start()
        try:
            cons.assign([ATP(topic, 0)])
            await cons.seek_to_beginning(ATP(topic, 0))
            got: list[Any] = []
            async with asyncio.timeout(30):
                while len(got) < len(rows):
                    m = await cons.getone()
                    got.append((m.offset, m.key, m.value, list(m.headers)))
            return got
        finally:
            await cons.stop()

    got = asyncio.run(run())
    assert [g[0] for g in got] == list(range(80))
    assert [(g[1], g[2], list(g[3])) for g in got] == rows


@pytest.mark.parametrize("codec", ["none", "snappy", "zstd"])
def test_kcat_consumes_to_end(floe_agent, codec):
    topic = f"kcat-{codec}"
    rows = _expected(40, codec)
    confluent_produce(floe_agent, topic, rows, **{"compression.type": codec})
    out = subprocess.run(
        [require_tool("kcat"), "-C", "-b", floe_agent.bootstrap, "-t", topic, "-o", "beginning", "-e", "-J"],
        capture_output=True, text=True, timeout=60, check=True,
    )
    msgs = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
    assert [m["offset"] for m in msgs] == list(range(40))
    assert [m["key"].encode() for m in msgs] == [r[0] for r in rows]
    assert [m["payload"].encode() for m in msgs] == [r[1] for r in rows]


def test_confluent_end_offset_then_new_data(floe_agent):
    """Assign at OFFSET_END (a ListOffsets latest) and receive only what comes after."""
    confluent_produce(floe_agent, "tail", _expected(5, "old"))
    c = Consumer({"bootstrap.servers": floe_agent.bootstrap, "group.id": "g", "enable.auto.commit": False,
                  "fetch.wait.max.ms": 100})
    p = Producer({"bootstrap.servers": floe_agent.bootstrap, "linger.ms": 0})
    try:
        c.assign([TopicPartition("tail", 0, OFFSET_END)])
        deadline = time.monotonic() + 20
        m = None
        while m is None and time.monotonic() < deadline:
            m = c.poll(0.2)
            if m is None:  # the position is not observable: keep appending until one arrives
                p.produce("tail", b"new", key=b"new")
                p.flush(10)
        assert m is not None and m.error() is None
        assert m.offset() >= 5 and m.key() == b"new"
    finally:
        c.close()


def test_kafka_python_fetch_session_over_many_partitions(floe_agent):
    """kafka-python uses incremental fetch sessions (KIP-227) by default: every
    record of 120 partitions arrives, including waves produced while it is
    already consuming (which only the incremental path can report), and its
    fetches really went through one session."""
    from kafka import KafkaConsumer, KafkaProducer
    from kafka import TopicPartition as KTP


    topic, parts, waves = "kp-sessions", 120, 4
    make_topic(floe_agent, topic, partitions=parts)
    prod = KafkaProducer(bootstrap_servers=floe_agent.bootstrap, linger_ms=5)
    cons = KafkaConsumer(bootstrap_servers=floe_agent.bootstrap, group_id=None, enable_auto_commit=False,
                         auto_offset_reset="earliest", fetch_max_wait_ms=200)
    try:
        cons.assign([KTP(topic, p) for p in range(parts)])
        expected: set[bytes] = set()
        got: set[bytes] = set()
        for wave in range(waves):  # each wave on a different third of the partitions
            for p in range(wave % 3, parts, 3):
                value = f"w{wave}-p{p}".encode()
                prod.send(topic, value=value, partition=p)
                expected.add(value)
            prod.flush(30)
            deadline = time.monotonic() + 30
            while got != expected and time.monotonic() < deadline:
                for batch in cons.poll(timeout_ms=500).values():
                    got.update(m.value for m in batch)
            assert got == expected, f"wave {wave}: missing {sorted(expected - got)[:5]}"
        sessions = list(floe_agent.broker.fetch_sessions.sessions())
        assert len(sessions) == 1 and sessions[0].epoch >= waves  # incremental fetches served waves 2+
    finally:
        cons.close()
        prod.close()
