"""ListOffsets (and OffsetForLeaderEpoch) through real clients and at the wire level."""

from __future__ import annotations

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from kafka_protocol.messages import (
    ListOffsetsRequest,
    OffsetForLeaderEpochRequest,
)
from tests.agent.test_fetch_protocol import make_topic, produce_batch, raw_call

LT = ListOffsetsRequest.ListOffsetsTopic
LP = ListOffsetsRequest.ListOffsetsTopic.ListOffsetsPartition

BASE_TS = 1_700_000_000_000


def _produce_timestamped(agent, topic: str, n: int) -> None:
    """``n`` records, one batch each (flush per record), record i at BASE_TS + 1000 * i."""
    p = Producer({"bootstrap.servers": agent.bootstrap, "linger.ms": 0})
    for i in range(n):
        p.produce(topic, f"v{i}".encode(), key=f"k{i}".encode(), partition=0, timestamp=BASE_TS + 1000 * i)
        assert p.flush(30) == 0


@pytest.mark.interop
def test_confluent_watermarks_and_offsets_for_times(floe_agent):
    make_topic(floe_agent, "lo", partitions=2)
    c = Consumer({"bootstrap.servers": floe_agent.bootstrap, "group.id": "g", "enable.auto.commit": False})
    try:
        assert c.get_watermark_offsets(TopicPartition("lo", 0), timeout=10) == (0, 0)
        _produce_timestamped(floe_agent, "lo", 6)
        assert c.get_watermark_offsets(TopicPartition("lo", 0), timeout=10) == (0, 6)
        assert c.get_watermark_offsets(TopicPartition("lo", 1), timeout=10) == (0, 0)
        asked = [
            TopicPartition("lo", 0, BASE_TS),  # exactly the first
            TopicPartition("lo", 0, BASE_TS + 2500),  # between 2 and 3 -> 3
            TopicPartition("lo", 0, BASE_TS + 5000),  # the last
            TopicPartition("lo", 0, BASE_TS + 9999),  # after everything -> -1 (end)
        ]
        got = []
        for tp in asked:
            (res,) = c.offsets_for_times([tp], timeout=10)
            assert res.error is None, res.error
            got.append(res.offset)
        assert got == [0, 3, 5, -1]
    finally:
        c.close()


@pytest.mark.interop
def test_kafka_python_offsets(floe_agent):
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KTP

    make_topic(floe_agent, "kpo")
    _produce_timestamped(floe_agent, "kpo", 4)
    cons = KafkaConsumer(bootstrap_servers=floe_agent.bootstrap, group_id=None, enable_auto_commit=False)
    try:
        tp = KTP("kpo", 0)
        assert cons.beginning_offsets([tp]) == {tp: 0}
        assert cons.end_offsets([tp]) == {tp: 4}
        res = cons.offsets_for_times({tp: BASE_TS + 1500})
        assert res[tp].offset == 2 and res[tp].timestamp == BASE_TS + 2000
        assert cons.offsets_for_times({tp: BASE_TS + 60_000}) == {tp: None}
    finally:
        cons.close()


def _list(agent, topic: str, partitions: list[tuple[int, int]], version: int):
    """One request per entry: a partition named twice in a request is INVALID_REQUEST (v1+)."""
    out = []
    for p, ts in partitions:
        req = ListOffsetsRequest(
            replica_id=-1, isolation_level=0,
            topics=[LT(name=topic, partitions=[LP(partition_index=p, timestamp=ts, current_leader_epoch=-1)])],
        )
        out += raw_call(agent, req, version).topics[0].partitions
    return out


@pytest.mark.parametrize("version", [1, 4, 7, 9, 11])
def test_special_timestamps(floe_agent, version):
    make_topic(floe_agent, "sp", partitions=1)
    _produce_timestamped(floe_agent, "sp", 3)
    produce_batch(floe_agent, "sp", 0, 2)  # timestamps "now": the largest
    parts = _list(floe_agent, "sp", [(0, -2), (0, -1), (0, BASE_TS + 1000), (0, -4), (1, -1)], version)
    assert [(p.partition_index, p.error_code, p.offset) for p in parts] == [
        (0, 0, 0), (0, 0, 5), (0, 0, 1), (0, 0, 0), (1, 3, -1),
    ]
    assert parts[2].timestamp == BASE_TS + 1000
    if version >= 4:
        assert [p.leader_epoch for p in parts] == [0, 0, 0, 0, -1]
    if version >= 7:
        (mx,) = _list(floe_agent, "sp", [(0, -3)], version)
        # the first record carrying the largest timestamp (the two "now" records may tie)
        assert mx.error_code == 0 and mx.offset in (3, 4) and mx.timestamp > BASE_TS + 10_000


def test_v0_old_style_offsets(floe_agent):
    make_topic(floe_agent, "v0")
    produce_batch(floe_agent, "v0", 0, 7)
    parts = _list(floe_agent, "v0", [(0, -1), (0, -2), (0, 4_000_000_000_000)], 0)
    assert [(p.error_code, p.old_style_offsets) for p in parts] == [(0, [7]), (0, [0]), (0, [])]


def test_unknown_topic(floe_agent):
    parts = _list(floe_agent, "missing", [(0, -1)], 5)
    assert parts[0].error_code == 3 and parts[0].offset == -1


OT = OffsetForLeaderEpochRequest.OffsetForLeaderTopic
OP = OffsetForLeaderEpochRequest.OffsetForLeaderTopic.OffsetForLeaderPartition


@pytest.mark.parametrize("version", [2, 3, 4])
def test_offset_for_leader_epoch(floe_agent, version):
    make_topic(floe_agent, "ep", partitions=1)
    produce_batch(floe_agent, "ep", 0, 9)
    req = OffsetForLeaderEpochRequest(
        replica_id=-1,
        topics=[
            OT(topic="ep", partitions=[
                OP(partition=0, current_leader_epoch=0, leader_epoch=0),
                OP(partition=0, current_leader_epoch=0, leader_epoch=3),
                OP(partition=1, current_leader_epoch=0, leader_epoch=0),
            ]),
            OT(topic="nope", partitions=[OP(partition=0, current_leader_epoch=0, leader_epoch=0)]),
        ],
    )
    resp = raw_call(floe_agent, req, version)
    got = [(t.topic, p.partition, p.error_code, p.leader_epoch, p.end_offset) for t in resp.topics for p in t.partitions]
    assert got == [
        ("ep", 0, 0, 0, 9),
        ("ep", 0, 0, -1, -1),
        ("ep", 1, 3, -1, -1),
        ("nope", 0, 3, -1, -1),
    ]
