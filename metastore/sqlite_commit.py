"""The SQLite group commit: one call on aiosqlite's writer thread, a few sqlite3 steps.

Where it sits: :meth:`metastore.log.LogMixin.commit_objects` runs
:func:`sqlite_commit` on a SQLite metastore (``floe dev``, a single-node agent)
inside its ``BEGIN IMMEDIATE`` transaction; Postgres sequences in SQL functions
(``metastore.pg_group``) and keeps the generic SQLAlchemy path for markers. The
plan is the same :func:`metastore.sequencer.plan_commit`, so the outcome is the
one the generic path gives (the metastore contract suite runs both).

Why a raw, synchronous commit: through SQLAlchemy every statement was several
hops between the event loop and aiosqlite's thread (cursor, execute, fetch,
close), and behind a busy loop every hop waited its turn; and the sqlite3
module takes the GIL back after every row it steps, each take waiting for the
switch interval. At 1,000 partitions per group (~50 hops, ~2,000 row steps)
commits averaged 0.8-0.9 s under load against ~50 ms alone. Here a group is one
hop, and the partition and producer rows are read and written through JSON
arrays, one step per statement.
"""

from __future__ import annotations

import itertools
import json
import sqlite3
import uuid
from collections.abc import Iterable, Sequence

from metastore.sequencer import (
    PartitionState,
    ProducerBatch,
    ProducerKey,
    fresh_objects,
    group_outcome,
    in_sequence,
    last_sequence,
    object_spans,
    plan_commit_by_int,
)
from metastore.sqlite_log import batch_rows, batch_tuple, insert_batches_sql
from metastore.types import BatchToCommit, ObjectCommitResult, ObjectToCommit

# The JSON arrays of keys and rows (~1,000 entries at width): compact, and without
# json.dumps's cycle check (an id() per inner list), at ~40% of its cost.
_dumps = json.JSONEncoder(check_circular=False, separators=(",", ":")).encode
_KEYS_PER_IN = 900  # bound variables per IN (...) list
_PRODUCER_COLUMNS = (
    "topic_id", "partition", "producer_id", "producer_epoch", "base_sequence",
    "last_sequence", "base_offset", "last_offset", "append_time",
)  # fmt: skip
_PRODUCER_ROWS_PER_INSERT = 3000  # 27,000 parameters, under SQLite's 32,766

# [[index in the array, log start, high watermark], ...] in one row, looked up by
# primary key from a JSON array of [topic hex, partition] (the index, not the key:
# half the JSON to read back, and no hex to map back to a topic).
_STATES = """
SELECT json_group_array(json_array(j.key, p.log_start_offset, p.high_watermark))
  FROM json_each(?) AS j
  JOIN partitions p ON p.topic_id = json_extract(j.value, '$[0]')
                   AND p.partition = json_extract(j.value, '$[1]')
"""
_UPDATE_PARTITIONS = """
UPDATE partitions
   SET high_watermark = json_extract(j.value, '$[2]'),
       bytes = bytes + json_extract(j.value, '$[3]')
  FROM json_each(?) AS j
 WHERE partitions.topic_id = json_extract(j.value, '$[0]')
   AND partitions.partition = json_extract(j.value, '$[1]')
"""
_PRODUCERS = """
SELECT json_group_array(json_array(b.topic_id, b.partition, b.producer_id, b.producer_epoch,
                        b.base_sequence, b.last_sequence, b.base_offset, b.last_offset, b.append_time))
  FROM json_each(?) AS j
  JOIN producer_batches b ON b.topic_id = json_extract(j.value, '$[0]')
                         AND b.partition = json_extract(j.value, '$[1]')
                         AND b.producer_id = json_extract(j.value, '$[2]')
"""
# Only each key's newest entry: all an in-order group needs (see _in_order).
_NEWEST_PRODUCERS = """
SELECT json_group_array(json_array(b.topic_id, b.partition, b.producer_id, b.producer_epoch,
                        b.base_sequence, b.last_sequence, b.base_offset, b.last_offset, b.append_time))
  FROM json_each(?) AS j
  JOIN producer_batches b ON b.rowid = (
       SELECT c.rowid FROM producer_batches c
        WHERE c.topic_id = json_extract(j.value, '$[0]') AND c.partition = json_extract(j.value, '$[1]')
          AND c.producer_id = json_extract(j.value, '$[2]')
        ORDER BY c.base_offset DESC LIMIT 1)
"""
# After an in-order group: each key keeps its newest 5 entries.
_TRIM_PRODUCERS = """
DELETE FROM producer_batches
 WHERE rowid IN (
       SELECT c.rowid FROM json_each(?) AS j
         JOIN producer_batches c ON c.topic_id = json_extract(j.value, '$[0]')
                                AND c.partition = json_extract(j.value, '$[1]')
                                AND c.producer_id = json_extract(j.value, '$[2]')
        WHERE c.base_offset < (
              SELECT d.base_offset FROM producer_batches d
               WHERE d.topic_id = c.topic_id AND d.partition = c.partition
                 AND d.producer_id = c.producer_id
               ORDER BY d.base_offset DESC LIMIT 1 OFFSET 4))
"""
_DELETE_PRODUCERS = """
DELETE FROM producer_batches
 WHERE (topic_id, partition, producer_id, base_offset) IN (
       SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]'), json_extract(value, '$[2]'),
              json_extract(value, '$[3]')
         FROM json_each(?))
"""
_INSERT_OBJECT = (
    "INSERT INTO objects (key, agent_id, size, state, created_at, deleting_since) VALUES (?, ?, ?, ?, ?, ?)"
)


