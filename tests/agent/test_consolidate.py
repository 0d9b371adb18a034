"""The journal's consolidation (agent.produce.consolidate) on SQLite and Postgres.

Many journal objects are rewritten into one standard object whose rows are moved in
several short swaps (a few journal objects each, so commits are never held up behind
one long swap): every record reads the same before and after, every row names the new
object, and a swap that names an object no longer live changes nothing.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from agent.clock import SystemClock
from agent.metrics import METRICS
from agent.produce import consolidate
from agent.produce.consolidate import Consolidator
from metastore import Metastore, open_metastore
from metastore.types import NewObject
from objectstore import open_object_store
from objectstore.base import ObjectStore
from tests.compactor.helpers import commit_segment, make_batch, read_partition

pytestmark = pytest.mark.asyncio


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
async def meta(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Metastore]:
    url = (
        f"sqlite:///{tmp_path / 'meta.db'}"
        if request.param == "sqlite"
        else request.getfixturevalue("postgres_url")
    )
    ms = await open_metastore(url)
    try:
        yield ms
    finally:
        await ms.close()


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[ObjectStore]:
    (tmp_path / "objects").mkdir()
    s = open_object_store(f"file://{tmp_path / 'objects'}")
    async with s:
        yield s


async def _journal_objects(
    meta: Metastore, store: ObjectStore, n: int
) -> tuple[uuid.UUID, list[tuple[str, bytes]]]:
    res = await meta.create_topic(f"j{uuid.uuid4().hex[:6]}", 3)
    assert res.topic is not None
    tid = res.topic.id
    items = []
    for i in range(n):
        key = f"journal/agent-a/{i:06d}"
        batches = [
            (tid, p, make_batch([(b"k", f"v{i}-{p}".encode())], 1_000 + i)) for p in range(3)
        ]
        await commit_segment(meta, store, key, batches)
        items.append((key, await store.get(key)))
    return tid, items


def _swaps() -> float:
    return sum(
        s.value
        for m in METRICS.consolidation_swap_seconds.collect()
        for s in m.samples
        if s.name.endswith("_count")
    )


async def test_many_journal_objects_move_in_short_swaps_without_changing_a_record(
    meta: Metastore, store: ObjectStore
) -> None:
    n = 2 * consolidate._SWAP_OBJECTS + 3  # three swaps
    tid, items = await _journal_objects(meta, store, n)
    before = [r for p in range(3) for r in await read_partition(meta, store, tid, p)]
    c = Consolidator(
        store, meta, agent_id="agent-a", interval_ms=10, max_bytes=1 << 30, clock=SystemClock()
    )
    swaps0 = _swaps()
    key = await c.consolidate(items)
    assert key is not None and key.startswith("segments/")
    assert _swaps() - swaps0 == 3
    rows = await meta.batches_in_object_keys([k for k, _ in items] + [key])
    assert {r.object_key for r in rows} == {key} and len(rows) == 3 * n
    after = [r for p in range(3) for r in await read_partition(meta, store, tid, p)]
    assert after == before and len(after) == 3 * n


async def test_a_swap_naming_an_object_no_longer_live_changes_nothing(
    meta: Metastore, store: ObjectStore
) -> None:
    _, items = await _journal_objects(meta, store, 2)
    rows = await meta.batches_in_object_keys([items[0][0]])
    moved = [dataclasses.replace(r, object_key="segments/x") for r in rows]
    first = await meta.swap_batches(rows, moved, [NewObject("segments/x", 100, 0)])
    assert first.ok and items[0][0] in first.objects_deleting
    # an earlier swap's object is named again: allowed while it is live
    rows2 = await meta.batches_in_object_keys([items[1][0]])
    ok = await meta.swap_batches(
        rows2, [dataclasses.replace(r, object_key="segments/x") for r in rows2], []
    )
    assert ok.ok
    # a key that was never registered (or is being deleted) is a conflict: nothing moves
    back = await meta.batches_in_object_keys(["segments/x"])
    bad = await meta.swap_batches(
        back, [dataclasses.replace(r, object_key="segments/nope") for r in back], []
    )
    assert not bad.ok and "not live" in (bad.message or "")
    assert {r.object_key for r in await meta.batches_in_object_keys(["segments/x"])} == {
        "segments/x"
    }


async def test_a_swap_whose_rows_changed_moves_none_of_them(
    meta: Metastore, store: ObjectStore
) -> None:
    _, items = await _journal_objects(meta, store, 3)
    keys = [k for k, _ in items]
    rows = await meta.batches_in_object_keys(keys)
    # the compactor (say) moved the second object's rows meanwhile
    second = [r for r in rows if r.object_key == keys[1]]
    moved = await meta.swap_batches(
        second,
        [dataclasses.replace(r, object_key="segments/m") for r in second],
        [NewObject("segments/m", 1, 1)],
    )
    assert moved.ok
    stale = await meta.swap_batches(
        rows,
        [dataclasses.replace(r, object_key="segments/c") for r in rows],
        [NewObject("segments/c", 1, 0)],
    )
    assert not stale.ok
    now = await meta.batches_in_object_keys([*keys, "segments/m", "segments/c"])
    assert sorted(r.object_key for r in now) == sorted(
        [keys[0]] * 3 + ["segments/m"] * 3 + [keys[2]] * 3
    )
