"""Issue 17 crash tests with a real kill: the compactor process gets SIGKILL between
writing Parquet and committing the Iceberg snapshot, and between committing the
snapshot and swapping the batch rows (``tests.compactor.iceberg_kill_job``). The Kafka
view is unchanged after the kill; the next pass (another process, as after a
restart) leaves the table and the Kafka view equal, nothing lost or duplicated, and
the table names only the live Parquet files. ``test_iceberg.py`` covers the same
points with an exception raised in-process."""

from __future__ import annotations

import asyncio
import signal
import sys
from pathlib import Path

import pytest

from compactor.runner import Compactor
from metastore import Metastore
from objectstore.base import ObjectStore
from objectstore.local import key_path
from objectstore.parquet import PARQUET_SUFFIX
from tests.compactor.test_iceberg import (
    CFG,
    exists,
    iceberg_for,
    kafka_rows,
    make_topic,
    produce_json,
    table_rows,
)
from tests.metastore.helpers import FakeClock

pytest.importorskip("pyiceberg")
pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]


async def parquet_objects(store: ObjectStore) -> set[str]:
    """Keys of the Parquet objects in the store (the Iceberg warehouse's own files aside)."""
    return {o.key async for o in store.list("") if o.key.endswith(PARQUET_SUFFIX)}


@pytest.mark.parametrize("point", ["after_put", "after_snapshot"])
async def test_compactor_killed_between_put_snapshot_and_swap(
    meta: Metastore, store: ObjectStore, tmp_path: Path, clock: FakeClock, point: str
) -> None:
    tid = await make_topic(meta, "kill")
    await produce_json(meta, store, tid, 30)
    before = await kafka_rows(meta, store, tid)
    assert len(before) == 60
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "tests.compactor.iceberg_kill_job",
        str(tmp_path),
        point,
        str(clock()),
        cwd=ROOT,
    )
    assert await asyncio.wait_for(proc.wait(), 180) == -signal.SIGKILL
    assert await parquet_objects(store)  # killed after the Parquet PUTs
    assert await kafka_rows(meta, store, tid) == before  # Kafka still reads the segments
    sync = iceberg_for(meta, tmp_path)
    if point == "after_snapshot":
        assert table_rows(sync, "kill") == before  # the table has them already
    else:
        assert (
            not sync.catalog.table_exists(sync.identifier("kill")) or table_rows(sync, "kill") == []
        )

    await Compactor(meta, store, CFG, now_ms=clock, iceberg=sync).run_pass()
    assert await kafka_rows(meta, store, tid) == before
    assert table_rows(sync, "kill") == before
    live = {
        str(key_path(tmp_path / "objects", f.object_key))
        for p in range(2)
        for f in await meta.list_parquet_files(tid, p)
    }
    t = sync.catalog.load_table(sync.identifier("kill"))
    assert {f["file_path"] for f in t.inspect.files().to_pylist()} == live
    # After the grace period the abandoned files go, and no snapshot names a missing file.
    clock.advance(CFG.delete_grace_ms + 1)
    await Compactor(meta, store, CFG, now_ms=clock, iceberg=sync).run_pass()
    t = sync.catalog.load_table(sync.identifier("kill"))
    for snap in t.snapshots():
        for task in t.scan(snapshot_id=snap.snapshot_id).plan_files():
            assert exists(task.file.file_path)
    assert table_rows(sync, "kill") == before
    assert await kafka_rows(meta, store, tid) == before
    assert {str(key_path(tmp_path / "objects", k)) for k in await parquet_objects(store)} == live