def sqlite_commit(db: sqlite3.Connection, objects: Sequence[ObjectToCommit], now: int) -> list[ObjectCommitResult]:
    """Sequence ``objects`` in order on ``db`` (in the caller's write transaction)."""
    fresh = fresh_objects([o.key for o in objects], _registered(db, sorted({o.key for o in objects})))
    batches: list[BatchToCommit] = [b for o, ok in zip(objects, fresh, strict=True) if ok for b in o.batches]
    # No order needed: BEGIN IMMEDIATE holds the whole database, there are no row locks to order.
    # Keyed by the id's int: UUID.__hash__ and .hex are Python code, paid here per
    # partition rather than per batch (~1 batch per partition per commit at width).
    parts = {(b.topic_id.int, b.partition): b.topic_id for b in batches}
    topics = {t.int: t for t in parts.values()}
    hex_of = {i: t.hex for i, t in topics.items()}  # SQLite stores a Uuid as its hex
    ids = {hex_of[i]: t for i, t in topics.items()}
    states = _states(db, hex_of, parts)
    keys = list({(b.topic_id, b.partition, b.producer_id) for b in batches if b.producer_id >= 0})
    producers = _producers(db, ids, keys, _NEWEST_PRODUCERS)
    lean = _in_order(batches, producers)
    if not lean:  # a retry, a gap, an epoch bump, a marker: plan_commit needs the last 5
        producers = _producers(db, ids, keys)
    # What is stored now, by base offset (unique in a partition): plan_commit edits the lists in place.
    stored = {k: {e.base_offset for e in v} for k, v in producers.items()}
    plan = plan_commit_by_int(batches, states, producers, now)
    spans = object_spans(objects, fresh, plan.accepted)
    object_ids = [
        None if sp is None else _insert_object(db, o, sp.live, now) for o, sp in zip(objects, spans, strict=True)
    ]
    out, rows = group_outcome(spans, object_ids, batches, plan, batch_tuple, now, batch_rows)
    if rows:
        for sql, params in insert_batches_sql(rows):
            db.execute(sql, params)
        changed = [
            (hex_of[t], p, st.high_watermark, st.added_bytes) for (t, p), st in states.items() if st.changed
        ]
        db.execute(_UPDATE_PARTITIONS, (_dumps(changed),))
    _store_producers(db, plan.touched_producers, producers, stored)
    if lean:
        trim = [[t.hex, p, pid] for t, p, pid in plan.touched_producers if stored.get((t, p, pid))]
        if trim:
            db.execute(_TRIM_PRODUCERS, (_dumps(trim),))
    return out


