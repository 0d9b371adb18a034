"""Record-level ListOffsets by timestamp (issue 20): the first record whose
timestamp is >= T, with that record's own timestamp, not the first offset of
the batch that reaches T; on segments, compressed batches, after DeleteRecords,
for the max-timestamp query, and on data the compactor moved into Parquet.

The same answers from a real Kafka broker are checked by the conformance suite
(``tests/conformance/sc_list_offsets.py``); here Floe alone, with the exact values.
"""

from __future__ import annotations

from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

from agent.fetch.leases import TTL_MS as FETCH_LEASE_TTL_MS
from compactor.config import CompactorConfig
from kafka_protocol.messages import ListOffsetsRequest, ProduceRequest
from kafka_protocol.records import Compression, RecordBatchBuilder
from metastore.base import system_clock_ms
from tests.agent.test_fetch_protocol import make_topic, raw_call
from tests.compactor.agent_helpers import SyncCompactor

T = 1_700_000_000_000
LT = ListOffsetsRequest.ListOffsetsTopic
LP = ListOffsetsRequest.ListOffsetsTopic.ListOffsetsPartition


def produce_one_batch(agent: Any, topic: str, stamps: list[int], codec: Compression = Compression.NONE) -> int:
    b = RecordBatchBuilder(codec)
    for i, ts in enumerate(stamps):
        b.append(b"k%d" % i, b"v%d" % i, [], timestamp_ms=ts)
    PT = ProduceRequest.TopicProduceData
    req = ProduceRequest(
        acks=-1, timeout_ms=10_000,
        topic_data=[PT(name=topic, partition_data=[PT.PartitionProduceData(index=0, records=b.build())])],
    )  # fmt: skip
    pr = raw_call(agent, req, 7).responses[0].partition_responses[0]
    assert pr.error_code == 0, pr
    return int(pr.base_offset)


def lookup(agent: Any, topic: str, stamps: list[int], version: int = 8) -> list[tuple[int, int, int]]:
    """One request per timestamp: a partition named twice in one request is INVALID_REQUEST."""
    out = []
    for ts in stamps:
        req = ListOffsetsRequest(
            replica_id=-1, isolation_level=0,
            topics=[LT(name=topic, partitions=[LP(partition_index=0, timestamp=ts)])],
        )  # fmt: skip
        out += [(p.error_code, p.offset, p.timestamp) for p in raw_call(agent, req, version).topics[0].partitions]
    return out


@pytest.mark.interop
def test_offsets_for_times_inside_one_batch_confluent(floe_agent):
    """The issue's report: one batch T+0..T+9, offsets_for_times(T+5) -> offset 5 at T+5."""
    make_topic(floe_agent, "one")
    assert produce_one_batch(floe_agent, "one", [T + i for i in range(10)]) == 0
    c = Consumer({"bootstrap.servers": floe_agent.bootstrap, "group.id": "g"})
    admin = AdminClient({"bootstrap.servers": floe_agent.bootstrap})
    try:
        (r,) = c.offsets_for_times([TopicPartition("one", 0, T + 5)], timeout=10)
        assert r.error is None and r.offset == 5
        tp = TopicPartition("one", 0)
        info = admin.list_offsets({tp: OffsetSpec.for_timestamp(T + 5)})[tp].result(10)
        assert (info.offset, info.timestamp) == (5, T + 5)
        # a seek by time starts at that record
        c.assign([TopicPartition("one", 0, r.offset)])
        m = c.poll(10)
        assert m is not None and m.error() is None
        assert (m.offset(), m.timestamp()[1], m.value()) == (5, T + 5, b"v5")
    finally:
        c.close()
    assert lookup(floe_agent, "one", [T - 1, T, T + 9, T + 10]) == [
        (0, 0, T), (0, 0, T), (0, 9, T + 9), (0, -1, -1),
    ]  # fmt: skip


@pytest.mark.parametrize("codec", [Compression.GZIP, Compression.SNAPPY, Compression.LZ4, Compression.ZSTD])
def test_compressed_batch(floe_agent, codec):
    make_topic(floe_agent, "z")
    produce_one_batch(floe_agent, "z", [T + i for i in range(10)], codec)
    assert lookup(floe_agent, "z", [T + 3, T + 8]) == [(0, 3, T + 3), (0, 8, T + 8)]


def test_ties_unordered_and_max_timestamp(floe_agent):
    make_topic(floe_agent, "tie")
    produce_one_batch(floe_agent, "tie", [T + 5, T + 1, T + 5, T + 9, T + 2, T + 9])
    produce_one_batch(floe_agent, "tie", [T + 9, T + 3], Compression.ZSTD)
    got = lookup(floe_agent, "tie", [T, T + 5, T + 6, T + 9, -3])
    # first record >= T in offset order; max timestamp: its first record (offset 3)
    assert got == [(0, 0, T + 5), (0, 0, T + 5), (0, 3, T + 9), (0, 3, T + 9), (0, 3, T + 9)]


def test_after_delete_records_mid_batch(floe_agent):
    make_topic(floe_agent, "del")
    produce_one_batch(floe_agent, "del", [T + i for i in range(10)])
    tid = floe_agent.call(floe_agent.broker.meta.get_topic("del")).id
    assert floe_agent.call(floe_agent.broker.meta.delete_records(tid, 0, 7)).error == 0
    assert lookup(floe_agent, "del", [-2, T, T + 5, T + 8, -3]) == [
        (0, 7, -1), (0, 7, T + 7), (0, 7, T + 7), (0, 8, T + 8), (0, 9, T + 9),
    ]  # fmt: skip


