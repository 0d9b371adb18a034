"""Parquet merges (issue 41): a day of compactor passes leaves a number of Parquet
objects per partition bounded by size, not by the number of passes; Kafka fetches
return the same records and batches before and after (and after the GC removed
the inputs); an Iceberg table gets one rewrite snapshot with the same rows."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from compactor.config import CompactorConfig
from compactor.parquet_plan import choose_groups
from compactor.runner import Compactor
from kafka_protocol.compression import Compression
from kafka_protocol.records import RecordBatchBuilder, iter_batches
from metastore import Metastore, open_metastore
from metastore.types import CompactionObject, ParquetFileInfo
from objectstore import open_object_store
from objectstore.base import ObjectStore
from tests.compactor.helpers import Rec, commit_segment, fetch_reader, read_partition
from tests.metastore.helpers import FakeClock

if TYPE_CHECKING:
    from compactor.iceberg import IcebergSync

PASS_MS = 300_000  # a pass every 5 minutes
CFG = CompactorConfig(
    l0_trigger=1000, parquet_min_level=0, delete_grace_ms=60_000, orphan_grace_ms=0
)
CODECS = [Compression.NONE, Compression.ZSTD, Compression.SNAPPY, Compression.LZ4]


async def produce(
    meta: Metastore, store: ObjectStore, tid: uuid.UUID, n: int, seq: int, now: int, parts: int = 2
) -> None:
    """``n`` records per partition in one batch each (codec and producer fields vary)."""
    batches = []
    for p in range(parts):
        b = RecordBatchBuilder(
            CODECS[(seq + p) % len(CODECS)], producer_id=7 + p, producer_epoch=1, base_sequence=seq
        )
        for i in range(n):
            b.append(
                f"k{i}".encode(), f"v{seq}-{p}-{i}".encode(), [("h", b"x")], timestamp_ms=now + i
            )
        batches.append((tid, p, b.build()))
    await commit_segment(meta, store, f"agent/{uuid.uuid4().hex}", batches)


async def kafka_view(
    meta: Metastore, store: ObjectStore, tid: uuid.UUID, parts: int = 2
) -> tuple[list[Rec], list[tuple[int, ...]]]:
    """Every record, and every fetched batch's header fields, of the topic."""
    recs: list[Rec] = []
    headers: list[tuple[int, ...]] = []
    reader = fetch_reader(meta, store)
    for p in range(parts):
        recs += await read_partition(meta, store, tid, p)
        res = await reader.find(tid, p, 0, 1 << 24, fresh=True)
        for v in iter_batches(await reader.read(res.batches), validate=True):
            headers.append(
                (
                    p,
                    v.base_offset,
                    v.last_offset,
                    int(v.compression),
                    v.producer_id,
                    v.producer_epoch,
                    v.base_sequence,
                    v.base_timestamp,
                    v.max_timestamp,
                )
            )
    return recs, headers


async def parquet_counts(meta: Metastore, tid: uuid.UUID, parts: int = 2) -> list[int]:
    return [len(await meta.list_parquet_files(tid, p)) for p in range(parts)]


async def test_passes_leave_objects_bounded_by_size(
    meta: Metastore, store: ObjectStore, clock: FakeClock
) -> None:
    res = await meta.create_topic("day", 1, {"floe.parquet.enable": "true"})
    assert res.topic is not None
    tid = res.topic.id
    cfg = CFG.model_copy(update={"parquet_merge_factor": 4})
    c = Compactor(meta, store, cfg, now_ms=clock)
    merged = 0
    counts = []
    for seq in range(30):  # two and a half hours of 5-minute passes
        await produce(meta, store, tid, 3, seq, clock(), parts=1)
        s = await c.run_pass(orphans=False)
        merged += s.phases["parquet merge"].committed
        counts += await parquet_counts(meta, tid, 1)
        clock.advance(PASS_MS)
    # 30 passes wrote 30 Parquet objects; tiers of 4 keep at most 3 per tier (4 tiers
    # below the small limit) at any time, whatever the number of passes.
    assert max(counts) <= 12 and counts[-1] <= 6, counts
    assert merged >= 8
    recs, headers = await kafka_view(meta, store, tid, 1)
    assert [(r.offset, r.key, r.value, r.timestamp, r.headers) for r in recs] == [
        (
            3 * seq + i,
            f"k{i}".encode(),
            f"v{seq}-0-{i}".encode(),
            clock.now - (30 - seq) * PASS_MS + i,
            (("h", b"x"),),
        )
        for seq in range(30)
        for i in range(3)
    ]
    assert len(headers) == 30 and {h[3] for h in headers} == {int(c) for c in CODECS}
    assert [h[6] for h in headers] == list(range(30))  # producer sequences kept
    # The partition goes quiet: a pass an hour later merges what is left into one.
    clock.advance(cfg.parquet_merge_quiet_ms)
    await c.run_pass(orphans=False)
    assert await parquet_counts(meta, tid, 1) == [1]
    assert await kafka_view(meta, store, tid, 1) == (recs, headers)


