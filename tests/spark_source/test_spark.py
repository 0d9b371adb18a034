"""The ``floe`` source in a real local[2] SparkSession (one per test run)."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from spark_source.listener import FloeLagListener
from tests.spark_source.helpers import Row, Seeded, compact, seed, seed_async, with_meta

pytestmark = pytest.mark.slow


def reader(spark: Any, s: Seeded, streaming: bool = False, **options: Any) -> Any:
    r = (spark.readStream if streaming else spark.read).format("floe")
    r = r.option("metastore", s.metastore).option("objects", s.objects)
    if not {"subscribe", "assign", "subscribePattern"} & options.keys():
        r = r.option("subscribe", "t")
    for k, v in options.items():
        r = r.option(k, str(v))
    return r.load()


def rows(df: Any) -> list[Row]:
    out: list[Row] = []
    for r in df.collect():
        d = r.asDict()
        hs = tuple((h["key"], h["value"] and bytes(h["value"])) for h in d.get("headers") or [])
        out.append(
            (
                d["topic"],
                d["partition"],
                d["offset"],
                d["key"] and bytes(d["key"]),
                d["value"] and bytes(d["value"]),
                int(d["timestamp"].timestamp() * 1000),
                hs,
            )
        )
    return sorted(out)


def test_batch_read_auto_registered(spark: Any, tmp_path: Path) -> None:
    s = seed(tmp_path, topics={"t": 2, "u": 1}, segments=8)
    df = reader(spark, s, includeHeaders="true")
    assert [f.name for f in df.schema.fields] == [
        "key",
        "value",
        "topic",
        "partition",
        "offset",
        "timestamp",
        "timestampType",
        "headers",
    ]
    assert rows(df) == s.expected("t")
    df = reader(
        spark,
        s,
        subscribePattern="[tu]",
        startingOffsets='{"t": {"0": 10, "1": -2}, "u": {"0": 30}}',
    )
    got = [r[:5] for r in rows(df)]
    assert got == [
        r[:5]
        for r in s.expected()
        if not (r[:2] == ("t", 0) and r[2] < 10) and not (r[0] == "u" and r[2] < 30)
    ]


def run_available_now(
    spark: Any,
    s: Seeded,
    out: Path,
    ckpt: Path,
    transform: Callable[[Any], Any] | None = None,
    **options: Any,
) -> Any:
    df = reader(spark, s, streaming=True, **options)
    if transform is not None:
        df = transform(df)
    q = (
        df.writeStream.format("parquet")
        .option("path", str(out))
        .option("checkpointLocation", str(ckpt))
        .trigger(availableNow=True)
        .start()
    )
    from pyspark.errors import StreamingQueryException

    try:
        q.awaitTermination(120)
    except StreamingQueryException:
        pass  # the caller looks at q.exception()
    return q


def sink_rows(spark: Any, out: Path) -> list[tuple[str, int, int, bytes | None, bytes | None]]:
    df = spark.read.parquet(str(out))
    return sorted(
        (
            r["topic"],
            r["partition"],
            r["offset"],
            r["key"] and bytes(r["key"]),
            r["value"] and bytes(r["value"]),
        )
        for r in df.collect()
    )


def test_stream_available_now_batches_restart_new_partition(spark: Any, tmp_path: Path) -> None:
    s = seed(tmp_path / "d", segments=10)
    out, ckpt = tmp_path / "out", tmp_path / "ckpt"
    lag = FloeLagListener()
    spark.streams.addListener(lag)
    try:
        q = run_available_now(
            spark, s, out, ckpt, startingOffsets="earliest", maxOffsetsPerTrigger=30
        )
        batches = [p for p in q.recentProgress if p.numInputRows > 0]
        assert [p.numInputRows for p in batches] == [30, 30, 30, 10]
        assert sink_rows(spark, out) == [r[:5] for r in s.expected()]
        # Offsets in the checkpoint are Kafka's shape.
        assert json.loads(batches[-1].sources[0].endOffset) == {"t": {"0": 50, "1": 50}}
        # Listener events are asynchronous: wait (bounded) for the last batch's, lag 0.
        deadline = time.monotonic() + 30
        while lag.latest.get(str(q.id), {}).get("maxOffsetsBehindLatest") != "0":
            assert time.monotonic() < deadline, f"listener never saw lag 0: {lag.latest}"
            time.sleep(0.02)
        hist = lag.history.get(str(q.id), [])
        assert hist and hist[0]["maxOffsetsBehindLatest"] == "35"  # 100 - 30 over 2 partitions
        assert lag.latest[str(q.id)]["maxOffsetsBehindLatest"] == "0"

        # More data, and a partition added (CreatePartitions) that also gets data.
        with_meta(s.metastore, lambda ms: ms.add_partitions("t", 3))
        asyncio.run(
            seed_async(tmp_path / "d", topics={"t": 3}, segments=3, start_segment=10, existing=s)
        )
        q = run_available_now(
            spark, s, out, ckpt, startingOffsets="earliest", maxOffsetsPerTrigger=30
        )
        got = sink_rows(spark, out)
        assert got == [r[:5] for r in s.expected()]  # no duplicates, no gaps
        assert len(got) == 100 + 3 * 5 * 3
    finally:
        spark.streams.removeListener(lag)


def test_failure_mid_batch_then_restart_exactly_once(spark: Any, tmp_path: Path) -> None:
    from pyspark.sql import functions as F
    from pyspark.sql.types import BinaryType

    s = seed(tmp_path / "d", segments=10)
    out, ckpt = tmp_path / "out", tmp_path / "ckpt"
    marker = tmp_path / "fail"
    marker.write_text("1")
    path = str(marker)

    def boom(value: bytes | None, partition: int, offset: int) -> bytes | None:
        import os

        if partition == 0 and offset == 37 and os.path.exists(path):
            raise RuntimeError("injected failure")
        return value

    check = F.udf(boom, BinaryType())

    def transform(df: Any) -> Any:
        return df.withColumn("value", check("value", "partition", "offset"))

    q = run_available_now(
        spark, s, out, ckpt, transform, startingOffsets="earliest", maxOffsetsPerTrigger=40
    )
    assert q.exception() is not None and "injected failure" in str(q.exception())
    partial = sink_rows(spark, out)
    assert partial == [r[:5] for r in s.expected() if r[2] < 20]  # batch 0 committed only
    # The compactor merges the segments meanwhile (grace 0: the old objects go, except
    # those the failed batch's read lease still holds), so the replayed batch is
    # re-planned onto other objects: same offsets, same rows.
    before = {p.name for p in (tmp_path / "d" / "objects").rglob("*.obj")}
    compact(s)
    after = {p.name for p in (tmp_path / "d" / "objects").rglob("*.obj")}
    assert after - before and before - after
    marker.unlink()
    q = run_available_now(
        spark, s, out, ckpt, transform, startingOffsets="earliest", maxOffsetsPerTrigger=40
    )
    assert q.exception() is None
    assert sink_rows(spark, out) == [r[:5] for r in s.expected()]


def test_mixed_segment_and_parquet(spark: Any, tmp_path: Path) -> None:
    s = seed(tmp_path, config={"t": {"floe.parquet.enable": "true"}}, segments=6)
    assert compact(s).phases["parquet"].committed == 2
    asyncio.run(seed_async(tmp_path, segments=4, start_segment=6, existing=s))
    keys = [p.name for p in (tmp_path / "objects").rglob("*.obj")]
    assert any("parquet" in k for k in keys) and any("seg" in k for k in keys)
    assert rows(reader(spark, s, includeHeaders="true")) == s.expected("t")
    df = reader(
        spark,
        s,
        startingOffsets='{"t": {"0": 28, "1": 0}}',
        endingOffsets='{"t": {"0": 33, "1": 2}}',
    )
    assert [(r[1], r[2]) for r in rows(df)] == [
        (0, 28),
        (0, 29),
        (0, 30),
        (0, 31),
        (0, 32),
        (1, 0),
        (1, 1),
    ]


@pytest.mark.interop
def test_confluent_kafka_produced_data_byte_exact(
    spark: Any, agent_factory: Callable[..., Any]
) -> None:
    from confluent_kafka import Producer

    from tests.compactor.test_agent_e2e import create_topic

    agent = agent_factory(flush_interval_ms=5)
    create_topic(agent.bootstrap, "events", 3)
    sent: list[tuple[int, bytes | None, bytes, int, tuple[tuple[str, bytes | None], ...]]] = []
    base_ts = int(time.time() * 1000) - 60_000
    for n, codec in enumerate(["none", "gzip", "snappy", "lz4", "zstd"]):
        p = Producer(
            {
                "bootstrap.servers": agent.bootstrap,
                "linger.ms": 5,
                "compression.type": codec,
                "acks": "all",
            }
        )
        for i in range(200):
            part = (i + n) % 3
            key = None if i % 13 == 0 else b"key-%d-%d" % (n, i)
            value = bytes((i * 31 + j) % 256 for j in range(i % 97)) + b"|%s" % codec.encode()
            hs = (("trace", b"%d" % i), ("empty", None)) if i % 5 == 0 else ()
            ts = base_ts + n * 1000 + i
            p.produce(
                "events", value, key=key, partition=part, timestamp=ts, headers=list(hs) or None
            )
            sent.append((part, key, value, ts, hs))
        assert p.flush(30) == 0
    d = agent.data_dir
    df = (
        spark.read.format("floe")
        .option("metastore", f"sqlite:///{d / 'meta.db'}")
        .option("objects", f"file://{d / 'objects'}")
        .option("subscribe", "events")
        .option("includeHeaders", "true")
        .option("kafka.bootstrap.servers", agent.bootstrap)  # accepted, ignored
        .load()
    )
    got = df.orderBy("partition", "offset").collect()
    assert len(got) == len(sent)
    for part in range(3):
        mine = [r for r in got if r["partition"] == part]
        assert [r["offset"] for r in mine] == list(range(len(mine)))
        exp = [x for x in sent if x[0] == part]
        assert [
            (
                r["key"] and bytes(r["key"]),
                bytes(r["value"]),
                int(r["timestamp"].timestamp() * 1000),
                tuple((h["key"], h["value"] and bytes(h["value"])) for h in r["headers"]),
                r["timestampType"],
                r["topic"],
            )
            for r in mine
        ] == [(k, v, ts, hs, 0, "events") for _, k, v, ts, hs in exp]