def _in_order(batches: Sequence[BatchToCommit], newest: dict[ProducerKey, list[ProducerBatch]]) -> bool:
    """Whether every idempotent batch is the next of its key's sequence (same epoch,
    following the key's newest stored entry or its previous batch in the group) or
    its key has no state. Then plan_commit decides exactly as it would with the
    key's last 5 entries: an in-sequence batch cannot equal an older entry (the
    duplicate check), and it is accepted."""
    last = {k: (v[-1].producer_epoch, v[-1].last_sequence) for k, v in newest.items()}
    for b in batches:
        if b.producer_id < 0:
            continue
        if b.base_sequence < 0:
            return False  # a transaction marker
        key = (b.topic_id, b.partition, b.producer_id)
        prev = last.get(key)
        if prev is not None and (prev[0] != b.producer_epoch or not in_sequence(prev[1], b.base_sequence)):
            return False
        last[key] = (b.producer_epoch, last_sequence(b.base_sequence, b.last_offset_delta))
    return True


def _insert_object(db: sqlite3.Connection, o: ObjectToCommit, live: bool, now: int) -> int:
    cur = db.execute(_INSERT_OBJECT, (o.key, o.agent_id, o.size, "live" if live else "deleting", now, None if live else now))
    return int(cur.lastrowid or 0)


def _registered(db: sqlite3.Connection, keys: list[str]) -> set[str]:
    found: set[str] = set()
    for i in range(0, len(keys), _KEYS_PER_IN):
        chunk = keys[i : i + _KEYS_PER_IN]
        sql = f"SELECT key FROM objects WHERE key IN ({', '.join('?' * len(chunk))})"
        found.update(r[0] for r in db.execute(sql, chunk))
    return found


def _states(
    db: sqlite3.Connection, hex_of: dict[int, str], wanted: Iterable[tuple[int, int]]
) -> dict[tuple[int, int], PartitionState]:
    """The states of the ``wanted`` partitions (topic id's int, partition) that exist,
    by the same key; ``hex_of``: each topic's hex by its int."""
    keys = list(wanted)
    if not keys:
        return {}
    (found,) = db.execute(_STATES, (_dumps([(hex_of[t], p) for t, p in keys]),)).fetchone()
    return {keys[i]: PartitionState(lso, hwm) for i, lso, hwm in json.loads(found)}


def _producers(
    db: sqlite3.Connection, ids: dict[str, uuid.UUID], keys: list[ProducerKey], sql: str = _PRODUCERS
) -> dict[ProducerKey, list[ProducerBatch]]:
    out: dict[ProducerKey, list[ProducerBatch]] = {}
    if not keys:
        return out
    (found,) = db.execute(sql, (_dumps([[t.hex, p, pid] for t, p, pid in keys]),)).fetchone()
    # The last batches of each producer in offset order (what plan_commit expects).
    for t, p, pid, *entry in sorted(json.loads(found), key=lambda r: r[6]):
        out.setdefault((ids[t], p, pid), []).append(ProducerBatch(*entry))
    return out


def _store_producers(
    db: sqlite3.Connection,
    touched: set[ProducerKey],
    producers: dict[ProducerKey, list[ProducerBatch]],
    stored: dict[ProducerKey, set[int]],
) -> None:
    """Write back the touched producers' last batches: delete the entries the plan
    dropped and insert the ones it added (by base offset), not all five each time -
    at 1,000 partitions an idempotent producer touches 1,000 keys per commit."""
    if not touched:
        return
    gone: list[list[object]] = []
    rows: list[tuple[object, ...]] = []
    empty: set[int] = set()
    for key in sorted(touched):
        t, p, pid = key
        before = stored.get(key, empty)
        after = producers[key]
        kept = {e.base_offset for e in after}
        gone += [[t.hex, p, pid, base] for base in before - kept]
        rows += [(t.hex, p, pid, *e) for e in after if e.base_offset not in before]
    if gone:
        db.execute(_DELETE_PRODUCERS, (_dumps(gone),))
    row_sql = "(" + ", ".join("?" * len(_PRODUCER_COLUMNS)) + ")"
    for i in range(0, len(rows), _PRODUCER_ROWS_PER_INSERT):
        chunk = rows[i : i + _PRODUCER_ROWS_PER_INSERT]
        sql = f"INSERT INTO producer_batches ({', '.join(_PRODUCER_COLUMNS)}) VALUES " + ", ".join([row_sql] * len(chunk))
        db.execute(sql, tuple(itertools.chain.from_iterable(chunk)))
