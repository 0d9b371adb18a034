"""ListOffsets scenarios: by timestamp (record level, ties, compressed, max
timestamp, after DeleteRecords), earliest/latest, errors.

Observed through ``AdminClient.list_offsets`` (offset, timestamp),
``Consumer.offsets_for_times`` (what a seek by time uses) and raw ListOffsets
where a client would retry or hide the answer.
"""

from __future__ import annotations

from typing import Any

from confluent_kafka import TopicPartition
from confluent_kafka.admin import OffsetSpec

from kafka_protocol.messages import ListOffsetsRequest
from tests.conformance._harness import T0, Target, error_name, outcome, scenario

LT = ListOffsetsRequest.ListOffsetsTopic
LP = ListOffsetsRequest.ListOffsetsTopic.ListOffsetsPartition


def admin_offsets(t: Target, topic: str, specs: dict[str, Any], partition: int = 0) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for label, spec in specs.items():

        def one(spec: Any = spec) -> Any:
            tp = TopicPartition(topic, partition)
            r = t.admin.list_offsets({tp: spec}, request_timeout=15)[tp].result(20)
            return {"offset": r.offset, "timestamp": r.timestamp}

        out[label] = outcome(one)
    return out


def times(t: Target, topic: str, stamps: list[int], partition: int = 0) -> list[Any]:
    c = t.consumer()
    try:
        out = []
        for ts in stamps:
            (r,) = c.offsets_for_times([TopicPartition(topic, partition, ts)], timeout=15)
            out.append(r.offset if r.error is None else r.error.name())
        return out
    finally:
        c.close()


def raw_list(t: Target, topic: str, stamps: list[int], version: int = 8, partition: int = 0) -> list[Any]:
    """One request per timestamp (Kafka rejects a partition named twice in one request)."""
    out = []
    for ts in stamps:
        req = ListOffsetsRequest(
            replica_id=-1,
            isolation_level=0,
            topics=[LT(name=topic, partitions=[LP(partition_index=partition, timestamp=ts)])],
        )
        for p in t.raw(req, version).topics[0].partitions:
            out.append({"error": error_name(p.error_code), "offset": p.offset, "timestamp": p.timestamp})
    return out


def ten(t: Target, tag: str, codec: str = "none", stamps: list[int] | None = None, **cfg: str) -> str:
    topic = t.create(t.topic(tag), config=cfg or None)
    stamps = stamps if stamps is not None else [T0 + i for i in range(10)]
    t.produce(topic, [(b"k%d" % i, b"v%d" % i, ts) for i, ts in enumerate(stamps)], **{"compression.type": codec})
    return topic


@scenario
def sc_lo_time_one_batch_mid(t: Target) -> Any:
    """The issue's case: one batch T+0..T+9, offsets_for_times(T+5) is offset 5 at T+5."""
    topic = ten(t, "lo-mid")
    return {
        "seek": times(t, topic, [T0 + 5]),
        "admin": admin_offsets(t, topic, {"t5": OffsetSpec.for_timestamp(T0 + 5)}),
    }


@scenario
def sc_lo_time_each_record(t: Target) -> Any:
    topic = ten(t, "lo-each")
    stamps = [T0 - 1, *[T0 + i for i in range(10)], T0 + 10, 0]
    return {"seek": times(t, topic, stamps), "raw": raw_list(t, topic, stamps)}


@scenario
def sc_lo_time_compressed_gzip(t: Target) -> Any:
    topic = ten(t, "lo-gzip", "gzip")
    return raw_list(t, topic, [T0 + 3, T0 + 7, T0 + 9])


@scenario
def sc_lo_time_compressed_zstd(t: Target) -> Any:
    topic = ten(t, "lo-zstd", "zstd")
    return raw_list(t, topic, [T0 + 3, T0 + 7, T0 + 9])


@scenario
def sc_lo_time_compressed_lz4_snappy(t: Target) -> Any:
    topic = t.create(t.topic("lo-mix"))
    t.produce(topic, [(None, b"a%d" % i, T0 + i) for i in range(5)], **{"compression.type": "lz4"})
    t.produce(topic, [(None, b"b%d" % i, T0 + 5 + i) for i in range(5)], **{"compression.type": "snappy"})
    return raw_list(t, topic, [T0 + 2, T0 + 5, T0 + 8, T0 + 10])


@scenario
def sc_lo_time_ties(t: Target) -> Any:
    """Equal timestamps: the first record carrying it."""
    topic = ten(t, "lo-ties", stamps=[T0, T0, T0 + 1, T0 + 1, T0 + 1, T0 + 2, T0 + 2, T0 + 3, T0 + 3, T0 + 3])
    return raw_list(t, topic, [T0, T0 + 1, T0 + 2, T0 + 3, T0 + 4])


@scenario
def sc_lo_time_unordered(t: Target) -> Any:
    """Timestamps not monotonic inside a batch: the first record at or after T, in offset order."""
    topic = ten(t, "lo-unord", stamps=[T0 + 5, T0 + 1, T0 + 9, T0 + 3, T0 + 7, T0 + 2, T0 + 8, T0, T0 + 6, T0 + 4])
    return raw_list(t, topic, [T0, T0 + 2, T0 + 6, T0 + 8, T0 + 9])


@scenario
def sc_lo_time_many_batches(t: Target) -> Any:
    topic = t.create(t.topic("lo-batches"))
    for b in range(4):
        t.produce(topic, [(None, b"x", T0 + 100 * b + i) for i in range(5)])
    return raw_list(t, topic, [T0 + 3, T0 + 50, T0 + 101, T0 + 204, T0 + 304, T0 + 305])


