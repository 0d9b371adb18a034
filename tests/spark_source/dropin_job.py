"""One PySpark job, run unchanged against Apache Kafka (``format("kafka")``) and Floe
(``format("floe")``): only the format name differs. Writes what it read as JSON lines.

``python -m tests.spark_source.dropin_job TOPIC OUTDIR CUT FORMAT BOOTSTRAP [FORMAT
BOOTSTRAP ...]`` runs the job once per format, one after the other in one Spark session
(one JVM start instead of one per format); the session gets Spark's Kafka source jars
from ``FLOE_SPARK_JARS`` (a class path).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any


def session() -> Any:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    b = (
        SparkSession.builder.master("local[2]")
        .appName("floe-dropin")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
    )
    jars = os.environ.get("FLOE_SPARK_JARS")
    if jars:
        b = b.config("spark.jars", jars.replace(":", ","))
    s = b.getOrCreate()
    s.sparkContext.setLogLevel("ERROR")
    return s


def rows(df: Any) -> list[dict[str, Any]]:
    out = []
    for r in df.orderBy("topic", "partition", "offset").collect():
        d = r.asDict(recursive=True)
        for k in ("key", "value"):
            d[k] = None if d[k] is None else bytes(d[k]).hex()
        if "headers" in d:
            d["headers"] = [
                [h["key"], None if h["value"] is None else bytes(h["value"]).hex()]
                for h in d["headers"] or []
            ]
        d["timestamp"] = d["timestamp"].isoformat()
        out.append(d)
    return out


def job(spark: Any, fmt: str, bootstrap: str, topic: str, out: Path, ts_cut: int) -> None:
    """The job under test: batch reads (all, ranges, timestamps) and a streaming query."""
    base = {"kafka.bootstrap.servers": bootstrap, "subscribe": topic}
    results: dict[str, Any] = {}
    results["all"] = rows(
        spark.read.format(fmt).options(**base, includeHeaders="true").load()
    )
    ranges = json.dumps({topic: {"0": 5, "1": 0, "2": -2}})
    ends = json.dumps({topic: {"0": 40, "1": 17, "2": -1}})
    results["ranges"] = rows(
        spark.read.format(fmt)
        .options(**base, startingOffsets=ranges, endingOffsets=ends)
        .load()
    )
    results["timestamps"] = rows(
        spark.read.format(fmt)
        .options(**base, startingTimestamp=str(ts_cut), endingTimestamp=str(ts_cut + 2000))
        .load()
    )
    agg = (
        spark.read.format(fmt)
        .options(**base)
        .load()
        .groupBy("partition")
        .count()
        .orderBy("partition")
        .collect()
    )
    results["counts"] = [[r["partition"], r["count"]] for r in agg]
    sink, ckpt = out / f"{fmt}-sink", out / f"{fmt}-ckpt"
    q = (
        spark.readStream.format(fmt)
        .options(**base, startingOffsets="earliest", maxOffsetsPerTrigger="70")
        .load()
        .selectExpr("topic", "partition", "offset", "key", "value", "timestamp", "timestampType")
        .writeStream.format("parquet")
        .option("path", str(sink))
        .option("checkpointLocation", str(ckpt))
        .trigger(availableNow=True)
        .start()
    )
    q.awaitTermination(300)
    if q.exception() is not None:
        raise RuntimeError(str(q.exception()))
    results["stream"] = rows(spark.read.parquet(str(sink)))
    results["stream_batches"] = sum(1 for p in q.recentProgress if p.numInputRows > 0)
    (out / f"{fmt}.json").write_text(json.dumps(results, sort_keys=True))


def main() -> int:
    topic, out, cut, *targets = sys.argv[1:]
    assert targets and len(targets) % 2 == 0, "FORMAT BOOTSTRAP pairs"
    spark = session()
    try:
        for fmt, bootstrap in zip(targets[::2], targets[1::2], strict=True):
            job(spark, fmt, bootstrap, topic, Path(out), int(cut))
    finally:
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
