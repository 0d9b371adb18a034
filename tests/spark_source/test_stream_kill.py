"""Streaming exactly-once under a driver kill -9 (the whole driver: Python and JVM),
with read leases: the killed query's micro-batch lease stops being renewed and expires,
its objects are then collected, and the restarted query replays the batch onto the
compacted objects: the sink holds every record exactly once."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from compactor.config import CompactorConfig
from compactor.runner import Compactor
from metastore import open_metastore
from objectstore import open_object_store
from tests.spark_source.helpers import Seeded, seed, with_meta
from tests.spark_source.test_spark import sink_rows

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]


def driver(s: Seeded, out: Path, ckpt: Path, gate: Path | None = None) -> subprocess.Popen[bytes]:
    args = [sys.executable, "-m", "tests.spark_source.stream_job", s.metastore, s.objects]
    args += [str(out), str(ckpt)] + ([str(gate)] if gate else [])
    env = dict(os.environ, PYTHONPATH=str(ROOT), PYSPARK_PYTHON=sys.executable)
    return subprocess.Popen(args, env=env, cwd=str(ROOT), start_new_session=True)


async def _gc(s: Seeded, now_ms: int) -> Any:
    meta = await open_metastore(s.metastore, now_ms=lambda: now_ms)
    store = open_object_store(s.objects)
    cfg = CompactorConfig(l0_trigger=1, delete_grace_ms=0, orphan_grace_ms=0)
    try:
        return await Compactor(meta, store, cfg, now_ms=lambda: now_ms).run_pass(force=True)
    finally:
        await store.close()
        await meta.close()


def seg_files(base: Path) -> set[str]:
    return {p.name for p in (base / "objects").rglob("seg-*.obj")}


def test_driver_kill_9_exactly_once_and_lease_expiry(spark: Any, tmp_path: Path) -> None:
    s = seed(tmp_path / "d", segments=10)  # t: 2 partitions x 50 records
    out, ckpt, gate = tmp_path / "out", tmp_path / "ckpt", tmp_path / "gate"
    gate.touch()
    proc = driver(s, out, ckpt, gate)
    try:
        deadline = time.monotonic() + 240
        blocked = Path(str(gate) + ".blocked")
        while not blocked.exists():
            assert proc.poll() is None, "the driver ended before reaching the gate"
            assert time.monotonic() < deadline, "the driver never reached the gate"
            time.sleep(0.05)
        leases = with_meta(s.metastore, lambda ms: ms.list_read_leases())
        stream = [x for x in leases if x.lease_id.startswith("spark-stream-")]
        assert stream and stream[0].objects > 0
        os.killpg(proc.pid, signal.SIGKILL)  # the whole driver: Python, JVM, workers
        proc.wait(30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(30)
    gate.unlink()
    # The dead driver renews nothing: before its lease's deadline the compactor keeps
    # the batch's objects, after it they are collected. The deadline is read after the
    # kill: a renewal between the first listing and the kill moves it later.
    leases = with_meta(s.metastore, lambda ms: ms.list_read_leases())
    expires = max(x.expires_at_ms for x in leases)
    with_meta(s.metastore, lambda ms: ms.get_topic("t"))
    before = seg_files(tmp_path / "d")
    now = time.time_ns() // 1_000_000
    assert now < expires, "lease expired before the test could look (box overloaded?)"
    summary = asyncio.run(_gc(s, now))
    assert summary.objects_leased > 0
    held = seg_files(tmp_path / "d")
    assert held and held <= before
    summary = asyncio.run(_gc(s, expires + 1))
    assert summary.objects_leased == 0 and seg_files(tmp_path / "d") == set()
    # Restart: the replayed batch reads the compacted objects; exactly once overall.
    proc = driver(s, out, ckpt)
    try:
        assert proc.wait(300) == 0
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    got = sink_rows(spark, out)
    assert got == [r[:5] for r in s.expected()]
