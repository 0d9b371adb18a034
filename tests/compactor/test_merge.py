"""Merges (L0->L1->L2), the compare-and-swap, crash points and the grace period,
on a metastore + file store seeded directly (no agent)."""

from __future__ import annotations

import uuid

import pytest

from compactor.config import CompactorConfig
from compactor.execute import execute_task
from compactor.gc import collect_orphans
from compactor.planner import plan_merges
from compactor.runner import Compactor
from kafka_protocol.compression import Compression
from metastore import Metastore, open_metastore
from objectstore import open_object_store
from objectstore.base import ObjectStore
from tests.compactor.helpers import commit_segment, make_batch, read_partition
from tests.metastore.helpers import FakeClock

NOW = 1_700_000_000_000
CFG = CompactorConfig(
    l0_trigger=4, l1_trigger=2, max_inputs=5, delete_grace_ms=60_000, orphan_grace_ms=0
)


async def seed(
    meta: Metastore, store: ObjectStore, name: str = "t", partitions: int = 3, objects: int = 10
) -> uuid.UUID:
    res = await meta.create_topic(name, partitions)
    assert res.topic is not None
    tid = res.topic.id
    codecs = [
        Compression.NONE,
        Compression.GZIP,
        Compression.SNAPPY,
        Compression.LZ4,
        Compression.ZSTD,
    ]
    for i in range(objects):
        batches = []
        for p in range(partitions):
            recs = [(f"k{j}".encode(), f"{name}-{i}-{p}-{j}".encode()) for j in range(3)]
            batches.append((tid, p, make_batch(recs, NOW + i, codecs[(i + p) % len(codecs)])))
        await commit_segment(meta, store, f"agent/{name}-{i:04d}", batches)
    return tid


async def snapshot(
    meta: Metastore, store: ObjectStore, tid: uuid.UUID, partitions: int = 3
) -> list:
    out = []
    for p in range(partitions):
        out.extend(await read_partition(meta, store, tid, p))
    return out


async def keys_in_store(store: ObjectStore) -> set[str]:
    return {o.key async for o in store.list("")}


async def test_merge_l0_l1_l2_keeps_offsets_and_bytes(
    meta: Metastore, store: ObjectStore, clock: FakeClock
) -> None:
    tid = await seed(meta, store)
    before = await snapshot(meta, store, tid)
    assert len(before) == 3 * 10 * 3
    c = Compactor(meta, store, CFG, now_ms=clock)
    s = await c.run_pass()
    ph = s.phases["merge L0->L1"]
    assert (ph.tasks, ph.committed, ph.conflicts) == (2, 2, 0)
    assert await meta.list_compaction_objects(0) == []
    # L1 has 2 objects >= l1_trigger: merged into one L2 object in the same pass.
    assert len(await meta.list_compaction_objects(1)) == 0
    assert len(await meta.list_compaction_objects(2)) == 1
    assert await snapshot(meta, store, tid) == before
    # Replaced objects stay in storage during the grace period...
    assert len(await keys_in_store(store)) == 10 + 2 + 1
    await c.run_pass()
    assert len(await keys_in_store(store)) == 10 + 2 + 1
    clock.advance(CFG.delete_grace_ms + 1)
    s = await c.run_pass()
    assert s.objects_deleted == 12
    (l2,) = await meta.list_compaction_objects(2)
    assert await keys_in_store(store) == {l2.key}
    assert await snapshot(meta, store, tid) == before


async def test_crash_after_put_leaves_orphans_only(
    meta: Metastore, store: ObjectStore, clock: FakeClock
) -> None:
    tid = await seed(meta, store)
    before = await snapshot(meta, store, tid)

    def crash(point: str) -> None:
        if point == "after_put":
            raise RuntimeError("killed after PUT")

    with pytest.raises(RuntimeError):
        await Compactor(meta, store, CFG, now_ms=clock, fail_point=crash).run_pass()
    assert await snapshot(meta, store, tid) == before
    stored = await keys_in_store(store)
    assert len(stored) == 12  # 10 inputs + 2 unswapped outputs
    dry = await collect_orphans(meta, store, 0, dry_run=True)
    assert len(dry) == 2 and all(o.key.startswith("compacted/L1/") for o in dry)
    assert await keys_in_store(store) == stored
    gone = await collect_orphans(meta, store, 0)
    assert {o.key for o in gone} == {o.key for o in dry}
    assert len(await keys_in_store(store)) == 10
    # A later pass compacts normally.
    await Compactor(meta, store, CFG, now_ms=clock).run_pass()
    assert await snapshot(meta, store, tid) == before


async def test_crash_after_swap_deletes_inputs_after_grace(
    meta: Metastore, store: ObjectStore, clock: FakeClock
) -> None:
    tid = await seed(meta, store)
    before = await snapshot(meta, store, tid)

    def crash(point: str) -> None:
        if point == "after_swap":
            raise RuntimeError("killed after swap")

    with pytest.raises(RuntimeError):
        await Compactor(meta, store, CFG, now_ms=clock, fail_point=crash).run_pass()
    assert await snapshot(meta, store, tid) == before
    assert len(await meta.list_compaction_objects(1)) == 2
    assert len(await meta.objects_to_delete(clock() + 1)) == 10
    clock.advance(CFG.delete_grace_ms + 1)
    await Compactor(meta, store, CFG, now_ms=clock).run_pass()
    assert await snapshot(meta, store, tid) == before
    assert len(await keys_in_store(store)) == 3  # 2 L1 (retired during grace) + 1 L2


@pytest.mark.parametrize("change", ["delete_records", "new_commit_then_retention", "topic_deleted"])
async def test_swap_conflict_loses_nothing(
    any_metastore_url: str, objects_url: str, clock: FakeClock, change: str
) -> None:
    meta = await open_metastore(
        any_metastore_url, now_ms=clock, auto_migrate=any_metastore_url.startswith("sqlite")
    )
    store = open_object_store(objects_url)
    try:
        tid = await seed(meta, store, objects=4)
        cfg = CFG.model_copy(update={"max_inputs": 4})
        (task,) = await plan_merges(
            meta, 0, cfg, {t.id: t for t in await meta.list_topics()}, clock()
        )
        result = await execute_task(task, store)
        # A concurrent change between plan and swap:
        if change == "topic_deleted":
            await meta.delete_topic(tid)
        else:
            res = await meta.delete_records(tid, 1, 3)
            assert res.low_watermark == 3
            if change == "new_commit_then_retention":
                await commit_segment(
                    meta, store, "agent/late", [(tid, 0, make_batch([(b"x", b"y")], NOW))]
                )
            r = await meta.enforce_retention(tid, 1)
            assert r.removed_batches == 1
        expected_after = None if change == "topic_deleted" else await snapshot(meta, store, tid)
        swap = await meta.swap_batches(task.rows, result.replacements, result.new_objects)
        assert not swap.ok and swap.message
        # Nothing changed; the unswapped output is registered for deletion.
        if expected_after is not None:
            assert await snapshot(meta, store, tid) == expected_after
        assert await meta.list_compaction_objects(1) == []
        (dead,) = result.new_objects
        info = await meta.get_object(dead.key)
        assert info is not None and info.state == "deleting"
        # The re-planned job succeeds and still loses nothing.
        s = await Compactor(meta, store, cfg, now_ms=clock).run_pass(orphans=False)
        if expected_after is not None:
            assert s.phases["merge L0->L1"].committed == 1
            assert await snapshot(meta, store, tid) == expected_after
    finally:
        await store.close()
        await meta.close()