def test_max_timestamp_after_delete_records_is_over_readable_records(floe_agent):
    """DeleteRecords removed the record carrying the largest timestamp (offset 2):
    the max over what is still readable, here in the straddling batch (offset 8) and
    then in a later batch once that one carries more."""
    make_topic(floe_agent, "maxdel")
    produce_one_batch(floe_agent, "maxdel", [T + i for i in (1, 2, 9, 3, 4, 5, 6, 7, 8, 8)])
    tid = floe_agent.call(floe_agent.broker.meta.get_topic("maxdel")).id
    assert floe_agent.call(floe_agent.broker.meta.delete_records(tid, 0, 5)).error == 0
    assert lookup(floe_agent, "maxdel", [-3]) == [(0, 8, T + 8)]
    produce_one_batch(floe_agent, "maxdel", [T + 3, T + 8, T + 7])  # a tie: the earlier record wins
    assert lookup(floe_agent, "maxdel", [-3]) == [(0, 8, T + 8)]
    produce_one_batch(floe_agent, "maxdel", [T + 2, T + 8, T + 8, T + 9], Compression.LZ4)
    assert lookup(floe_agent, "maxdel", [-3]) == [(0, 16, T + 9)]
    assert floe_agent.call(floe_agent.broker.meta.delete_records(tid, 0, 10)).error == 0
    assert lookup(floe_agent, "maxdel", [-3]) == [(0, 16, T + 9)]
    assert floe_agent.call(floe_agent.broker.meta.delete_records(tid, 0, 17)).error == 0
    assert lookup(floe_agent, "maxdel", [-3]) == [(0, -1, -1)]


def test_partition_named_twice_is_invalid_request(floe_agent):
    make_topic(floe_agent, "twice")
    produce_one_batch(floe_agent, "twice", [T, T + 1])
    req = ListOffsetsRequest(
        replica_id=-1, isolation_level=0,
        topics=[LT(name="twice", partitions=[LP(partition_index=0, timestamp=-1), LP(partition_index=0, timestamp=-2)]),
                LT(name="nosuch", partitions=[LP(partition_index=1, timestamp=-1)] * 2)],
    )  # fmt: skip
    for v in (1, 7, 9):
        got = [(t.name, p.error_code, p.offset) for t in raw_call(floe_agent, req, v).topics for p in t.partitions]
        assert got == [("twice", 42, -1), ("nosuch", 42, -1)], (v, got)
    req.topics[1] = LT(name="twice", partitions=[LP(partition_index=0, timestamp=-1), LP(partition_index=3, timestamp=-1)])
    got = [(t.name, p.partition_index, p.error_code) for t in raw_call(floe_agent, req, 7).topics for p in t.partitions]
    assert got == [("twice", 0, 42), ("twice", 3, 3)]  # one topic entry, one answer per partition


def test_log_append_time_topic(floe_agent):
    """LogAppendTime stamps the whole batch: its first offset and the append time."""
    make_topic(floe_agent, "lat", config={"message.timestamp.type": "LogAppendTime"})
    produce_one_batch(floe_agent, "lat", [T + i for i in range(4)])
    ((err, off, ts),) = lookup(floe_agent, "lat", [T + 2])
    assert (err, off) == (0, 0) and ts > T + 10_000
    ((err, off, mts),) = lookup(floe_agent, "lat", [-3])
    assert (err, off, mts) == (0, 0, ts)


@pytest.mark.interop
def test_parquet_compacted_data(agent_factory):
    """The same answers once the compactor moved the batches into Parquet."""
    agent = agent_factory(flush_interval_ms=5)
    # retention.ms=-1: the records are years old by their timestamps
    make_topic(agent, "pq", config={"floe.parquet.enable": "true", "retention.ms": "-1"})
    produce_one_batch(agent, "pq", [T + i for i in range(10)])
    produce_one_batch(agent, "pq", [T + 20 + i for i in (3, 1, 4, 1, 5)], Compression.ZSTD)
    before = lookup(agent, "pq", [T + 5, T + 10, T + 22, T + 24, -3, -2, -1])
    assert before == [
        (0, 5, T + 5), (0, 10, T + 23), (0, 10, T + 23), (0, 12, T + 24), (0, 14, T + 25),
        (0, 0, -1), (0, 15, -1),
    ]  # fmt: skip
    comp = SyncCompactor(
        agent,
        CompactorConfig(l0_trigger=1, parquet_min_level=0, delete_grace_ms=0),
        now_ms=lambda: system_clock_ms() + FETCH_LEASE_TTL_MS + 100,
    )
    try:
        for _ in range(3):
            summary = comp.run_pass()
            if comp.object_count(2, "parquet"):
                break
        assert comp.object_count(2, "parquet") >= 1, summary
        tid = comp.run(comp.meta.get_topic("pq")).id
        found = comp.run(comp.meta.find_batches(tid, 0, 0, 1 << 20))
        assert found.batches and all(b.object_key.endswith(".parquet") for b in found.batches)
    finally:
        comp.close()
    assert lookup(agent, "pq", [T + 5, T + 10, T + 22, T + 24, -3, -2, -1]) == before
    c = Consumer({"bootstrap.servers": agent.bootstrap, "group.id": "g"})
    try:
        (r,) = c.offsets_for_times([TopicPartition("pq", 0, T + 5)], timeout=10)
        assert r.offset == 5
    finally:
        c.close()
