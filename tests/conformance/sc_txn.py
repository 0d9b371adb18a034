"""Transaction scenarios: what readers and group offsets look like while a
transaction is open and after it ends.

A confluent-kafka transactional producer leaves a transaction open (records
flushed, offsets sent to a group, nothing committed), then the scenario asks
with raw requests what a read_committed client sees: ListOffsets latest /
by timestamp / max-timestamp capped at the last stable offset, OffsetFetch
with ``require_stable`` (UNSTABLE_OFFSET_COMMIT for the pending partition),
then the same after the commit.
"""

from __future__ import annotations

import time
from typing import Any

from confluent_kafka import Producer, TopicPartition

from kafka_protocol.messages import ListOffsetsRequest, OffsetFetchRequest
from tests.conformance._harness import T0, Target, error_name, scenario

LT = ListOffsetsRequest.ListOffsetsTopic
LP = ListOffsetsRequest.ListOffsetsTopic.ListOffsetsPartition
FT = OffsetFetchRequest.OffsetFetchRequestTopic
GT = OffsetFetchRequest.OffsetFetchRequestGroup.OffsetFetchRequestTopics
FG = OffsetFetchRequest.OffsetFetchRequestGroup


def _lo(t: Target, topic: str, ts: int, isolation: int) -> dict[str, Any]:
    """A marker carries the broker's clock, not a scenario timestamp: "now"."""
    req = ListOffsetsRequest(
        replica_id=-1, isolation_level=isolation,
        topics=[LT(name=topic, partitions=[LP(partition_index=0, timestamp=ts)])],
    )  # fmt: skip
    p = t.raw(req, 8).topics[0].partitions[0]
    stamp: Any = "now" if p.timestamp > T0 + 86_400_000 else p.timestamp
    return {"error": error_name(p.error_code), "offset": p.offset, "timestamp": stamp}


def _settled(t: Target, topic: str) -> None:
    """Until the last stable offset reached the high watermark (Kafka writes the
    markers after answering EndTxn; Floe before)."""
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if _lo(t, topic, -1, 1)["offset"] == _lo(t, topic, -1, 0)["offset"]:
            return
        time.sleep(0.05)


def _fetch(t: Target, group: str, topic: str, stable: bool, version: int) -> Any:
    if version >= 8:
        req = OffsetFetchRequest(
            groups=[FG(group_id=group, topics=[GT(name=topic, partition_indexes=[0, 1])])], require_stable=stable
        )
        g = t.raw(req, version).groups[0]
        return [
            {"p": p.partition_index, "offset": p.committed_offset, "error": error_name(p.error_code)}
            for tp in g.topics for p in tp.partitions
        ]  # fmt: skip
    req = OffsetFetchRequest(group_id=group, topics=[FT(name=topic, partition_indexes=[0, 1])], require_stable=stable)
    r = t.raw(req, version)
    return {
        "error": error_name(r.error_code),
        "partitions": [
            {"p": p.partition_index, "offset": p.committed_offset, "error": error_name(p.error_code)}
            for tp in r.topics for p in tp.partitions
        ],
    }  # fmt: skip


def _open_txn(t: Target, tag: str) -> tuple[Producer, str, str]:
    topic = t.create(t.topic(tag), partitions=2)
    group = t.group(tag)
    t.produce(topic, [(None, b"c%d" % i, T0 + i) for i in range(5)])  # committed, non-transactional
    p = t.producer(**{"transactional.id": f"{topic}-tx", "linger.ms": 5})
    p.init_transactions(30)
    p.begin_transaction()
    for i in range(5):
        p.produce(topic, value=b"t%d" % i, partition=0, timestamp=T0 + 10 + i)
    assert p.flush(30) == 0
    c = t.consumer(**{"group.id": group})
    try:
        p.send_offsets_to_transaction([TopicPartition(topic, 0, 3)], c.consumer_group_metadata(), 30)
    finally:
        c.close()
    return p, topic, group


@scenario
def sc_txn_open_list_offsets_and_require_stable(t: Target) -> Any:
    p, topic, group = _open_txn(t, "txn-open")
    out: dict[str, Any] = {}
    for iso in (0, 1):
        out[f"iso{iso}"] = {str(ts): _lo(t, topic, ts, iso) for ts in (-1, -2, -3, T0 + 2, T0 + 12)}
    for v in (7, 8):
        out[f"stable_v{v}"] = _fetch(t, group, topic, True, v)
        out[f"unstable_v{v}"] = _fetch(t, group, topic, False, v)
    p.commit_transaction(30)
    _settled(t, topic)
    for iso in (0, 1):
        out[f"after_iso{iso}"] = {str(ts): _lo(t, topic, ts, iso) for ts in (-1, -3, T0 + 12, T0 + 20)}
    out["after_stable"] = _fetch(t, group, topic, True, 8)
    return out


@scenario
def sc_txn_aborted_require_stable(t: Target) -> Any:
    p, topic, group = _open_txn(t, "txn-abort")
    p.abort_transaction(30)
    _settled(t, topic)
    return {
        "stable": _fetch(t, group, topic, True, 8),
        "lso": _lo(t, topic, -1, 1),
        "t12_rc": _lo(t, topic, T0 + 12, 1),
        "t20_rc": _lo(t, topic, T0 + 20, 1),
        "max_rc": _lo(t, topic, -3, 1),
    }
