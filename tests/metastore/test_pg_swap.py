"""A move-only swap on Postgres (metastore.pg_swap): the journal's consolidation
re-points batch rows without locking partition rows, so a commit holding them
(to advance a watermark) never waits behind it, nor it behind the commit; rows
that changed underneath make it a conflict that changes nothing."""

from __future__ import annotations

import asyncio
import dataclasses
import uuid

import asyncpg
import pytest

from metastore import open_metastore
from metastore.engine import asyncpg_dsn
from metastore.types import NewObject
from tests.metastore.helpers import FakeClock, batch

pytestmark = [pytest.mark.postgres]


async def test_move_holds_no_partition_lock_and_conflicts_on_changed_rows(
    postgres_url: str, clock: FakeClock
) -> None:
    ms = await open_metastore(postgres_url, now_ms=clock, auto_migrate=False)
    other = await asyncpg.connect(asyncpg_dsn(postgres_url))
    try:
        created = await ms.create_topic(f"mv{uuid.uuid4().hex[:6]}", 3, {})
        assert created.topic is not None
        t = created.topic.id
        old = f"journal/a/{uuid.uuid4().hex}"
        await ms.commit_object(old, 300, "a", [batch(t, p, 2, pos=100 * p) for p in range(3)])
        info = await ms.get_object(old)
        assert info is not None
        stored = await ms.batches_in_objects([info.id])
        new = NewObject(f"segments/{uuid.uuid4().hex}", 300, 0)
        moved = [dataclasses.replace(b, object_key=new.key, byte_pos=b.byte_pos + 7) for b in stored]
        # Another transaction holds every partition row, as a commit does.
        await other.execute("BEGIN")
        await other.execute("SELECT 1 FROM partitions WHERE topic_id = $1 FOR UPDATE", t)
        swap = await asyncio.wait_for(ms.swap_batches(stored, moved, [new]), 10)
        await other.execute("ROLLBACK")
        assert swap.ok, swap.message
        assert swap.objects_deleting == [old]  # nothing names the journal object now
        for b in moved:
            (loc,) = (await ms.find_batches(t, b.partition, b.base_offset, 1, 1)).batches
            assert (loc.object_key, loc.byte_pos, loc.byte_len) == (new.key, b.byte_pos, b.byte_len)
        # Moving them again from where they were: every row changed, nothing moves.
        again = NewObject(f"segments/{uuid.uuid4().hex}", 300, 0)
        stale = [dataclasses.replace(b, object_key=again.key) for b in stored]
        conflict = await ms.swap_batches(stored, stale, [again])
        assert not conflict.ok and "3 of 3" in (conflict.message or "")
        # One row gone (DeleteRecords, then retention): a move of all three is a conflict.
        now = await ms.batches_in_objects([(await ms.get_object(new.key)).id])  # type: ignore[union-attr]
        assert (await ms.delete_records(t, 0, 2)).error.value == 0
        await ms.enforce_retention(t, 0)
        third = NewObject(f"segments/{uuid.uuid4().hex}", 300, 0)
        partial = await ms.swap_batches(now, [dataclasses.replace(b, object_key=third.key) for b in now], [third])
        assert not partial.ok and "1 of 3" in (partial.message or "")
        for b in moved[1:]:
            (loc,) = (await ms.find_batches(t, b.partition, b.base_offset, 1, 1)).batches
            assert loc.object_key == new.key
    finally:
        await other.close()
        await ms.close()
