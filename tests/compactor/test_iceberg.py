"""Topics as Iceberg tables (issue 17): the compactor commits its Parquet files as
snapshots of a table in the SQL catalog of the metastore's own database; the
table's data files are the objects the agent serves Kafka fetches from.

Checked here without Spark: pyiceberg's and DuckDB's scans equal the Kafka view
(offsets, keys, values), day partitions, batch fidelity (codec and producer
fields), typed JSON values with schema evolution and a dead-letter column, time
travel, crash points between PUT/snapshot/swap, retention ordering.
"""

from __future__ import annotations

import datetime
import json
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from compactor.config import CompactorConfig
from compactor.iceberg import IcebergSync, open_catalog
from compactor.runner import Compactor
from kafka_protocol.compression import Compression
from kafka_protocol.records import RecordBatchBuilder, iter_batches
from metastore import Metastore
from objectstore.base import ObjectStore
from objectstore.local import key_path
from tests.compactor.helpers import commit_segment, fetch_reader, make_batch, read_partition
from tests.metastore.helpers import FakeClock

pytest.importorskip("pyiceberg")

NOW = 1_700_000_000_000
DAY = 86_400_000
CFG = CompactorConfig(
    l0_trigger=1000, delete_grace_ms=60_000, orphan_grace_ms=0, parquet_min_level=0
)


def exists(path: str) -> bool:
    return Path(path).exists()


def day_no(d: Any) -> int:
    return (d - datetime.date(1970, 1, 1)).days


class Crash(Exception):
    pass


def crash_at(point: str) -> Callable[[str], None]:
    def fail(name: str) -> None:
        if name == point:
            raise Crash(name)

    return fail


def iceberg_for(meta: Metastore, tmp_path: Path) -> IcebergSync:
    url = f"sqlite:///{tmp_path / 'meta.db'}"
    return IcebergSync(
        meta,
        open_catalog("", url, f"file://{tmp_path / 'objects'}"),
        f"file://{tmp_path / 'objects'}",
    )


async def make_topic(meta: Metastore, name: str, partitions: int = 2, **config: str) -> uuid.UUID:
    res = await meta.create_topic(name, partitions, {"floe.iceberg.enable": "true", **config})
    assert res.topic is not None, res
    return res.topic.id


