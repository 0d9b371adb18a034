"""The Spark source without a JVM: options, offsets, planning, decoding, pickling."""

from __future__ import annotations

import pickle
import re
import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyspark.sql.datasource import EqualTo, GreaterThanOrEqual, In, LessThan
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows, ReadMinRows

from metastore.types import BatchLocation
from objectstore.parquet import kafka_schema
from spark_source import backend
from spark_source.offsets import from_json, lag_metrics, rate_limit, to_json
from spark_source.options import OptionError, parse_options
from spark_source.plan import ParquetSpan, SegmentSpan, spans_for, split_range
from spark_source.reader import output_schema
from spark_source.source import (
    FloeBatchReader,
    FloeDataSource,
    FloePartition,
    FloePushdownBatchReader,
    FloeStreamReader,
)
from tests.spark_source.helpers import Row, Seeded, compact, seed, seed_async, with_meta


def opts(s: Seeded, streaming: bool = False, **kw: Any) -> Any:
    base = {"metastore": s.metastore, "objects": s.objects, "subscribe": "t"}
    base.update({k: str(v) for k, v in kw.items() if v is not None})
    base = {k: v for k, v in base.items() if not (k in kw and kw[k] is None)}
    return parse_options(base, streaming=streaming)


def rows_of(batches: list[pa.RecordBatch]) -> list[Row]:
    out: list[Row] = []
    for b in batches:
        for r in b.to_pylist():
            hs = tuple((h["key"], h["value"]) for h in r.get("headers") or [])
            ts = int(r["timestamp"].timestamp() * 1000)
            out.append((r["topic"], r["partition"], r["offset"], r["key"], r["value"], ts, hs))
    return out


def read_all(reader: Any, parts: Any = None) -> tuple[list[Row], list[pa.RecordBatch]]:
    parts = reader.partitions() if parts is None else parts
    batches = []
    for p in parts:
        p = pickle.loads(pickle.dumps(p))  # as Spark ships them
        batches.extend(reader.read(p))
    return sorted(rows_of(batches)), batches


# -- options ---------------------------------------------------------------------------


def test_options_kafka_names_and_validation(caplog: pytest.LogCaptureFixture) -> None:
    base = {"metastore": "sqlite:///x", "objects": "file:///x"}
    o = parse_options(
        {
            **base,
            "Subscribe": "a,b",
            "kafka.bootstrap.servers": "x:9092",
            "maxOffsetsPerTrigger": "10",
        },
        streaming=True,
    )
    assert o.subscribe == ("a", "b") and o.max_offsets_per_trigger == 10
    assert o.starting.kind == "latest" and o.bootstrap_servers == "x:9092" and o.direct
    assert "plans from the metastore directly" in caplog.text
    assert parse_options({**base, "subscribe": "a"}, streaming=False).starting.kind == "earliest"
    o = parse_options(
        {**base, "assign": '{"a": [1, 0]}', "startingOffsets": '{"a": {"0": 5, "1": -2}}'},
        streaming=False,
    )
    assert o.assign == {"a": (0, 1)} and o.starting.per_partition == {"a": {0: 5, 1: -2}}
    o = parse_options(
        {**base, "subscribePattern": "ev.*", "startingTimestamp": "1000", "maxTriggerDelay": "30s"},
        streaming=True,
    )
    assert o.matches("events") and not o.matches("xevents") and o.starting.timestamp == 1000
    assert o.max_trigger_delay_ms == 30_000
    bad = [
        {"subscribe": "a", "assign": '{"a":[0]}'},
        {},
        {"subscribe": "a", "startingOffsets": "latest"},  # batch
        {"subscribe": "a", "endingOffsets": '{"a": {"0": -2}}'},
        {"subscribe": "a", "maxOffsetsPerTrigger": "0"},
        {"subscribe": "a", "includeHeaders": "maybe"},
        {"subscribe": "a", "startingOffsets": "{not json"},
    ]
    for b in bad:
        with pytest.raises(OptionError):
            parse_options({**base, **b}, streaming=False)
    with pytest.raises(OptionError, match=r"kafka\.bootstrap\.servers"):
        parse_options({"objects": "file:///x", "subscribe": "a"}, streaming=False)
    with pytest.raises(OptionError, match="'objects'"):
        parse_options({"metastore": "sqlite:///x", "subscribe": "a"}, streaming=False)
    with pytest.raises(OptionError, match="streaming"):
        parse_options({**base, "subscribe": "a", "endingOffsets": "latest"}, streaming=True)


