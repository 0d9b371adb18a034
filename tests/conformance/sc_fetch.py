"""Fetch scenarios: at and beyond the high watermark, below the log start,
OFFSET_OUT_OF_RANGE and the consumer's ``auto.offset.reset`` paths, the whole
batch containing the fetch offset, the watermarks a fetch reports.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

from confluent_kafka import KafkaError, TopicPartition

from kafka_protocol.messages import FetchRequest
from kafka_protocol.records import iter_batches
from tests.conformance._harness import T0, Target, error_name, scenario

FT = FetchRequest.FetchTopic
FP = FetchRequest.FetchTopic.FetchPartition


def raw_fetch(t: Target, topic: str, offset: int, partition: int = 0, version: int = 11) -> dict[str, Any]:
    req = FetchRequest(
        replica_id=-1,
        max_wait_ms=0,
        min_bytes=0,
        max_bytes=1 << 20,
        isolation_level=0,
        topics=[FT(topic=topic, partitions=[FP(partition=partition, fetch_offset=offset, partition_max_bytes=1 << 20)])],
    )
    p = t.raw_led(req, version, lambda r: r.responses[0].partitions[0].error_code).responses[0].partitions[0]
    batches = [
        {"base": b.base_offset, "last": b.last_offset, "count": b.records_count}
        for b in iter_batches(bytes(p.records or b""), allow_partial_tail=True)
    ]
    return {
        "error": error_name(p.error_code),
        "hw": p.high_watermark,
        "lso": p.last_stable_offset,
        "log_start": p.log_start_offset,
        "batches": batches,
    }


def filled(t: Target, tag: str, n: int = 10, delete_before: int | None = None) -> str:
    topic = t.create(t.topic(tag))
    t.produce(topic, [(None, b"v%d" % i, T0 + i) for i in range(n)])
    if delete_before is not None:
        tp = TopicPartition(topic, 0, delete_before)
        t.admin.delete_records([tp])[tp].result(20)
    return topic


@scenario
def sc_fetch_at_high_watermark(t: Target) -> Any:
    topic = filled(t, "f-hw")
    return raw_fetch(t, topic, 10)


@scenario
def sc_fetch_beyond_high_watermark(t: Target) -> Any:
    topic = filled(t, "f-beyond")
    return {"hw+1": raw_fetch(t, topic, 11), "far": raw_fetch(t, topic, 1000)}


@scenario
def sc_fetch_below_log_start(t: Target) -> Any:
    topic = filled(t, "f-below", delete_before=4)
    return {"below": raw_fetch(t, topic, 2), "at": raw_fetch(t, topic, 4)["error"]}


@scenario
def sc_fetch_mid_batch_returns_whole_batch(t: Target) -> Any:
    topic = filled(t, "f-mid")
    return raw_fetch(t, topic, 5)


@scenario
def sc_fetch_empty_partition(t: Target) -> Any:
    topic = t.create(t.topic("f-empty"))
    return {"0": raw_fetch(t, topic, 0), "1": raw_fetch(t, topic, 1)}


@scenario
def sc_fetch_unknown_partition(t: Target) -> Any:
    topic = t.create(t.topic("f-unk"))
    return raw_fetch(t, topic, 0, partition=2)["error"]


@scenario
def sc_fetch_versions(t: Target) -> Any:
    topic = filled(t, "f-ver", 4)
    return {str(v): raw_fetch(t, topic, 1, version=v) for v in (4, 7, 11, 12)}


def _reset(t: Target, topic: str, offset: int, reset: str) -> list[Any]:
    out = t.consume(topic, 1, offset=offset, timeout=30, **{"auto.offset.reset": reset})  # a record or an error ends it
    return [{"offset": r["offset"], "value": r["value"]} if "offset" in r else r for r in out[:1]]


@scenario
def sc_reset_earliest_out_of_range(t: Target) -> Any:
    topic = filled(t, "r-early", delete_before=3)
    return {"below": _reset(t, topic, 1, "earliest"), "beyond": _reset(t, topic, 50, "earliest")}


class _Fetching:
    """librdkafka's own view of one partition, from its statistics: ``position()``
    stays OFFSET_INVALID until a record is consumed, so it cannot say that an offset
    reset is done; the statistics' ``fetch_state`` and ``next_offset`` can."""

    def __init__(self, topic: str, partition: int = 0) -> None:
        self.topic, self.partition = topic, str(partition)
        self.state: tuple[str, int] = ("none", -1)

    def conf(self, **conf: Any) -> dict[str, Any]:
        return {**conf, "statistics.interval.ms": 50, "stats_cb": self._stats}

    def _stats(self, raw: str) -> None:
        p = json.loads(raw).get("topics", {}).get(self.topic, {}).get("partitions", {}).get(self.partition)
        if p is not None:
            self.state = (p["fetch_state"], p["next_offset"])

    def wait(self, c: Any, done: Callable[[int], bool], timeout: float = 30) -> Any:
        """Poll until the partition is fetched from an offset ``done`` accepts (or a
        record or error arrives); that record, or None."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            m = c.poll(0.05)
            if m is not None:
                return m
            state, offset = self.state
            if state == "active" and done(offset):
                return None
        return None


@scenario
def sc_reset_latest_out_of_range(t: Target) -> Any:
    topic = filled(t, "r-late", 5)
    c = t.consumer(**{"auto.offset.reset": "latest", "enable.partition.eof": True})
    try:
        c.assign([TopicPartition(topic, 0, 50)])
        # Until a fetch from the reset position reached the end (PARTITION_EOF): the
        # reset is over, and no answer to a fetch from 50 is still on its way (one
        # arriving after the produce reset the consumer past the new record, 2026-11-27).
        eof = _eof(c)
        position = c.position([TopicPartition(topic, 0)])[0].offset
        t.produce(topic, [(None, b"new", T0 + 99)])
        got = None
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            m = c.poll(0.1)
            if m is not None and m.error() is None:
                got = {"offset": m.offset(), "value": m.value()}
                break
        return {"position": position, "eof_at": eof, "got": got}
    finally:
        c.close()


def _eof(c: Any, timeout: float = 30) -> int | None:
    """The offset of the first PARTITION_EOF ``c`` reports (None: none in time)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        m = c.poll(0.05)
        if m is not None and m.error() is not None and m.error().code() == KafkaError._PARTITION_EOF:
            return int(m.offset())
    return None


@scenario
def sc_reset_error_out_of_range(t: Target) -> Any:
    topic = filled(t, "r-err", 3)
    return _reset(t, topic, 20, "error")


@scenario
def sc_reset_no_committed_offset(t: Target) -> Any:
    """A group with no committed offset starts where auto.offset.reset says."""
    topic = filled(t, "r-none", 3)
    out = {}
    for reset in ("earliest", "latest"):
        fetching = _Fetching(topic)
        c = t.consumer(**fetching.conf(**{"auto.offset.reset": reset}))
        try:
            c.assign([TopicPartition(topic, 0)])  # OFFSET_INVALID: use the committed offset
            # Earliest delivers offset 0; latest fetches from the end, with nothing to deliver.
            m = fetching.wait(c, lambda offset, latest=reset == "latest": latest and offset >= 0)
            out[reset] = {
                "first": None if m is None or m.error() else m.offset(),
                "position": c.position([TopicPartition(topic, 0)])[0].offset,
            }
        finally:
            c.close()
    return out