@pytest.mark.parametrize("factor", [2])
async def test_merge_keeps_records_and_batches(
    any_metastore_url: str, objects_url: str, clock: FakeClock, factor: int
) -> None:
    meta = await open_metastore(
        any_metastore_url, now_ms=clock, auto_migrate=any_metastore_url.startswith("sqlite")
    )
    store = open_object_store(objects_url)
    try:
        res = await meta.create_topic(
            f"keep-{uuid.uuid4().hex[:6]}", 2, {"floe.parquet.enable": "true"}
        )
        assert res.topic is not None
        tid = res.topic.id
        off = CFG.model_copy(update={"parquet_merge_enable": False})
        for seq in range(6):
            await produce(meta, store, tid, 5, seq, clock())
            await Compactor(meta, store, off, now_ms=clock).run_pass()
            clock.advance(PASS_MS)
        assert await parquet_counts(meta, tid) == [6, 6]
        before = await kafka_view(meta, store, tid)
        inputs = {f.object_key for p in range(2) for f in await meta.list_parquet_files(tid, p)}
        on = CFG.model_copy(update={"parquet_merge_factor": factor, "parquet_merge_quiet_ms": 0})
        c = Compactor(meta, store, on, now_ms=clock)
        s = await c.run_pass()
        assert s.phases["parquet merge"].committed == 2, s.lines()
        assert await parquet_counts(meta, tid) == [1, 1]
        assert await kafka_view(meta, store, tid) == before
        # Inputs stay readable through the grace period, then the GC deletes them.
        left = {o.key async for o in store.list("parquet/")}
        assert inputs < left
        clock.advance(on.delete_grace_ms + 1)
        await c.run_pass()
        left = {o.key async for o in store.list("parquet/")}
        assert not inputs & left and len(left) == 2
        assert await kafka_view(meta, store, tid) == before
        # More data lands after the merged objects and is read back with them.
        await produce(meta, store, tid, 5, 6, clock())
        await c.run_pass()
        recs, _ = await kafka_view(meta, store, tid)
        assert recs[: len(before[0]) // 2] == before[0][: len(before[0]) // 2]
        assert len(recs) == len(before[0]) + 10
    finally:
        await store.close()
        await meta.close()


def _file(key: str, lo: int, hi: int, ts: int = 0) -> ParquetFileInfo:
    return ParquetFileInfo(key, uuid.UUID(int=1), 0, lo, hi, hi - lo + 1, ts, ts)


def test_groups_are_adjacent_tiered_and_aged() -> None:
    cfg = CompactorConfig(
        parquet_merge_factor=2,
        parquet_merge_small_bytes=8 << 20,
        parquet_merge_min_age_ms=100,
        parquet_merge_quiet_ms=10_000,
    )
    now = 1_000
    sizes = {"a": 100, "b": 100, "c": 100, "big": 9 << 20, "d": 100, "e": 100, "young": 100}
    ages = {"young": 50}
    objs = {
        k: CompactionObject(i, k, s, 2, "parquet", now - ages.get(k, 500))
        for i, (k, s) in enumerate(sizes.items())
    }
    files = [_file(k, 10 * i, 10 * i + 9) for i, k in enumerate(sizes)]
    # a+b (c waits for a partner of its tier), the large object cuts the run, d+e,
    # the young object is left alone.
    assert choose_groups(files, objs, cfg, now) == [["a", "b"], ["d", "e"]]
    # Overlapping offset ranges (day-split files of an Iceberg topic) are not adjacent.
    overlapping = [_file("a", 0, 9), _file("b", 5, 20)]
    assert choose_groups(overlapping, objs, cfg, now) == []
    # Iceberg topics: one day per merged file.
    day = 86_400_000
    by_day = [_file("a", 0, 9, 0), _file("b", 10, 19, day), _file("c", 20, 29, day)]
    assert choose_groups(by_day, objs, cfg, now, by_day=True) == [["b", "c"]]
    # A quiet partition (newest object older than quiet_ms) merges whole runs.
    quiet = {k: CompactionObject(o.id, k, o.size, 2, "parquet", -20_000) for k, o in objs.items()}
    assert choose_groups(files, quiet, cfg, now) == [["a", "b", "c"], ["d", "e", "young"]]


async def iceberg_files_in_passes(
    meta: Metastore, store: ObjectStore, tmp_path: Path, clock: FakeClock, name: str, parts: int
) -> tuple[uuid.UUID, IcebergSync]:
    """An Iceberg-enabled topic after 4 unmerged compactor passes of 5 records per
    partition each: 4 Parquet files per partition in the table."""
    from tests.compactor.test_iceberg import iceberg_for

    res = await meta.create_topic(name, parts, {"floe.iceberg.enable": "true"})
    assert res.topic is not None
    tid = res.topic.id
    sync = iceberg_for(meta, tmp_path)
    off = CFG.model_copy(update={"parquet_merge_enable": False})
    for seq in range(4):
        await produce(meta, store, tid, 5, seq, clock(), parts=parts)
        await Compactor(meta, store, off, now_ms=clock, iceberg=sync).run_pass()
        clock.advance(PASS_MS)
    return tid, sync


async def test_iceberg_rewrite_snapshot(
    meta: Metastore, store: ObjectStore, tmp_path: Path, clock: FakeClock
) -> None:
    pytest.importorskip("pyiceberg")
    from tests.compactor.test_iceberg import table_rows

    tid, sync = await iceberg_files_in_passes(meta, store, tmp_path, clock, "ice", 2)
    table = sync.catalog.load_table(sync.identifier("ice"))
    assert len(table.inspect.files()) == 8
    rows = table_rows(sync, "ice")
    before = await kafka_view(meta, store, tid)
    on = CFG.model_copy(update={"parquet_merge_factor": 4})
    c = Compactor(meta, store, on, now_ms=clock, iceberg=sync)
    await c.run_pass()
    assert sync.summary.errors == []
    table = sync.catalog.load_table(sync.identifier("ice"))
    assert len(table.inspect.files()) == 2
    summary = table.current_snapshot().summary
    assert summary.operation.value == "replace"
    assert (summary["deleted-data-files"], summary["added-data-files"]) == ("8", "2")
    assert summary["total-records"] == "40" and summary["deleted-records"] == "40"
    assert table_rows(sync, "ice") == rows and len(rows) == 40
    assert await kafka_view(meta, store, tid) == before
    # The GC expires the snapshots naming the inputs, then deletes them.
    clock.advance(on.delete_grace_ms + 1)
    await c.run_pass()
    assert sync.summary.errors == []
    assert table_rows(sync, "ice") == rows
    assert len({o.key async for o in store.list("parquet/")}) == 2


async def test_iceberg_crash_between_snapshot_and_swap(
    meta: Metastore, store: ObjectStore, tmp_path: Path, clock: FakeClock
) -> None:
    pytest.importorskip("pyiceberg")
    from tests.compactor.test_iceberg import Crash, crash_at, table_rows

    tid, sync = await iceberg_files_in_passes(meta, store, tmp_path, clock, "icecrash", 1)
    rows = table_rows(sync, "icecrash")
    before = await kafka_view(meta, store, tid, 1)
    on = CFG.model_copy(update={"parquet_merge_factor": 4})
    crashing = Compactor(
        meta, store, on, now_ms=clock, iceberg=sync, fail_point=crash_at("after_snapshot")
    )
    with pytest.raises(Crash):
        await crashing.run_pass()
    # The snapshot names the merged file, the metastore still the inputs: the log is
    # untouched, and the next pass puts the table back before merging again.
    assert await parquet_counts(meta, tid, 1) == [4]
    assert await kafka_view(meta, store, tid, 1) == before
    c = Compactor(meta, store, on, now_ms=clock, iceberg=sync)
    await c.run_pass()
    assert sync.summary.errors == []
    assert await parquet_counts(meta, tid, 1) == [1]
    table = sync.catalog.load_table(sync.identifier("icecrash"))
    assert len(table.inspect.files()) == 1
    assert table_rows(sync, "icecrash") == rows
    assert await kafka_view(meta, store, tid, 1) == before
    # The crashed attempt's object is an orphan; inputs go after the grace period.
    clock.advance(on.delete_grace_ms + 1)
    await c.run_pass()
    assert len({o.key async for o in store.list("parquet/")}) == 1
    assert table_rows(sync, "icecrash") == rows