def test_every_option_implemented_or_refused_by_name() -> None:
    boot = {"kafka.bootstrap.servers": "h:9092", "subscribe": "a"}
    o = parse_options(
        {
            **boot,
            "kafka.group.id": "g1",
            "kafka.request.timeout.ms": "5000",
            "kafkaConsumer.pollTimeoutMs": "7000",
            "fetchOffset.numRetries": "5",
            "fetchOffset.retryIntervalMs": "20",
            "kafka.isolation.level": "read_uncommitted",
            "kafka.security.protocol": "plaintext",
            "leaseTimeout": "10m",
        },
        streaming=False,
    )
    assert not o.direct and o.bootstrap_servers == "h:9092" and o.client_label == "g1"
    assert (o.request_timeout_ms, o.poll_timeout_ms) == (5000, 7000)
    assert (o.fetch_offset_retries, o.fetch_offset_retry_interval_ms) == (5, 20)
    assert o.lease_ttl_ms(False) == 600_000
    assert parse_options({**boot, "groupIdPrefix": "p"}, streaming=True).client_label == (
        "p-spark-kafka-source"
    )
    assert parse_options(boot, streaming=True).lease_ttl_ms(True) == 300_000
    refused = {
        "kafka.auto.offset.reset": "startingOffsets",
        "kafka.key.deserializer": "key.deserializer",
        "kafka.value.deserializer": "value.deserializer",
        "kafka.enable.auto.commit": "enable.auto.commit",
        "kafka.interceptor.classes": "interceptor.classes",
        "kafka.max.poll.records": "kafka.max.poll.records",
        "kafka.sasl.mechanism": "kafka.sasl.mechanism",
        "kafka.security.protocol": "kafka.security.protocol",
        "kafka.isolation.level": "read_uncommitted or read_committed",
        "noSuchOption": "nosuchoption",
        "path": "not paths",
        "objectAccess": "objectAccess",
    }
    values = {
        "kafka.security.protocol": "SASL_SSL",
        "kafka.isolation.level": "serializable",
        "objectAccess": "maybe",
    }
    for name, needle in refused.items():
        with pytest.raises(OptionError, match=re.escape(needle)):
            parse_options({**boot, name: values.get(name, "x")}, streaming=False)
    committed = parse_options({**boot, "kafka.isolation.level": "READ_COMMITTED"}, streaming=False)
    assert committed.isolation_level == "read_committed"


def test_schema_matches_kafka_source() -> None:
    assert output_schema(True) == kafka_schema()
    assert output_schema(False).names == [
        "key",
        "value",
        "topic",
        "partition",
        "offset",
        "timestamp",
        "timestampType",
    ]
    ds = FloeDataSource({"includeHeaders": "true"})
    assert "headers array<struct<key: string, value: binary>>" in ds.schema()
    assert "headers" not in FloeDataSource({}).schema()


# -- offsets ---------------------------------------------------------------------------


def test_offsets_canonical_json_and_rate_limit() -> None:
    offs = {("b", 10): 1, ("a", 2): 5, ("b", 9): 3, ("a", 0): 7}
    j = to_json(offs)
    assert list(j) == ["a", "b"] and list(j["b"]) == ["9", "10"]
    assert from_json(j) == offs and from_json('{"a": {"0": 1}}') == {("a", 0): 1}
    # Reordered input gives the identical JSON (no spurious batch).
    assert to_json(dict(reversed(list(offs.items())))) == j
    start = {("t", 0): 0, ("t", 1): 0, ("t", 2): 100}
    latest = {("t", 0): 900, ("t", 1): 100, ("t", 2): 100}
    assert rate_limit(start, latest, 100) == {("t", 0): 90, ("t", 1): 10, ("t", 2): 100}
    assert rate_limit(start, latest, 10_000) == latest
    # Tiny shares round up so every partition moves.
    assert rate_limit({("t", 0): 0, ("t", 1): 0}, {("t", 0): 1000, ("t", 1): 1}, 10)[("t", 1)] == 1
    m = lag_metrics({"t": {"0": 5, "1": 10}}, {"t": {"0": 10, "1": 10}})
    assert m == {
        "minOffsetsBehindLatest": "0",
        "maxOffsetsBehindLatest": "5",
        "avgOffsetsBehindLatest": "2.5",
    }


