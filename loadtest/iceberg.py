"""Compactor Parquet/Iceberg write throughput, bytes stored, and full-table scans.

``python -m loadtest.iceberg [--records 400000] [--partitions 4] [--spark]``

Two data directories (SQLite metastore + ``file://`` store each) get the same
JSON records as zstd record batches written straight into segments (what agents
would have committed; 500 records per batch, producer ids set):

* ``parquet``: ``floe.parquet.enable=true`` (the same-run baseline: Parquet only);
* ``iceberg``: ``floe.iceberg.enable=true`` + ``floe.value.format=json`` (typed
  ``value_json`` columns, day partitions, snapshot commits in the SQL catalog).

One compactor pass converts everything (``parquet_min_level=0``); its wall time
gives the write throughput (segment MB read per second, Parquet MB written per
second), the Iceberg commit time is timed on its own. A second pass after the
grace period deletes the segments; then the bytes under the store's directory
(Parquet + Iceberg metadata) are compared with the produced batch bytes
(``stored/produced``: one copy of each record means ~1).

Scans of the whole table (count, sum of value lengths, sum of a typed field):
DuckDB over the data files the Iceberg snapshot lists, pyiceberg's own scan,
and with ``--spark`` Spark over ``format("floe")`` and over the Iceberg
snapshot's files (the project's PySpark, one local[2] session) vs Spark through
the Iceberg catalog (``floe.floe.bench`` in Spark's ``SparkCatalog`` over the
JDBC catalog in the metastore's SQLite file: :mod:`loadtest.spark_iceberg`, a
local[2] Spark of its own; Spark 4.1, the newest line with an
iceberg-spark-runtime, while the project's PySpark is newer). Each scan runs
twice; the second (warm) is the one to compare.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

MB = 1_000_000
DAY = 86_400_000


def du(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


async def seed(
    meta: Any, store: Any, tid: uuid.UUID, records: int, partitions: int
) -> tuple[int, int]:
    """``(produced batch bytes, raw key+value bytes)``."""
    from kafka_protocol.compression import Compression
    from kafka_protocol.records import RecordBatchBuilder
    from loadtest.segments import put_segment
    from objectstore.segment import BatchMeta, SegmentBuilder

    produced = raw = 0
    now = int(time.time() * 1000)
    per_batch, per_segment = 500, 16
    seq = [0] * partitions
    i = 0
    while i < records:
        sb = SegmentBuilder()
        for _ in range(per_segment):
            if i >= records:
                break
            p = (i // per_batch) % partitions
            b = RecordBatchBuilder(
                Compression.ZSTD, producer_id=100 + p, producer_epoch=0, base_sequence=seq[p]
            )
            for _j in range(min(per_batch, records - i)):
                k = f"user-{i % 9973}".encode()
                v = json.dumps(
                    {"id": i, "item": f"sku-{i % 1013}", "qty": i % 7 + 1, "price": (i % 1000) / 4,
                     "note": "x" * (i % 64), "ok": i % 3 == 0}
                ).encode()  # fmt: skip
                raw += len(k) + len(v)
                b.append(k, v, [("src", b"bench")], timestamp_ms=now + i)
                i += 1
            seq[p] += per_batch
            data = b.build()
            produced += len(data)
            sb.add(tid, p, data, BatchMeta.from_record_batch(data))
        await put_segment(store, meta, sb)
    return produced, raw


async def run_one(base: Path, mode: str, records: int, partitions: int) -> dict[str, Any]:
    from compactor.config import CompactorConfig
    from compactor.iceberg import IcebergSync
    from compactor.runner import Compactor
    from metastore import open_metastore
    from objectstore import open_object_store

    d = base / mode
    (d / "objects").mkdir(parents=True)
    clock = [int(time.time() * 1000)]
    meta_url, objects_url = f"sqlite:///{d / 'meta.db'}", f"file://{d / 'objects'}"
    meta = await open_metastore(meta_url, now_ms=lambda: clock[0])
    store = open_object_store(objects_url)
    cfg = CompactorConfig(
        l0_trigger=1 << 20, parquet_min_level=0, delete_grace_ms=1000, orphan_grace_ms=3_600_000
    )
    conf = {"floe.parquet.enable": "true"} if mode == "parquet" else {
        "floe.iceberg.enable": "true", "floe.value.format": "json"}  # fmt: skip
    res = await meta.create_topic("bench", partitions, conf)
    assert res.topic is not None
    produced, raw = await seed(meta, store, res.topic.id, records, partitions)
    segs = du(d / "objects")
    iceberg = IcebergSync.from_urls(meta, "", meta_url, objects_url) if mode == "iceberg" else None
    commit_s = [0.0]
    if iceberg is not None:
        inner = iceberg.commit_parquet

        async def timed(*a: Any) -> None:
            t = time.perf_counter()
            await inner(*a)
            commit_s[0] += time.perf_counter() - t

        iceberg.commit_parquet = timed  # type: ignore[method-assign,assignment]
    comp = Compactor(meta, store, cfg, now_ms=lambda: clock[0], iceberg=iceberg)
    t0 = time.perf_counter()
    s = await comp.run_pass()
    wall = time.perf_counter() - t0
    ph = s.phases["parquet"]
    clock[0] += 2000
    await comp.run_pass()  # the replaced segments go (grace passed)
    out: dict[str, Any] = {
        "mode": mode,
        "records": records,
        "produced_bytes": produced,
        "raw_kv_bytes": raw,
        "segment_bytes": segs,
        "pass_s": round(wall, 3),
        "records_per_s": round(records / wall),
        "raw_kv_MBps": round(raw / MB / wall, 1),
        "read_MBps": round(ph.bytes_read / MB / wall, 1),
        "written_MBps": round(ph.bytes_written / MB / wall, 1),
        "parquet_bytes": ph.bytes_written,
        "iceberg_commit_s": round(commit_s[0], 3),
        "stored_bytes": du(d / "objects"),
        "iceberg_metadata_bytes": du(d / "objects" / "iceberg")
        if (d / "objects" / "iceberg").exists()
        else 0,
    }
    out["stored_over_produced"] = round(int(out["stored_bytes"]) / produced, 3)
    await store.close()
    await meta.close()
    return out


def scans(base: Path, spark: bool) -> dict[str, Any]:
    import duckdb

    from compactor.iceberg import open_catalog

    d = base / "iceberg"
    cat = open_catalog("", f"sqlite:///{d / 'meta.db'}", f"file://{d / 'objects'}")
    table = cat.load_table(("floe", "bench"))
    out: dict[str, Any] = {}
    t = time.perf_counter()
    paths = [f.file.file_path for f in table.scan().plan_files()]
    plan_s = time.perf_counter() - t
    t = time.perf_counter()
    rel: Any = duckdb.sql(
        f"select count(*), sum(octet_length(value)), sum(value_json.qty) from read_parquet({paths!r})"
    )
    n, vbytes, qty = rel.fetchall()[0]
    out["duckdb_iceberg_s"] = round(time.perf_counter() - t + plan_s, 3)
    out["duckdb_rows"] = n
    t = time.perf_counter()
    arrow = table.scan(selected_fields=("value", "value_json")).to_arrow()
    out["pyiceberg_scan_s"] = round(time.perf_counter() - t, 3)
    assert arrow.num_rows == n
    if spark:
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        from pyspark.sql import SparkSession

        s = (
            SparkSession.builder.master("local[2]").appName("floe-iceberg-bench")
            .config("spark.ui.enabled", "false").config("spark.driver.memory", "2g")
            .config("spark.sql.session.timeZone", "UTC").getOrCreate()
        )  # fmt: skip
        s.sparkContext.setLogLevel("ERROR")
        agg = ("count(*) as n", "sum(length(value)) as b")
        floe = (
            s.read.format("floe").option("metastore", f"sqlite:///{d / 'meta.db'}")
            .option("objects", f"file://{d / 'objects'}").option("subscribe", "bench").load()
        )  # fmt: skip
        ice = s.read.parquet(*paths)
        for name, df in (("floe", floe), ("iceberg_files", ice)) * 2:  # second round: warm
            t = time.perf_counter()
            r = df.selectExpr(*agg).collect()[0]
            out[f"spark_{name}_s"] = round(time.perf_counter() - t, 3)
            assert r["n"] == n and r["b"] == vbytes, (name, r, n, vbytes)
        out["spark_floe_version"] = s.version
        s.stop()
        from loadtest.spark_iceberg import run_iceberg_sql

        q = "select count(*) as n, sum(length(value)) as b from floe.floe.bench"
        got = run_iceberg_sql(
            f"sqlite:///{d / 'meta.db'}", f"file://{d / 'objects'}", {"cold": q, "warm": q}
        )
        for name in ("cold", "warm"):
            r = got[name][0]
            assert r["n"] == n and r["b"] == vbytes, (name, r, n, vbytes)
            out[f"spark_iceberg_catalog_{name}_s"] = round(got["seconds"][name], 3)
        out["spark_iceberg_version"] = got["spark_version"]
    out["sum_qty"] = qty
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m loadtest.iceberg")
    ap.add_argument("--records", type=int, default=400_000)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--spark", action="store_true")
    ap.add_argument("--keep", action="store_true")
    args = ap.parse_args(argv)
    base = Path(tempfile.mkdtemp(prefix="floe-iceberg-bench-"))
    try:
        results = [
            asyncio.run(run_one(base, m, args.records, args.partitions))
            for m in ("parquet", "iceberg")
        ]
        for r in results:
            print(json.dumps(r))
        print(json.dumps({"scans": scans(base, args.spark)}))
        print(json.dumps({"loadavg": os.getloadavg()}))
    finally:
        if not args.keep:
            shutil.rmtree(base, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