@scenario
def sc_lo_max_timestamp(t: Target) -> Any:
    topic = ten(t, "lo-max", stamps=[T0 + 1, T0 + 9, T0 + 2, T0 + 3, T0 + 9, T0 + 4, T0, T0, T0, T0])
    return {
        "admin": admin_offsets(t, topic, {"max": OffsetSpec.max_timestamp()}),
        "raw": raw_list(t, topic, [-3]),
    }


@scenario
def sc_lo_max_timestamp_across_batches(t: Target) -> Any:
    topic = t.create(t.topic("lo-max2"))
    t.produce(topic, [(None, b"a", T0 + i) for i in (1, 7, 3)])
    t.produce(topic, [(None, b"b", T0 + i) for i in (7, 2)])
    t.produce(topic, [(None, b"c", T0 + i) for i in (4, 5)], **{"compression.type": "zstd"})
    return raw_list(t, topic, [-3])


@scenario
def sc_lo_max_timestamp_compressed(t: Target) -> Any:
    topic = ten(t, "lo-maxz", "lz4", stamps=[T0 + i for i in (3, 1, 8, 2, 8, 0, 1, 1, 1, 1)])
    return raw_list(t, topic, [-3])


@scenario
def sc_lo_earliest_latest(t: Target) -> Any:
    topic = ten(t, "lo-el")
    return {
        "admin": admin_offsets(t, topic, {"earliest": OffsetSpec.earliest(), "latest": OffsetSpec.latest()}),
        "raw": raw_list(t, topic, [-2, -1]),
        "watermarks": list(t.watermarks(topic)),
    }


@scenario
def sc_lo_empty_partition(t: Target) -> Any:
    topic = t.create(t.topic("lo-empty"))
    return {"raw": raw_list(t, topic, [-2, -1, -3, T0]), "seek": times(t, topic, [T0])}


@scenario
def sc_lo_after_delete_records(t: Target) -> Any:
    topic = ten(t, "lo-del")
    tp = TopicPartition(topic, 0, 7)
    t.admin.delete_records([tp])[tp].result(20)
    return {
        "raw": raw_list(t, topic, [-2, -1, T0, T0 + 5, T0 + 8, T0 + 20]),
        "seek": times(t, topic, [T0 + 5, T0 + 9]),
    }


@scenario
def sc_lo_max_after_delete_records(t: Target) -> Any:
    topic = ten(t, "lo-maxdel", stamps=[T0 + i for i in (1, 2, 9, 3, 4, 5, 6, 7, 8, 8)])
    tp = TopicPartition(topic, 0, 5)
    t.admin.delete_records([tp])[tp].result(20)
    return raw_list(t, topic, [-3, T0 + 8])


@scenario
def sc_lo_unknown_partition(t: Target) -> Any:
    topic = t.create(t.topic("lo-unk"))
    return {
        "raw": raw_list(t, topic, [-1], partition=3),
        "unknown_topic": raw_list(t, t.topic("lo-nosuch"), [-1]),
    }


@scenario
def sc_lo_versions(t: Target) -> Any:
    """Old and new request versions answer alike (v1 has no timestamp field in the answer)."""
    topic = ten(t, "lo-ver")
    return {str(v): raw_list(t, topic, [-2, -1, T0 + 4], version=v) for v in (1, 4, 6, 9)}


@scenario
def sc_lo_partition_named_twice(t: Target) -> Any:
    """A partition named twice in one request (in one topic entry or two), known
    and unknown topics: every mention of it is INVALID_REQUEST, the rest answered."""
    topic = ten(t, "lo-twice")
    other = t.topic("lo-twice-nosuch")
    req = ListOffsetsRequest(
        replica_id=-1,
        isolation_level=0,
        topics=[
            LT(name=topic, partitions=[LP(partition_index=0, timestamp=-1), LP(partition_index=0, timestamp=-2)]),
            LT(name=other, partitions=[LP(partition_index=1, timestamp=-1), LP(partition_index=1, timestamp=-1)]),
        ],
    )
    split = ListOffsetsRequest(
        replica_id=-1,
        isolation_level=0,
        topics=[
            LT(name=topic, partitions=[LP(partition_index=0, timestamp=-1)]),
            LT(name=topic, partitions=[LP(partition_index=0, timestamp=-2), LP(partition_index=3, timestamp=-1)]),
        ],
    )
    out: dict[str, Any] = {}
    for label, r in (("same_topic", req), ("two_entries", split)):
        for v in (1, 7, 9):
            resp = t.raw(r, v)
            out[f"{label}_v{v}"] = {
                "topics": sorted("mine" if tr.name == topic else "other" for tr in resp.topics),
                "partitions": sorted(
                    ("mine" if tr.name == topic else "other", p.partition_index, error_name(p.error_code), p.offset)
                    for tr in resp.topics for p in tr.partitions
                ),  # the order of Kafka's answer is its hash map's
            }  # fmt: skip
    return out


@scenario
def sc_lo_read_committed_timestamps(t: Target) -> Any:
    """read_committed ListOffsets of a topic without transactions: latest is the
    high watermark, timestamps and max-timestamp as under read_uncommitted."""
    topic = ten(t, "lo-rc")
    out = []
    for ts in (-1, -2, -3, T0 + 4, T0 + 20):
        req = ListOffsetsRequest(
            replica_id=-1, isolation_level=1,
            topics=[LT(name=topic, partitions=[LP(partition_index=0, timestamp=ts)])],
        )  # fmt: skip
        p = t.raw(req, 8).topics[0].partitions[0]
        out.append({"error": error_name(p.error_code), "offset": p.offset, "timestamp": p.timestamp})
    return out