# -- planning --------------------------------------------------------------------------


def loc(key: str, pos: int, length: int, base: int, last: int) -> BatchLocation:
    return BatchLocation(key, pos, length, base, last, last - base + 1, 0, 0)


def test_spans_coalesce_and_clip() -> None:
    bs = [
        loc("a", 8, 100, 0, 9),
        loc("a", 108, 100, 10, 19),
        loc("b", 8, 50, 20, 24),
        loc("x.parquet", 0, 10, 25, 29),
        loc("x.parquet", 0, 10, 30, 39),
        loc("a", 10_000_000, 10, 40, 49),
    ]
    spans = spans_for(bs, 3, 45)
    assert spans == (
        SegmentSpan("a", 8, 200, ((0, 100, 0), (100, 100, 10))),
        SegmentSpan("b", 8, 50, ((0, 50, 20),)),
        ParquetSpan("x.parquet", 25, 39),
        SegmentSpan("a", 10_000_000, 10, ((0, 10, 40),)),
    )
    tasks = split_range("t", 0, 3, 45, bs, max_bytes=150)
    assert [(t.start, t.end) for t in tasks] == [(3, 20), (20, 45)]
    tasks = split_range("t", 0, 3, 45, bs, max_bytes=1 << 30, max_records=10)
    assert [(t.start, t.end) for t in tasks] == [(3, 20), (20, 30), (30, 40), (40, 45)]
    assert split_range("t", 0, 5, 5, bs, max_bytes=1) == []


def test_plan_is_deterministic_and_pickles(tmp_path: Path) -> None:
    s = seed(tmp_path)
    r = FloeBatchReader(opts(s, minPartitions=5))
    p1, p2 = r.partitions(), r.partitions()
    assert [x.tasks for x in p1] == [x.tasks for x in p2] and len(p1) >= 4
    for p in p1:
        q = pickle.loads(pickle.dumps(p))
        assert isinstance(q, FloePartition) and q.tasks == p.tasks
    for obj in (r, FloeStreamReader(opts(s, streaming=True)), FloeDataSource({"subscribe": "t"})):
        pickle.loads(pickle.dumps(obj))


# -- decoding --------------------------------------------------------------------------


def test_batch_read_all_codecs_exact(tmp_path: Path) -> None:
    s = seed(tmp_path, topics={"t": 2, "u": 1}, segments=12)
    got, batches = read_all(FloeBatchReader(opts(s, includeHeaders="true")))
    assert got == s.expected("t")
    for b in batches:
        assert b.schema == kafka_schema()  # string not large_string, timestamp[us, UTC]
    got, batches = read_all(FloeBatchReader(opts(s, subscribePattern="t|u", subscribe=None)))
    assert [r[:5] for r in got] == [r[:5] for r in s.expected()]
    assert batches[0].schema == output_schema(False)


