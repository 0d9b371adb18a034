"""Throughput of a batch read through the ``floe`` Spark source vs ``spark.read.parquet``.

``python -m loadtest.spark_source --gb 1 [--value-bytes 1024] [--codec none] [--dir DIR]``

Writes ``--gb`` of record payload (keys + values) as Floe segments (SQLite
metastore + ``file://`` store, committed exactly as an agent would), and the
same records as Parquet files in the compactor's layout (zstd, Kafka schema).
Then runs the same aggregate, which touches every key and value, over
``spark.read.format("floe")`` and over ``spark.read.parquet`` in a local[N]
session, and also times the source's executor read path alone (no Spark).
Reports rows/s and MB/s (payload bytes, 10^6) for each.
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

from kafka_protocol.compression import Compression
from kafka_protocol.records import RecordBatchBuilder
from metastore import BatchToCommit, ErrorCode, open_metastore
from objectstore import open_object_store
from objectstore.parquet import kafka_schema, write_table
from objectstore.segment import BatchMeta, SegmentBuilder

TOPIC = "bench"


async def generate(
    base: Path, total_bytes: int, value_bytes: int, partitions: int, codec: Compression
) -> tuple[str, str, Path, int, int]:
    import pyarrow as pa

    (base / "objects").mkdir(parents=True, exist_ok=True)
    pq_dir = base / "parquet"
    pq_dir.mkdir(exist_ok=True)
    murl = f"sqlite:///{base / 'meta.db'}"
    ourl = f"file://{base / 'objects'}"
    meta = await open_metastore(murl)
    store = open_object_store(ourl)
    try:
        res = await meta.create_topic(TOPIC, partitions, {"retention.ms": "-1"})
        assert res.topic is not None, res
        tid: uuid.UUID = res.topic.id
        per_batch = max(1, (512 * 1024) // value_bytes)
        key_bytes = 16
        rows_total = total_bytes // (value_bytes + key_bytes)
        # Distinct values (no dictionary dedup, no compression) sliced from one random blob.
        blob = os.urandom(32 * 1024 * 1024 + value_bytes)
        now = int(time.time() * 1000)
        written = 0
        seg_no = 0
        offsets = [0] * partitions
        pq_tables: list[list[Any]] = [[] for _ in range(partitions)]
        while written < rows_total:
            sb = SegmentBuilder()
            seg_rows = 0
            batches_meta = []
            while sb.size < 64 * 1024 * 1024 and written + seg_rows < rows_total:
                for p in range(partitions):
                    n = min(per_batch, rows_total - written - seg_rows)
                    if n <= 0:
                        break
                    b = RecordBatchBuilder(codec)
                    keys, values = [], []
                    for j in range(n):
                        k = b"k%015d" % (offsets[p] + j)
                        o = ((offsets[p] + j) * 104_729 + p * 7_919) % (32 * 1024 * 1024)
                        v = blob[o : o + value_bytes]
                        b.append(k, v, (), timestamp_ms=now)
                        keys.append(k)
                        values.append(v)
                    data = b.build()
                    sb.add(tid, p, data, BatchMeta.from_record_batch(data))
                    pq_tables[p].append((offsets[p], keys, values))
                    offsets[p] += n
                    seg_rows += n
                    batches_meta.append(n)
            data, entries = sb.finish()
            key = f"bench/{seg_no:06d}"
            await store.put(key, data)
            commits = [
                BatchToCommit(
                    e.topic_id,
                    e.partition,
                    e.byte_pos,
                    e.byte_len,
                    e.record_count,
                    e.last_offset_delta,
                    e.base_timestamp,
                    e.max_timestamp,
                )
                for e in entries
            ]
            results = await meta.commit_object(key, len(data), "bench", commits)
            assert all(r.error == ErrorCode.NONE for r in results)
            written += seg_rows
            seg_no += 1
            # Parquet copy of the same records, one file per partition chunk.
            for p in range(partitions):
                chunks = pq_tables[p]
                if not chunks:
                    continue
                keys = [k for _, ks, _ in chunks for k in ks]
                values = [v for _, _, vs in chunks for v in vs]
                first = chunks[0][0]
                n = len(keys)
                schema = kafka_schema()
                table = pa.Table.from_arrays(
                    [
                        pa.array(keys, pa.binary()),
                        pa.array(values, pa.binary()),
                        pa.array([TOPIC] * n, pa.string()),
                        pa.array([p] * n, pa.int32()),
                        pa.array(range(first, first + n), pa.int64()),
                        pa.array([now * 1000] * n, pa.int64()).cast(pa.timestamp("us", tz="UTC")),
                        pa.array([0] * n, pa.int32()),
                        pa.array([[]] * n, schema.field("headers").type),
                    ],
                    schema=schema,
                )
                (pq_dir / f"p{p}-{seg_no:06d}.parquet").write_bytes(write_table(table))
                pq_tables[p] = []
        return murl, ourl, pq_dir, written, written * (value_bytes + key_bytes)
    finally:
        await store.close()
        await meta.close()


QUERY = ["count(*) AS n", "sum(length(key)) + sum(length(value)) AS bytes", "max(offset) AS mx"]


def timed(fn: Any, repeat: int) -> tuple[float, Any]:
    best = float("inf")
    out = None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t0)
    return best, out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m loadtest.spark_source")
    ap.add_argument("--gb", type=float, default=1.0, help="payload (key + value) to write")
    ap.add_argument("--value-bytes", type=int, default=1024)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--codec", default="none", choices=["none", "gzip", "snappy", "lz4", "zstd"])
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--dir", default=None, help="work directory (default: a temp dir, removed)")
    ap.add_argument("--json", action="store_true", help="print the result as JSON")
    args = ap.parse_args(argv)

    base = Path(args.dir or tempfile.mkdtemp(prefix="floe-spark-bench-"))
    codec = Compression[args.codec.upper()]
    try:
        t0 = time.perf_counter()
        murl, ourl, pq_dir, rows, payload = asyncio.run(
            generate(base, int(args.gb * 1e9), args.value_bytes, args.partitions, codec)
        )
        gen_s = time.perf_counter() - t0
        seg_bytes = sum(f.stat().st_size for f in (base / "objects").rglob("*.obj"))
        pq_bytes = sum(f.stat().st_size for f in pq_dir.glob("*.parquet"))
        print(
            f"generated {rows:,} rows, {payload / 1e6:,.0f} MB payload in {gen_s:.1f}s "
            f"(segments {seg_bytes / 1e6:,.0f} MB, parquet {pq_bytes / 1e6:,.0f} MB)",
            file=sys.stderr,
        )

        # The executor read path alone (one process, no Spark).
        from spark_source.options import parse_options
        from spark_source.reader import read_tasks
        from spark_source.source import FloeBatchReader

        opts = parse_options(
            {"metastore": murl, "objects": ourl, "subscribe": TOPIC}, streaming=False
        )
        parts = FloeBatchReader(opts).partitions()

        def direct() -> int:
            n = 0
            for p in parts:
                for b in read_tasks(p.tasks, ourl):
                    n += b.num_rows
            return n

        direct_s, n_direct = timed(direct, 1)
        assert n_direct == rows, (n_direct, rows)

        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        root = str(Path(__file__).resolve().parents[1])
        os.environ["PYTHONPATH"] = os.pathsep.join(
            [root, *[p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]]
        )
        from pyspark.sql import SparkSession

        spark = (
            SparkSession.builder.master(args.master)
            .appName("floe-spark-source-bench")
            .config("spark.ui.enabled", "false")
            .config("spark.driver.memory", "4g")
            .config("spark.ui.showConsoleProgress", "false")
            .config("spark.sql.session.timeZone", "UTC")
            .getOrCreate()
        )
        spark.sparkContext.setLogLevel("ERROR")
        try:
            floe_df = (
                spark.read.format("floe")
                .option("metastore", murl)
                .option("objects", ourl)
                .option("subscribe", TOPIC)
                .load()
            )
            pq_df = spark.read.parquet(str(pq_dir))
            floe_s, floe_r = timed(lambda: floe_df.selectExpr(*QUERY).collect()[0], args.repeat)
            pq_s, pq_r = timed(lambda: pq_df.selectExpr(*QUERY).collect()[0], args.repeat)
        finally:
            spark.stop()
        assert floe_r["n"] == pq_r["n"] == rows, (floe_r, pq_r, rows)
        assert floe_r["bytes"] == pq_r["bytes"] == payload

        result = {
            "rows": rows,
            "payload_mb": round(payload / 1e6, 1),
            "segment_mb": round(seg_bytes / 1e6, 1),
            "parquet_mb": round(pq_bytes / 1e6, 1),
            "value_bytes": args.value_bytes,
            "codec": args.codec,
            "master": args.master,
            "floe_source": {
                "seconds": round(floe_s, 2),
                "rows_per_s": round(rows / floe_s),
                "mb_per_s": round(payload / 1e6 / floe_s, 1),
            },
            "spark_read_parquet": {
                "seconds": round(pq_s, 2),
                "rows_per_s": round(rows / pq_s),
                "mb_per_s": round(payload / 1e6 / pq_s, 1),
            },
            "reader_only_one_process": {
                "seconds": round(direct_s, 2),
                "rows_per_s": round(rows / direct_s),
                "mb_per_s": round(payload / 1e6 / direct_s, 1),
            },
        }
        if args.json:
            print(json.dumps(result, indent=2))
        else:
            for name in ("floe_source", "spark_read_parquet", "reader_only_one_process"):
                r = result[name]
                assert isinstance(r, dict)
                print(
                    f"{name:26s} {r['seconds']:7.2f} s  {r['rows_per_s']:>12,} rows/s  "
                    f"{r['mb_per_s']:8.1f} MB/s"
                )
            print(
                f"({rows:,} rows, {payload / 1e6:,.0f} MB payload, values {args.value_bytes} B, "
                f"codec {args.codec}, {args.master}; best of {args.repeat})"
            )
        return 0
    finally:
        if args.dir is None:
            shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
