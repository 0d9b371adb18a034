"""Empty reads return 0 rows, as Spark's Kafka source does: an empty topic, a missing
topic, start == end, a future timestamp with ``startingOffsetsByTimestampStrategy=latest``
and a topic emptied by retention; batch and streaming, in the shared Spark session."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.spark_source.helpers import Seeded, seed, with_meta

pytestmark = pytest.mark.slow


def count(spark: Any, s: Seeded, **options: Any) -> int:
    r = spark.read.format("floe").option("metastore", s.metastore).option("objects", s.objects)
    for k, v in options.items():
        r = r.option(k, str(v))
    return int(r.load().count())


def stream_rows(spark: Any, s: Seeded, tmp: Path, **options: Any) -> int:
    r = spark.readStream.format("floe")
    r = r.option("metastore", s.metastore).option("objects", s.objects)
    for k, v in options.items():
        r = r.option(k, str(v))
    out, ckpt = tmp / "out", tmp / "ckpt"
    q = (
        r.load()
        .writeStream.format("parquet")
        .option("path", str(out))
        .option("checkpointLocation", str(ckpt))
        .trigger(availableNow=True)
        .start()
    )
    q.awaitTermination(120)
    assert q.exception() is None, q.exception()
    files = list(out.glob("*.parquet"))
    return spark.read.parquet(str(out)).count() if files else 0


def test_empty_missing_equal_future_and_retention_emptied(spark: Any, tmp_path: Path) -> None:
    s = seed(tmp_path, topics={"t": 2, "empty": 3, "gone": 1}, segments=3)
    with_meta(s.metastore, lambda ms: ms.create_topic("empty2", 2))
    assert count(spark, s, subscribe="t") == 30
    assert count(spark, s, subscribe="empty2") == 0  # created, never written
    assert count(spark, s, subscribe="nosuchtopic") == 0
    assert count(spark, s, subscribePattern="nosuch.*") == 0
    assert count(spark, s, assign='{"nosuchtopic": [0]}') == 0
    same = '{"t": {"0": 7, "1": 7}}'
    assert count(spark, s, subscribe="t", startingOffsets=same, endingOffsets=same) == 0
    future = 4_000_000_000_000
    assert (
        count(
            spark,
            s,
            subscribe="t",
            startingTimestamp=future,
            startingOffsetsByTimestampStrategy="latest",
        )
        == 0
    )
    # Retention empties "gone" (every batch below the new log start).
    tid = s.topic_ids["gone"]

    async def empty(ms: Any) -> None:
        await ms.delete_records(tid, 0, -1)
        await ms.enforce_retention(tid, 0)

    with_meta(s.metastore, empty)
    assert count(spark, s, subscribe="gone") == 0
    assert count(spark, s, subscribe="gone", startingOffsets="earliest") == 0
    # Streaming: the same empty sources make empty batches, no error.
    for i, opts in enumerate(
        [
            {"subscribe": "empty2"},
            {"subscribe": "nosuchtopic"},
            {"subscribe": "gone"},
        ]
    ):
        n = stream_rows(spark, s, tmp_path / f"s{i}", startingOffsets="earliest", **opts)
        assert n == 0