def test_batch_offsets_and_timestamps(tmp_path: Path) -> None:
    s = seed(tmp_path)
    exp = s.expected("t")
    got, _ = read_all(
        FloeBatchReader(
            opts(
                s,
                startingOffsets='{"t": {"0": 7, "1": -2}}',
                endingOffsets='{"t": {"0": 23, "1": -1}}',
                includeHeaders="true",
            )
        )
    )
    assert got == [r for r in exp if (r[1] == 1 or 7 <= r[2] < 23)]
    # Timestamps: segment i has timestamps T0 + i*1000 + j; they resolve to the exact
    # first record at or after T (Kafka's ListOffsets), not to a whole batch.
    ts = sorted({r[5] for r in exp})
    cut = ts[len(ts) // 2] + 2  # inside a batch
    got, _ = read_all(FloeBatchReader(opts(s, startingTimestamp=cut, includeHeaders="true")))
    first = {p: min(r[2] for r in exp if r[1] == p and r[5] >= cut) for p in (0, 1)}
    assert got == [r for r in exp if r[2] >= first[r[1]]]
    assert all(r[5] >= cut for r in got) and got
    got, _ = read_all(
        FloeBatchReader(
            opts(
                s,
                startingOffsetsByTimestamp=f'{{"t": {{"0": {cut}, "1": 0}}}}',
                endingTimestamp=cut,
                includeHeaders="true",
            )
        )
    )
    assert got == [r for r in exp if first[r[1]] > r[2] >= (first[0] if r[1] == 0 else 0)]
    # JSON offsets and timestamps must name every partition, as in Kafka's source.
    for name, value in (
        ("startingOffsets", '{"t": {"0": 1}}'),
        ("endingOffsets", '{"t": {"0": 1, "1": 2, "2": 3}}'),
        ("startingOffsetsByTimestamp", f'{{"t": {{"0": {cut}}}}}'),
    ):
        with pytest.raises(OptionError, match="you must specify all TopicPartitions"):
            FloeBatchReader(opts(s, **{name: value})).partitions()
    with pytest.raises(OptionError, match="No offset matched"):
        FloeBatchReader(opts(s, startingTimestamp=ts[-1] + 10_000)).partitions()
    got, _ = read_all(
        FloeBatchReader(
            opts(s, startingTimestamp=ts[-1] + 10_000, startingOffsetsByTimestampStrategy="latest")
        )
    )
    assert got == []


def test_pushdown_prunes_and_keeps_results(tmp_path: Path) -> None:
    import datetime as dt

    s = seed(tmp_path)
    exp = s.expected("t")
    ds = FloeDataSource(
        {"metastore": s.metastore, "objects": s.objects, "subscribe": "t", "includeHeaders": "true"}
    )
    assert type(ds.reader(None)) is FloeBatchReader  # type: ignore[arg-type]
    ds = FloeDataSource({**ds.options, "pushdownFilters": "true"})
    r = ds.reader(None)  # type: ignore[arg-type]
    assert isinstance(r, FloePushdownBatchReader)
    cut = sorted({x[5] for x in exp})[12]
    flt = [
        In(("partition",), (1,)),
        GreaterThanOrEqual(("offset",), 4),
        LessThan(("offset",), 20),
        GreaterThanOrEqual(("timestamp",), dt.datetime.fromtimestamp(cut / 1000, dt.UTC)),
        EqualTo(("key",), b"x"),
    ]
    assert list(r.pushFilters(flt)) == flt  # Spark re-checks everything
    parts = r.partitions()
    assert {t.partition for p in parts for t in p.tasks} == {1}
    got, _ = read_all(r, parts)
    assert got == [x for x in exp if x[1] == 1 and 4 <= x[2] < 20 and x[5] >= cut]


def test_mixed_segment_and_parquet(tmp_path: Path) -> None:
    s = seed(tmp_path, config={"t": {"floe.parquet.enable": "true"}}, segments=6)
    before, _ = read_all(FloeBatchReader(opts(s, includeHeaders="true")))
    summary = compact(s)
    assert summary.phases["parquet"].committed == 2
    import asyncio

    asyncio.run(seed_async(tmp_path, segments=4, start_segment=6, existing=s))
    r = FloeBatchReader(opts(s, includeHeaders="true", startingOffsets='{"t": {"0": 3, "1": 0}}'))
    parts = r.partitions()
    kinds = {type(sp).__name__ for p in parts for t in p.tasks for sp in t.spans}
    assert kinds == {"SegmentSpan", "ParquetSpan"}
    got, batches = read_all(r, parts)
    exp = [x for x in s.expected("t") if x[1] == 1 or x[2] >= 3]
    assert got == exp
    assert [x for x in got if x[2] < 30] == [x for x in before if x[1] == 1 or x[2] >= 3]
    for b in batches:
        assert b.schema == kafka_schema()


# -- streaming -------------------------------------------------------------------------


class FakeClock:
    def __init__(self) -> None:
        self.now = 1_000_000

    def __call__(self) -> int:
        return self.now


def st(**hw: tuple[int, int]) -> backend.State:
    tid = uuid.UUID(int=1)
    return {("t", int(k[1:])): backend.PartitionState(tid, lo, hi) for k, (lo, hi) in hw.items()}


def test_stream_admission_control(tmp_path: Path) -> None:
    s = seed(tmp_path, segments=1)
    clock = FakeClock()
    r = FloeStreamReader(
        opts(
            s,
            streaming=True,
            maxOffsetsPerTrigger=10,
            minOffsetsPerTrigger=5,
            maxTriggerDelay="10s",
        ),
        clock,
    )
    assert r.getDefaultReadLimit() == ReadMaxRows(10)
    state = st(p0=(0, 100), p1=(0, 100))
    start = {("t", 0): 0, ("t", 1): 0}
    assert r.next_end(start, state, ReadMaxRows(10)) == {("t", 0): 5, ("t", 1): 5}
    assert r.next_end(start, state, ReadAllAvailable()) == {("t", 0): 100, ("t", 1): 100}
    # min rows: held back until enough data or maxTriggerDelay since the last batch
    clock.now += 1000
    near = {("t", 0): 98, ("t", 1): 100}
    assert r.next_end(near, state, ReadMaxRows(10)) == near
    clock.now += 10_000
    assert r.next_end(near, state, ReadMaxRows(10)) == {("t", 0): 100, ("t", 1): 100}
    # new partition starts at 0; lost data skipped without failOnDataLoss, error with it
    state2 = st(p0=(50, 100), p1=(0, 100), p2=(0, 3))
    r2 = FloeStreamReader(opts(s, streaming=True, failOnDataLoss="false"), clock)
    assert r2.next_end({("t", 0): 10, ("t", 1): 100}, state2, ReadMaxRows(20)) == {
        ("t", 0): 68,  # 50 + 20 * 50/53, from the log start
        ("t", 1): 100,
        ("t", 2): 1,  # 20 * 3/53, from 0
    }
    r3 = FloeStreamReader(opts(s, streaming=True), clock)
    with pytest.raises(backend.DataLossError):
        r3.next_end({("t", 0): 10, ("t", 1): 200}, state2, ReadAllAvailable())
    # availableNow: never past the target recorded at the start
    r.available_now = {("t", 0): 60, ("t", 1): 100}
    assert r.next_end(start, state, ReadMaxRows(1000)) == {("t", 0): 60, ("t", 1): 100}
    assert r.reportLatestOffset() == {"t": {"0": 100, "1": 100}}
    r4 = FloeStreamReader(opts(s, streaming=True, minOffsetsPerTrigger=5))
    assert r4.getDefaultReadLimit() == ReadMinRows(5)


def test_stream_reader_against_metastore(tmp_path: Path) -> None:
    s = seed(tmp_path, segments=4)
    r = FloeStreamReader(opts(s, streaming=True, startingOffsets="earliest"))
    init = r.initialOffset()
    assert init == {"t": {"0": 0, "1": 0}}
    end = r.latestOffset(init, ReadMaxRows(12))
    assert end == {"t": {"0": 6, "1": 6}}
    got, _ = read_all(r, r.partitions(init, end))
    assert [x[:3] for x in got] == [x[:3] for x in s.expected("t") if x[2] < 6]
    assert [p.tasks for p in r.partitions(end, end)] == [()]  # one empty partition
    latest = FloeStreamReader(opts(s, streaming=True)).initialOffset()
    assert latest == {"t": {"0": 20, "1": 20}}
    # retention moves the log start: failOnDataLoss
    with_meta(s.metastore, lambda ms: ms.delete_records(s.topic_ids["t"], 0, 10))
    with pytest.raises(backend.DataLossError):
        r.partitions(init, {"t": {"0": 20, "1": 20}})
    r2 = FloeStreamReader(opts(s, streaming=True, failOnDataLoss="false"))
    got, _ = read_all(r2, r2.partitions(init, {"t": {"0": 20, "1": 20}}))
    assert [x[2] for x in got if x[1] == 0] == list(range(10, 20))
