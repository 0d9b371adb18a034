"""Read leases against the compactor, in the shared Spark session: a job planned
before a forced compaction with grace 0 completes exactly (its queued tasks read
objects the GC would otherwise have deleted), and once its lease expires the
objects are collected."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from compactor.config import CompactorConfig
from compactor.runner import Compactor
from metastore import open_metastore
from objectstore import open_object_store
from tests.spark_source.helpers import Seeded, seed
from tests.spark_source.test_spark import rows

pytestmark = pytest.mark.slow


def segment_files(base: Path) -> set[str]:
    return {p.name for p in (base / "objects").rglob("seg-*.obj")}


async def _compact(s: Seeded, now_ms: Any = None) -> Any:
    meta = await open_metastore(s.metastore, now_ms=now_ms)
    store = open_object_store(s.objects)
    cfg = CompactorConfig(l0_trigger=1, delete_grace_ms=0, orphan_grace_ms=0)
    try:
        return await Compactor(meta, store, cfg, now_ms=now_ms).run_pass(force=True)
    finally:
        await store.close()
        await meta.close()


def test_planned_job_survives_forced_compaction_then_lease_expires(
    spark: Any, tmp_path: Path
) -> None:
    from pyspark.sql import functions as F
    from pyspark.sql.types import BinaryType

    s = seed(tmp_path, segments=12)
    started, go = tmp_path / "started", tmp_path / "go"
    started_s, go_s = str(started), str(go)

    def gate(value: bytes | None) -> bytes | None:
        import os
        import time

        if not os.path.exists(go_s):
            with open(started_s, "a"):
                pass
            deadline = time.monotonic() + 120
            while not os.path.exists(go_s) and time.monotonic() < deadline:
                time.sleep(0.02)
        return value

    df = (
        spark.read.format("floe")
        .option("metastore", s.metastore)
        .option("objects", s.objects)
        .option("subscribe", "t")
        .option("includeHeaders", "true")
        .option("minPartitions", "12")
        .load()
    )
    gated = df.withColumn("value", F.udf(gate, BinaryType())("value"))
    out: dict[str, Any] = {}

    def run() -> None:
        try:
            out["rows"] = rows(gated)
        except Exception as e:  # reported below
            out["error"] = e

    job = threading.Thread(target=run)
    job.start()
    try:
        deadline = time.monotonic() + 120
        while not started.exists():  # planned, the first tasks are running, the rest queued
            assert time.monotonic() < deadline and job.is_alive(), out
            time.sleep(0.02)
        before = segment_files(tmp_path)
        summary = asyncio.run(_compact(s))
        assert summary.phases["merge L0->L1"].committed > 0
        assert summary.objects_leased == len(before)  # (an intermediate L1 object went)
        assert segment_files(tmp_path) == before  # held by the job's read lease
    finally:
        go.touch()
        job.join(180)
    assert "error" not in out, out.get("error")
    assert out["rows"] == s.expected("t")
    # The batch lease is not released by anyone: it expires (leaseTimeout, 60 min).
    summary = asyncio.run(_compact(s))
    assert summary.objects_deleted == 0 and segment_files(tmp_path) == before
    later = time.time_ns() // 1_000_000 + 61 * 60 * 1000
    summary = asyncio.run(_compact(s, now_ms=lambda: later))
    assert summary.objects_deleted == len(before) and summary.objects_leased == 0
    assert segment_files(tmp_path) == set()
