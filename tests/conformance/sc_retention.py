"""Retention and LogAppendTime scenarios: ListOffsets EARLIEST (and by time)
after retention.ms removed old data (run by ``test_retention.py`` against its
own Kafka broker checking retention every second: the suite's broker must not
delete the other scenarios' old-timestamped records); topics with
``message.timestamp.type=LogAppendTime`` (what producers, consumers and
ListOffsets see when the broker stamps the records).

Broker-clock timestamps are not comparable between two brokers: any timestamp
within a day of now is observed as "now".
"""

from __future__ import annotations

import time
from typing import Any

from tests.conformance._harness import T0, Target, scenario
from tests.conformance.sc_list_offsets import raw_list


def _now(ts: int) -> Any:
    return "now" if abs(ts - time.time() * 1000) < 86_400_000 else ts


def retention_earliest(t: Target) -> Any:
    """Records stamped years ago on a topic with retention.ms of a day: retention
    removes them all; EARLIEST moves to the high watermark; new records stay."""
    topic = t.create(t.topic("ret-earliest"), config={"retention.ms": "86400000"})
    t.produce(topic, [(None, b"old%d" % i, T0 + i) for i in range(10)])
    start = t.wait_log_start(topic, 10)
    t.produce(topic, [(None, b"new%d" % i, 0) for i in range(3)])  # now: within retention
    after = t.wait_log_start(topic, 11, timeout=3)  # nothing more goes
    return {
        "log_start": start,
        "log_start_after_new": after,
        "raw": [{**r, "timestamp": _now(r["timestamp"])} for r in raw_list(t, topic, [-2, -1, T0 + 5])],
        # From below the log start: reset to the earliest retained record, the new ones.
        "consumed": [r["value"] for r in t.consume(topic, 3, offset=0, **{"auto.offset.reset": "earliest"})],
    }


@scenario
def sc_log_append_time(t: Target) -> Any:
    """The broker stamps every record with its append time: the delivery report,
    the consumed record (timestamp type 2) and ListOffsets by time and max."""
    topic = t.create(t.topic("lat"), config={"message.timestamp.type": "LogAppendTime"})
    first = t.produce(topic, [(b"k%d" % i, b"a%d" % i, T0 + i) for i in range(5)])
    time.sleep(0.05)  # the second batch's append time is later
    second = t.produce(topic, [(b"k%d" % i, b"b%d" % i, T0 + i) for i in range(3)])
    got = t.consume(topic, 8)
    return {
        "delivered": [[o, _now(ts), e] for o, ts, e in first + second],
        "consumed": [[r["offset"], r["ts"][0], _now(r["ts"][1])] for r in got],
        "same_stamp_per_batch": len({r["ts"][1] for r in got[:5]}) == 1 and len({r["ts"][1] for r in got[5:]}) == 1,
        "raw": [{**r, "timestamp": _now(r["timestamp"])} for r in raw_list(t, topic, [T0, T0 + 3, -3, -2, -1])],
    }
