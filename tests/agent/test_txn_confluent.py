"""Transactions with confluent-kafka (librdkafka): init, commit, abort,
send_offsets_to_transaction, read_committed consumers, zombie fencing, and what
read_uncommitted readers and ListOffsets see."""

from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

pytestmark = pytest.mark.interop


def _topic(bootstrap: str, name: str, partitions: int) -> str:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_topics([NewTopic(name, partitions, 1)]).values():
        f.result(15)
    return name


def _producer(bootstrap: str, tid: str, **extra: object) -> Producer:
    conf = {"bootstrap.servers": bootstrap, "transactional.id": tid, "linger.ms": 5}
    conf.update(extra)
    p = Producer(conf)
    p.init_transactions(20)
    return p


def _consume(bootstrap: str, topic: str, isolation: str, expect_at_least: int, group: str | None = None) -> list[tuple[int, bytes]]:
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group or f"g-{uuid.uuid4().hex[:8]}",
            "auto.offset.reset": "earliest",
            "isolation.level": isolation,
            "enable.auto.commit": False,
            "fetch.wait.max.ms": 50,
        }
    )
    c.subscribe([topic])
    out: list[tuple[int, bytes]] = []
    deadline = time.monotonic() + 20
    idle_since = None
    try:
        while time.monotonic() < deadline:
            m = c.poll(0.2)
            if m is None:
                if len(out) >= expect_at_least:
                    idle_since = idle_since or time.monotonic()
                    if time.monotonic() - idle_since > 1.0:  # nothing more is coming
                        break
                continue
            if m.error():
                continue
            idle_since = None
            out.append((m.partition(), m.value()))
    finally:
        c.close()
    return out


def test_commit_abort_and_read_committed(floe_agent):
    bs = floe_agent.bootstrap
    topic = _topic(bs, "txn-basic", 3)
    p = _producer(bs, "tx-basic")
    # committed transaction over 3 partitions
    p.begin_transaction()
    for i in range(30):
        p.produce(topic, f"c{i}".encode(), partition=i % 3)
    p.commit_transaction(20)
    # aborted transaction
    p.begin_transaction()
    for i in range(12):
        p.produce(topic, f"a{i}".encode(), partition=i % 3)
    p.flush(10)
    p.abort_transaction(20)
    # another committed one after the abort
    p.begin_transaction()
    for i in range(6):
        p.produce(topic, f"d{i}".encode(), partition=i % 3)
    p.commit_transaction(20)

    committed = _consume(bs, topic, "read_committed", 36)
    values = sorted(v.decode() for _, v in committed)
    assert values == sorted([f"c{i}" for i in range(30)] + [f"d{i}" for i in range(6)])
    # read_uncommitted sees the aborted records too (never the markers)
    everything = _consume(bs, topic, "read_uncommitted", 48)
    assert len(everything) == 48

    # ListOffsets: with an open transaction the LSO stays behind the high watermark
    p.begin_transaction()
    p.produce(topic, b"open", partition=0)
    p.flush(10)
    c = Consumer({"bootstrap.servers": bs, "group.id": "lo", "isolation.level": "read_committed"})
    _lo_rc, hi_rc = c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10, cached=False)
    c.close()
    c = Consumer({"bootstrap.servers": bs, "group.id": "lo2", "isolation.level": "read_uncommitted"})
    _lo, hi_ru = c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10, cached=False)
    c.close()
    assert hi_rc == hi_ru - 1  # the open transaction's record sits above the LSO
    p.commit_transaction(20)


def test_send_offsets_to_transaction(floe_agent):
    bs = floe_agent.bootstrap
    src = _topic(bs, "txn-src", 1)
    dst = _topic(bs, "txn-dst", 1)
    plain = Producer({"bootstrap.servers": bs})
    for i in range(10):
        plain.produce(src, f"m{i}".encode(), partition=0)
    plain.flush(10)

    group = "ctp-group"
    consumer = Consumer(
        {
            "bootstrap.servers": bs,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
        }
    )
    consumer.subscribe([src])
    p = _producer(bs, "tx-ctp")
    got = []
    deadline = time.monotonic() + 20
    while len(got) < 10 and time.monotonic() < deadline:
        m = consumer.poll(0.5)
        if m is not None and not m.error():
            got.append(m)
    assert len(got) == 10
    # first attempt: aborted, the group's offset must not move
    p.begin_transaction()
    for m in got[:5]:
        p.produce(dst, m.value().upper(), partition=0)
    p.send_offsets_to_transaction(
        [TopicPartition(src, 0, got[4].offset() + 1)], consumer.consumer_group_metadata(), 20
    )
    p.abort_transaction(20)
    committed = consumer.committed([TopicPartition(src, 0)], timeout=10)
    assert committed[0].offset < 0
    # second attempt: committed with the offsets
    p.begin_transaction()
    for m in got:
        p.produce(dst, m.value().upper(), partition=0)
    p.send_offsets_to_transaction(
        [TopicPartition(src, 0, got[-1].offset() + 1)], consumer.consumer_group_metadata(), 20
    )
    p.commit_transaction(20)
    committed = consumer.committed([TopicPartition(src, 0)], timeout=10)
    assert committed[0].offset == 10
    consumer.close()
    out = _consume(bs, dst, "read_committed", 10)
    assert sorted(v for _, v in out) == sorted(f"M{i}".encode() for i in range(10))


def test_zombie_is_fenced(floe_agent):
    bs = floe_agent.bootstrap
    topic = _topic(bs, "txn-zombie", 1)
    old = _producer(bs, "tx-z")
    old.begin_transaction()
    old.produce(topic, b"zombie", partition=0)
    old.flush(10)
    new = _producer(bs, "tx-z")  # aborts the zombie's open transaction and fences it
    new.begin_transaction()
    new.produce(topic, b"fresh", partition=0)
    new.commit_transaction(20)
    with pytest.raises(KafkaException) as err:
        old.commit_transaction(10)
    assert err.value.args[0].fatal() or err.value.args[0].txn_requires_abort()
    out = _consume(bs, topic, "read_committed", 1)
    assert [v for _, v in out] == [b"fresh"]