async def produce_json(
    meta: Metastore,
    store: ObjectStore,
    tid: uuid.UUID,
    n: int,
    *,
    start: int = 0,
    partitions: int = 2,
    extra: Callable[[int], dict[str, Any]] | None = None,
    ts: int = NOW,
) -> None:
    """``n`` JSON records per partition, 10 per batch, codecs rotating, with producer ids."""
    codecs = [
        Compression.NONE,
        Compression.ZSTD,
        Compression.SNAPPY,
        Compression.LZ4,
        Compression.GZIP,
    ]
    for c in range(0, n, 10):
        batches = []
        for p in range(partitions):
            b = RecordBatchBuilder(
                codecs[(c // 10 + p) % len(codecs)],
                producer_id=1000 + p,
                producer_epoch=3,
                base_sequence=start + c,
            )
            for i in range(c, min(c + 10, n)):
                doc: dict[str, Any] = {
                    "id": start + i,
                    "name": f"n{start + i}",
                    "price": (start + i) * 1.5,
                }
                if extra:
                    doc.update(extra(start + i))
                b.append(
                    f"k{i % 7}".encode(),
                    json.dumps(doc).encode(),
                    [("h", b"v")],
                    timestamp_ms=ts + i,
                )
            batches.append((tid, p, b.build()))
        await commit_segment(meta, store, f"agent/{uuid.uuid4().hex}", batches)


async def kafka_rows(
    meta: Metastore, store: ObjectStore, tid: uuid.UUID, partitions: int = 2
) -> list[tuple[int, int, bytes | None, bytes | None]]:
    out = []
    for p in range(partitions):
        out.extend(
            (r.partition, r.offset, r.key, r.value)
            for r in await read_partition(meta, store, tid, p)
        )
    return sorted(out)


def table_rows(
    sync: IcebergSync, topic: str, **scan: Any
) -> list[tuple[int, int, bytes | None, bytes | None]]:
    t = sync.catalog.load_table(sync.identifier(topic))
    rows = t.scan(**scan).to_arrow().select(["partition", "offset", "key", "value"]).to_pylist()
    return sorted((r["partition"], r["offset"], r["key"], r["value"]) for r in rows)


async def test_table_equals_kafka_view_and_duckdb(
    meta: Metastore, store: ObjectStore, tmp_path: Path, clock: FakeClock
) -> None:
    tid = await make_topic(meta, "orders.v1", **{"floe.value.format": "json"})
    await produce_json(meta, store, tid, 50)
    sync = iceberg_for(meta, tmp_path)
    before = await kafka_rows(meta, store, tid)
    await Compactor(meta, store, CFG, now_ms=clock, iceberg=sync).run_pass()
    assert sync.summary.errors == []
    after = await kafka_rows(meta, store, tid)
    assert after == before and len(after) == 100
    assert table_rows(sync, "orders.v1") == before
    t = sync.catalog.load_table(("floe", "orders_v1"))
    # typed value columns
    arrow = t.scan(selected_fields=("offset", "partition", "value_json")).to_arrow().to_pylist()
    assert all(r["value_json"]["name"] == f"n{r['value_json']['id']}" for r in arrow)
    # partitioned by partition and day; one file per (partition, day)
    files = t.inspect.files().to_pylist()
    assert {
        (f["partition"]["partition"], day_no(f["partition"]["timestamp_day"])) for f in files
    } == {(0, NOW // DAY), (1, NOW // DAY)}
    # DuckDB reads the same data files the table names (zero copy: they are our objects)
    duckdb = pytest.importorskip("duckdb")
    paths = [f["file_path"] for f in files]
    assert all(exists(p) and "/parquet/" in p for p in paths)
    got = duckdb.sql(
        f'select partition, "offset", key, value from read_parquet({paths!r})'
    ).fetchall()
    assert sorted((p, o, bytes(k), bytes(v)) for p, o, k, v in got) == before


async def test_fetch_rebuilds_codec_and_producer_fields(
    meta: Metastore, store: ObjectStore, tmp_path: Path, clock: FakeClock
) -> None:
    tid = await make_topic(meta, "fid", partitions=1)
    await produce_json(meta, store, tid, 40, partitions=1)
    reader = fetch_reader(meta, store)

    async def headers() -> list[tuple[int, int, int, int, int, int, int, int]]:
        res = await reader.find(tid, 0, 0, 1 << 20, fresh=True)
        data = await reader.read(res.batches)
        return [
            (
                v.base_offset,
                v.last_offset,
                int(v.compression),
                v.producer_id,
                v.producer_epoch,
                v.base_sequence,
                v.base_timestamp,
                v.max_timestamp,
            )
            for v in iter_batches(data, validate=True)
        ]

    before = await headers()
    await Compactor(meta, store, CFG, now_ms=clock, iceberg=iceberg_for(meta, tmp_path)).run_pass()
    objs = [o.key async for o in store.list("parquet/")]
    assert objs, "converted to Parquet"
    assert await headers() == before


async def test_batch_across_midnight_is_split_by_day(
    meta: Metastore, store: ObjectStore, tmp_path: Path, clock: FakeClock
) -> None:
    tid = await make_topic(meta, "mid", partitions=1)
    midnight = (NOW // DAY + 1) * DAY
    recs = [(b"k", b'{"a": %d}' % i) for i in range(6)]
    b = RecordBatchBuilder(Compression.ZSTD, producer_id=7, producer_epoch=1, base_sequence=0)
    for i, (k, v) in enumerate(recs):
        b.append(k, v, [], timestamp_ms=midnight - 3 + i)
    await commit_segment(meta, store, "agent/m1", [(tid, 0, b.build())])
    before = await kafka_rows(meta, store, tid, 1)
    sync = iceberg_for(meta, tmp_path)
    await Compactor(meta, store, CFG, now_ms=clock, iceberg=sync).run_pass()
    assert await kafka_rows(meta, store, tid, 1) == before
    t = sync.catalog.load_table(("floe", "mid"))
    days = sorted(day_no(f["partition"]["timestamp_day"]) for f in t.inspect.files().to_pylist())
    assert days == [midnight // DAY - 1, midnight // DAY]
    assert table_rows(sync, "mid") == before


async def test_schema_evolution_dead_letter_and_time_travel(
    meta: Metastore, store: ObjectStore, tmp_path: Path, clock: FakeClock
) -> None:
    tid = await make_topic(meta, "evo", partitions=1, **{"floe.value.format": "json"})
    await produce_json(meta, store, tid, 20, partitions=1)
    sync = iceberg_for(meta, tmp_path)
    comp = Compactor(meta, store, CFG, now_ms=clock, iceberg=sync)
    await comp.run_pass()
    t = sync.catalog.load_table(("floe", "evo"))
    first = t.current_snapshot()
    assert first is not None
    old_files = {f["file_path"] for f in t.inspect.files().to_pylist()}
    # a new optional field, a record that is not JSON, one whose known field has another type
    await produce_json(
        meta, store, tid, 20, start=20, partitions=1, extra=lambda i: {"coupon": f"c{i}"}
    )
    await commit_segment(
        meta,
        store,
        "agent/bad",
        [(tid, 0, make_batch([(b"x", b"not json"), (b"y", b'{"id": "str"}')], NOW + 99))],
    )
    await comp.run_pass()
    assert sync.summary.errors == []
    t = sync.catalog.load_table(("floe", "evo"))
    vj = t.schema().find_field("value_json")
    assert "coupon" in [f.name for f in vj.field_type.fields]
    assert not t.schema().find_field("value_json.coupon").required
    files = {f["file_path"] for f in t.inspect.files().to_pylist()}
    assert old_files <= files  # older files kept as they were
    rows = t.scan().to_arrow().sort_by("offset").to_pylist()
    assert len(rows) == 42
    assert rows[0]["value_json"]["coupon"] is None and rows[25]["value_json"]["coupon"] == "c25"
    dead = [r for r in rows if r["value_error"] is not None]
    assert [r["value"] for r in dead] == [b"not json", b'{"id": "str"}']
    assert all(r["value_json"] is None for r in dead)
    # time travel: the first snapshot has the first 20 rows only
    assert len(table_rows(sync, "evo", snapshot_id=first.snapshot_id)) == 20


@pytest.mark.parametrize("point", ["after_put", "after_snapshot"])
async def test_crash_between_put_snapshot_and_swap(
    meta: Metastore, store: ObjectStore, tmp_path: Path, clock: FakeClock, point: str
) -> None:
    tid = await make_topic(meta, "crash")
    await produce_json(meta, store, tid, 30)
    before = await kafka_rows(meta, store, tid)
    sync = iceberg_for(meta, tmp_path)
    with pytest.raises(Crash):
        await Compactor(
            meta, store, CFG, now_ms=clock, iceberg=sync, fail_point=crash_at(point)
        ).run_pass()
    assert await kafka_rows(meta, store, tid) == before
    if point == "after_snapshot":
        assert table_rows(sync, "crash") == before  # the table has them; Kafka still from segments
    # the next run: table and Kafka view agree, nothing lost or duplicated
    sync2 = iceberg_for(meta, tmp_path)
    await Compactor(meta, store, CFG, now_ms=clock, iceberg=sync2).run_pass()
    assert await kafka_rows(meta, store, tid) == before
    assert table_rows(sync2, "crash") == before
    t = sync2.catalog.load_table(("floe", "crash"))
    live = {
        str(key_path(tmp_path / "objects", f.object_key))
        for p in range(2)
        for f in await meta.list_parquet_files(tid, p)
    }
    assert {f["file_path"] for f in t.inspect.files().to_pylist()} == live
    # the orphan GC deletes the abandoned file only after expiring the snapshots naming it
    clock.advance(CFG.delete_grace_ms + 1)
    await Compactor(meta, store, CFG, now_ms=clock, iceberg=sync2).run_pass()
    t = sync2.catalog.load_table(("floe", "crash"))
    for snap in t.snapshots():
        for task in t.scan(snapshot_id=snap.snapshot_id).plan_files():
            assert exists(task.file.file_path)
    assert table_rows(sync2, "crash") == before


async def test_delete_records_leaves_table_before_files_go(
    meta: Metastore, store: ObjectStore, tmp_path: Path, clock: FakeClock
) -> None:
    tid = await make_topic(meta, "ret", partitions=1)
    await produce_json(meta, store, tid, 20, partitions=1)
    sync = iceberg_for(meta, tmp_path)
    comp = Compactor(meta, store, CFG, now_ms=clock, iceberg=sync)
    await comp.run_pass()
    await produce_json(meta, store, tid, 20, start=20, partitions=1, ts=NOW + DAY)
    await comp.run_pass()
    t = sync.catalog.load_table(("floe", "ret"))
    assert len(t.inspect.files()) == 2
    res = await meta.delete_records(tid, 0, 20)
    await comp.run_pass()
    t = sync.catalog.load_table(("floe", "ret"))
    assert table_rows(sync, "ret") == await kafka_rows(meta, store, tid, 1)
    assert len(table_rows(sync, "ret")) == 20, res
    gone = [s for s in t.snapshots()]
    assert len(gone) >= 3
    # after the grace period the retired file is deleted, and snapshots naming it expired first
    clock.advance(CFG.delete_grace_ms + 1)
    s = await comp.run_pass()
    assert sync.summary.snapshots_expired >= 1
    t = sync.catalog.load_table(("floe", "ret"))
    for snap in t.snapshots():
        for task in t.scan(snapshot_id=snap.snapshot_id).plan_files():
            assert exists(task.file.file_path)
    # the orphan GC removed the expired snapshots' manifests: what is left is reachable
    assert any("/iceberg/" in o for o in s.orphans)
    on_disk = {str(p) for p in (tmp_path / "objects" / "iceberg").rglob("*") if p.is_file()}
    reachable = {
        x.removeprefix("file://") for x in sync.referenced_metadata([await meta.get_topic("ret")])
    }
    assert on_disk == reachable
    assert table_rows(sync, "ret") == await kafka_rows(meta, store, tid, 1)


@pytest.mark.postgres
async def test_sql_catalog_in_postgres_metastore(postgres_url: str, tmp_path: Path) -> None:
    """The default catalog lives in the metastore's own Postgres database."""
    from metastore import open_metastore
    from objectstore import open_object_store

    clock = FakeClock()
    objects = f"file://{tmp_path / 'objects'}"
    meta = await open_metastore(postgres_url, now_ms=clock)
    store = open_object_store(objects)
    try:
        tid = await make_topic(meta, "pg", partitions=2, **{"floe.value.format": "json"})
        await produce_json(meta, store, tid, 30)
        sync = IcebergSync.from_urls(meta, "", postgres_url, objects)
        await Compactor(meta, store, CFG, now_ms=clock, iceberg=sync).run_pass()
        assert sync.summary.errors == []
        assert table_rows(sync, "pg") == await kafka_rows(meta, store, tid)
        assert "postgresql" in str(sync.catalog.engine.url)
    finally:
        await store.close()
        await meta.close()


async def test_avro_and_protobuf_values_typed_with_dead_letters(
    meta: Metastore, store: ObjectStore, tmp_path: Path, clock: FakeClock
) -> None:
    """floe.value.format=avro (writer's schema given) and =protobuf (descriptor set):
    typed value_json columns, undecodable values in value_error (never dropped);
    a schema with a new optional field adds a nullable column, older files kept."""
    from tests.objectstore.test_typed_values import AVRO, avro_bytes, order, protobuf_settings

    avro_tid = await make_topic(
        meta, "av", partitions=1,
        **{"floe.value.format": "avro", "floe.value.avro.schema": json.dumps(AVRO)},
    )  # fmt: skip
    settings = json.loads(protobuf_settings()[0])
    _, cls = protobuf_settings()
    pb_tid = await make_topic(
        meta, "pb", partitions=1,
        **{"floe.value.format": "protobuf", "floe.value.protobuf.descriptor": settings["descriptor"],
           "floe.value.protobuf.message": settings["message"]},
    )  # fmt: skip
    avro_vals = [(b"k", avro_bytes(order(i))) for i in range(10)] + [(b"bad", b"\x01junk")]
    pb_vals = [(b"k", cls(id=i, item=f"s{i}").SerializeToString()) for i in range(10)]
    pb_vals.append((b"bad", b"\xff" * 11))
    await commit_segment(
        meta, store, "agent/a",
        [(avro_tid, 0, make_batch(avro_vals, NOW)), (pb_tid, 0, make_batch(pb_vals, NOW))],
    )  # fmt: skip
    sync = iceberg_for(meta, tmp_path)
    comp = Compactor(meta, store, CFG, now_ms=clock, iceberg=sync)
    await comp.run_pass()
    assert sync.summary.errors == []
    for name, tid in (("av", avro_tid), ("pb", pb_tid)):
        rows = sync.catalog.load_table(("floe", name)).scan().to_arrow().sort_by("offset")
        got = rows.to_pylist()
        assert len(got) == 11
        assert [r["value_json"]["id"] for r in got[:10]] == list(range(10))
        assert got[10]["value_json"] is None and got[10]["value_error"]
        assert [(r["partition"], r["offset"], r["key"], r["value"]) for r in got] == (
            await kafka_rows(meta, store, tid, partitions=1)
        )
    t = sync.catalog.load_table(("floe", "av"))
    old_files = {f["file_path"] for f in t.inspect.files().to_pylist()}
    # the writers move to a schema with a new optional field
    v2 = {**AVRO, "fields": [*AVRO["fields"], {"name": "coupon", "type": ["null", "string"], "default": None}]}
    res = await meta.alter_topic_config("av", {"floe.value.avro.schema": json.dumps(v2)})
    assert res.error is None or res.error.name == "NONE", res
    await commit_segment(
        meta, store, "agent/b",
        [(avro_tid, 0, make_batch([(b"k", avro_bytes({**order(11), "coupon": "c"}, v2))], NOW + 50))],
    )  # fmt: skip
    await comp.run_pass()
    t = sync.catalog.load_table(("floe", "av"))
    assert not t.schema().find_field("value_json.coupon").required
    assert old_files <= {f["file_path"] for f in t.inspect.files().to_pylist()}
    got = t.scan().to_arrow().sort_by("offset").to_pylist()
    assert len(got) == 12 and got[11]["value_json"]["coupon"] == "c"
    assert got[0]["value_json"]["coupon"] is None


def test_catalog_opened_by_two_processes_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """pyiceberg checks for its catalog tables, then creates them; another process
    (the dev compactor, a reader) may create them in between. The loser of that
    race opens the catalog instead of failing (a CI run failed so with `table
    iceberg_tables already exists`). The race is made certain: the rival creates
    the tables right before this process does."""
    from pyiceberg.catalog.sql import SqlCatalog, SqlCatalogBaseTable
    from sqlalchemy import create_engine

    url = f"sqlite:///{tmp_path / 'meta.db'}"
    raced: list[bool] = []

    def rival_first(self: SqlCatalog) -> None:
        if not raced:  # this process saw no tables; the rival creates them now
            raced.append(True)
            rival = create_engine(url)
            SqlCatalogBaseTable.metadata.create_all(rival)
            rival.dispose()
        SqlCatalogBaseTable.metadata.create_all(self.engine, checkfirst=False)

    monkeypatch.setattr(SqlCatalog, "create_tables", rival_first)
    cat = open_catalog("", url, f"file://{tmp_path / 'objects'}")
    assert raced == [True]
    cat.create_namespace("floe")
    assert ("floe",) in cat.list_namespaces()


async def test_registry_avro_unreachable_is_retried_not_lost(
    meta: Metastore, store: ObjectStore, tmp_path: Path, clock: FakeClock
) -> None:
    """floe.value.schema.registry.url: Confluent wire-format Avro values typed with
    the writer schema of their id (cached ids: no registry asked), a later schema id
    with a new optional field adds a nullable column; an unreachable registry fails
    the task (the batches stay in their segments, Kafka view unchanged) until the
    wait is over, then those values are dead letters, nothing dropped."""
    from objectstore import schema_registry as sr
    from tests.objectstore.test_schema_registry import V1, V2, closed_url, wire

    url = closed_url()
    tid = await make_topic(
        meta, "sr", partitions=1,
        **{"floe.value.format": "avro", "floe.value.schema.registry.url": url,
           "floe.value.schema.registry.wait.ms": str(10 * 365 * 86_400_000)},
    )  # fmt: skip
    vals = [(b"k", wire(1, {"id": i, "page": f"/{i}"}, V1)) for i in range(5)]
    await commit_segment(meta, store, "agent/a", [(tid, 0, make_batch(vals, NOW))])
    before = await kafka_rows(meta, store, tid, partitions=1)
    sync = iceberg_for(meta, tmp_path)
    comp = Compactor(meta, store, CFG, now_ms=clock, iceberg=sync)
    summary = await comp.run_pass()
    assert summary.phases["parquet"].failed == 1 and summary.phases["parquet"].committed == 0
    assert await kafka_rows(meta, store, tid, partitions=1) == before  # nothing lost
    # the registry answers again (here: the schemas are in the process cache)
    sr._CACHE[(url, 1)] = json.dumps(V1)
    sr._CACHE[(url, 2)] = json.dumps(V2)
    await comp.run_pass()
    assert sync.summary.errors == []
    t = sync.catalog.load_table(("floe", "sr"))
    got = t.scan().to_arrow().sort_by("offset").to_pylist()
    assert [r["value_json"]["page"] for r in got] == [f"/{i}" for i in range(5)]
    old_files = {f["file_path"] for f in t.inspect.files().to_pylist()}
    # a later schema id adds an optional field; id 3 is unknown and the registry is down
    more = [(b"k", wire(2, {"id": 5, "page": "/5", "ref": "r"}, V2)), (b"k", wire(3, {"id": 6, "page": "/6"}, V1))]
    await commit_segment(meta, store, "agent/b", [(tid, 0, make_batch(more, NOW + 50))])
    res = await meta.alter_topic_config("sr", {"floe.value.schema.registry.wait.ms": "0"})
    assert res.error is None or res.error.name == "NONE", res
    await comp.run_pass()
    t = sync.catalog.load_table(("floe", "sr"))
    assert not t.schema().find_field("value_json.ref").required
    assert old_files <= {f["file_path"] for f in t.inspect.files().to_pylist()}
    got = t.scan().to_arrow().sort_by("offset").to_pylist()
    assert len(got) == 7 and got[5]["value_json"]["ref"] == "r" and got[0]["value_json"]["ref"] is None
    assert got[6]["value_json"] is None and got[6]["value_error"].startswith("schema registry unreachable")
    assert [(r["partition"], r["offset"], r["key"], r["value"]) for r in got] == (
        await kafka_rows(meta, store, tid, partitions=1)
    )


@pytest.mark.slow
@pytest.mark.interop
@pytest.mark.s3
async def test_spark_reads_iceberg_table_on_s3(s3_url: str, tmp_path: Path, clock: FakeClock) -> None:
    """The table's data files on S3 (moto): Spark (the side Spark 4.1 runner) reads
    the table through the JDBC Iceberg catalog with S3FileIO + iceberg-aws-bundle;
    its rows equal the Kafka view."""
    from metastore import open_metastore
    from objectstore import open_object_store
    from tests.fixtures.iceberg_spark import run_iceberg_sql, unb64

    mdb = f"sqlite:///{tmp_path / 'meta.db'}"
    clock.now = NOW
    meta = await open_metastore(mdb, now_ms=clock)
    store = open_object_store(s3_url)
    try:
        tid = await make_topic(meta, "t", partitions=2)
        await produce_json(meta, store, tid, 30)
        sync = IcebergSync(meta, open_catalog("", mdb, s3_url), s3_url)
        await Compactor(meta, store, CFG, now_ms=clock, iceberg=sync).run_pass()
        assert sync.summary.errors == []
        want = await kafka_rows(meta, store, tid)
        res = run_iceberg_sql(mdb, s3_url, {"rows": "select `partition`, `offset`, key, value from floe.floe.t"})
        got = sorted((r["partition"], r["offset"], unb64(r["key"]), unb64(r["value"])) for r in res["rows"])
        assert len(want) == 60 and got == want
    finally:
        await store.close()
        await meta.close()
