"""Offsets in Kafka's checkpoint shape and the admission-control arithmetic.

A source offset is ``{"topic": {"0": 42, "1": 7}}``: per partition, the next
offset to read (exclusive end of what has been read). Spark's Kafka source
writes the same JSON, so checkpoints read naturally. Spark compares offsets as
JSON text, so :func:`to_json` always emits one canonical order (topics by name,
partitions by number) whatever order the input had: an unchanged source gives
the same string and Spark plans no spurious batch.

Everything here is pure (no metastore, no Spark) and unit-tested on its own.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

TopicPartition = tuple[str, int]
Offsets = dict[TopicPartition, int]


def to_json(offsets: Mapping[TopicPartition, int]) -> dict[str, dict[str, int]]:
    """Canonical Kafka-shape dict: topics sorted by name, partitions by number."""
    out: dict[str, dict[str, int]] = {}
    for topic, part in sorted(offsets):
        out.setdefault(topic, {})[str(part)] = int(offsets[(topic, part)])
    return out


def to_json_str(offsets: Mapping[TopicPartition, int]) -> str:
    return json.dumps(to_json(offsets))


def from_json(data: Mapping[str, Any] | str | None) -> Offsets:
    """Parse Kafka-shape offsets (a dict or its JSON text; None gives ``{}``)."""
    if data is None:
        return {}
    if isinstance(data, str):
        data = json.loads(data)
        if not isinstance(data, dict):
            raise ValueError(f"offsets must be a JSON object, got {data!r}")
    out: Offsets = {}
    for topic, parts in data.items():
        if not isinstance(parts, Mapping):
            raise ValueError(f"offsets of topic {topic!r} must be an object")
        for p, o in parts.items():
            out[(str(topic), int(p))] = int(o)
    return out


def rate_limit(start: Mapping[TopicPartition, int], latest: Offsets, limit: int) -> Offsets:
    """Spread ``limit`` new records over partitions in proportion to their backlog.

    Spark's Kafka source rule, so jobs keep their batch sizes: a partition with
    backlog ``size`` out of ``total`` gets ``limit * size / total`` records,
    rounded down (up when under one, so small partitions still move). Partitions
    absent from ``start`` start at 0 here; callers resolve them first.
    """
    sizes = {tp: max(0, end - start.get(tp, 0)) for tp, end in latest.items()}
    total = sum(sizes.values())
    if total <= limit:
        return dict(latest)
    out: Offsets = {}
    for tp, end in latest.items():
        begin = start.get(tp, 0)
        size = sizes[tp]
        if size <= 0:
            out[tp] = end if end < begin else begin
            continue
        prorate = limit * (size / total)
        n = math.ceil(prorate) if prorate < 1 else math.floor(prorate)
        out[tp] = min(end, begin + n)
    return out


def backlog(start: Mapping[TopicPartition, int], end: Mapping[TopicPartition, int]) -> int:
    """Records between ``start`` and ``end`` (partitions only in ``end`` count from 0)."""
    return sum(max(0, e - start.get(tp, 0)) for tp, e in end.items())


def lag_metrics(
    end: Mapping[str, Any] | str | None, latest: Mapping[str, Any] | str | None
) -> dict[str, str] | None:
    """Kafka source's lag metrics: min/max/avg of ``latest - end`` over partitions.

    ``end`` is the offset a batch read up to, ``latest`` what the log held when
    it was planned (the source's ``reportLatestOffset``). Values are strings, as
    in Spark's ``SourceProgress.metrics``. None if either side is unknown.
    """
    if end is None or latest is None:
        return None
    e = from_json(end)
    lat = from_json(latest)
    if not lat:
        return None
    behind = [max(0, off - e.get(tp, 0)) for tp, off in lat.items()]
    return {
        "minOffsetsBehindLatest": str(min(behind)),
        "maxOffsetsBehindLatest": str(max(behind)),
        "avgOffsetsBehindLatest": str(float(sum(behind)) / len(behind)),
    }
