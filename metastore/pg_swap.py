"""A swap that only moves batches to another object, on Postgres: no partition lock.

Where it sits: :meth:`metastore.compaction.CompactionMixin.swap_batches` hands a
swap here on a :class:`metastore.postgres.PostgresMetastore` when every
replacement is its expected row with only the object and byte range changed
(:func:`metastore.sqlite_swap.is_move`: the journal's consolidation,
:mod:`agent.produce.consolidate`, and any merge that copies batches verbatim)
and no row is a run row. Everything else takes the general path. SQLite has
its own (:mod:`metastore.sqlite_swap`).

Why: the general path locks the partition row of every partition it touches
(``FOR UPDATE``) and then runs some twenty statements through SQLAlchemy; a
commit locks the same rows to advance their watermarks, so while a
consolidation swap ran (77 ms on average, 2 workers, Java defaults at 5 MB/s
with the journal) the commits on the journal's critical path waited for it. A
move changes no offset and no byte count, so it needs no partition row: each
batch row is compared and swapped under its own row lock (one ``UPDATE`` over
arrays, the old object and bytes must still match), the new object's row is
inserted, and the old objects are retired once nothing names them, in one
transaction on one pooled connection. A row that retention, DeleteRecords or
another swap removed or changed meanwhile fails the count, and the whole swap
rolls back: a conflict, as on the general path.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from metastore.sqlite_swap import Conflict, NotAMove
from metastore.types import NewObject, StoredBatch, SwapResult

_IN_RUN = "SELECT 1 FROM objects WHERE id = ANY($1::bigint[]) AND run_head IS NOT NULL LIMIT 1"
_INSERT = (
    "INSERT INTO objects (key, agent_id, size, state, created_at, deleting_since, level, format)"
    " VALUES ($1, $2, $3, 'live', $4, NULL, $5, $6) RETURNING id"
)
_LIVE = "SELECT key, id FROM objects WHERE key = ANY($1::text[]) AND state = 'live'"
_MOVE = """
UPDATE batches b
   SET object_id = m.new_id, byte_pos = m.new_pos, byte_len = m.new_len
  FROM unnest($1::uuid[], $2::int[], $3::bigint[], $4::bigint[], $5::bigint[], $6::bigint[],
              $7::bigint[], $8::bigint[], $9::bigint[], $10::bigint[])
       AS m(topic_id, partition, last_offset, old_id, base_offset, old_pos, old_len,
            new_id, new_pos, new_len)
 WHERE b.topic_id = m.topic_id AND b.partition = m.partition AND b.last_offset = m.last_offset
   AND b.object_id = m.old_id AND b.base_offset = m.base_offset AND b.byte_pos = m.old_pos
   AND b.byte_len = m.old_len AND b.entries IS NULL
"""
_RETIRE = """
UPDATE objects SET state = 'deleting', deleting_since = $1
 WHERE id = ANY($2::bigint[]) AND state = 'live' AND run_head IS NULL
   AND NOT EXISTS (SELECT 1 FROM batches b WHERE b.object_id = objects.id)
RETURNING key, id
"""
_PARQUET = "DELETE FROM parquet_files WHERE object_id = ANY($1::bigint[])"


async def pg_move(
    con: Any,
    expected: Sequence[StoredBatch],
    replacements: Sequence[StoredBatch],
    new_objects: Sequence[NewObject],
    agent_id: str,
    now: int,
) -> SwapResult:
    """Move the rows on ``con`` (an asyncpg connection, in the caller's transaction,
    which rolls back on :class:`Conflict` or :class:`NotAMove`)."""
    olds = sorted({b.object_id for b in expected})
    if await con.fetchval(_IN_RUN, olds) is not None:
        raise NotAMove
    ids: dict[str, int] = {}
    for o in new_objects:
        ids[o.key] = int(await con.fetchval(_INSERT, o.key, agent_id, o.size, now, o.level, o.format))
    earlier = sorted({r.object_key for r in replacements} - ids.keys())
    if earlier:
        ids.update((r["key"], int(r["id"])) for r in await con.fetch(_LIVE, earlier))
        missing = set(earlier) - ids.keys()
        if missing:
            raise Conflict(f"object {sorted(missing)[0]} is not live")
    old = {(b.topic_id, b.partition, b.last_offset): b for b in expected}
    # In key order: two swaps over the same rows lock them in the same order.
    ordered = sorted(replacements, key=lambda r: (r.topic_id.int, r.partition, r.last_offset))
    olds_of = [old[(r.topic_id, r.partition, r.last_offset)] for r in ordered]
    status = await con.execute(
        _MOVE,
        [r.topic_id for r in ordered], [r.partition for r in ordered], [r.last_offset for r in ordered],
        [e.object_id for e in olds_of], [e.base_offset for e in olds_of], [e.byte_pos for e in olds_of],
        [e.byte_len for e in olds_of], [ids[r.object_key] for r in ordered],
        [r.byte_pos for r in ordered], [r.byte_len for r in ordered],
    )  # fmt: skip
    moved = int(status.split()[-1])
    if moved != len(ordered):
        raise Conflict(f"{len(ordered) - moved} of {len(ordered)} batches changed or are gone")
    retired = await con.fetch(_RETIRE, now, olds)
    if retired:
        await con.execute(_PARQUET, [int(r["id"]) for r in retired])
    return SwapResult(True, None, sorted(r["key"] for r in retired))
