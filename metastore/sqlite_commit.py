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

Idempotent producers (Java clients' default) add a producer entry per batch. A
group whose idempotent batches each follow their key's sequence (nearly every
one) is planned by :func:`metastore.sequencer_core.plan_in_order` from each key's
newest entry, and the entries are copied from the stored batch rows in SQL: no
Python per entry. Anything else (a retry, a gap, an epoch bump, a marker) is
planned again over the last 5 entries by ``plan_commit_by_int``.
"""

from __future__ import annotations

import itertools
import json
import sqlite3
from collections.abc import Iterable, Sequence
from operator import itemgetter

from metastore.sequencer import fresh_objects, group_outcome, object_spans
from metastore.sequencer_core import (
    IntProducerKey,
    PartitionState,
    ProducerBatch,
    plan_commit_by_int,
    plan_in_order,
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
# After a lean plan, the producer entries of the group's idempotent batches, from
# their rows (last_sequence as metastore.sequencer_core.last_sequence computes it).
_PRODUCERS_FROM_BATCHES = """
INSERT INTO producer_batches (topic_id, partition, producer_id, producer_epoch, base_sequence,
                              last_sequence, base_offset, last_offset, append_time)
SELECT b.topic_id, b.partition, b.producer_id, b.producer_epoch, b.base_sequence,
       CASE WHEN b.base_sequence + b.last_offset - b.base_offset > 2147483647
            THEN b.base_sequence + b.last_offset - b.base_offset - 2147483648
            ELSE b.base_sequence + b.last_offset - b.base_offset END,
       b.base_offset, b.last_offset, b.append_time
  FROM json_each(?) AS j
  JOIN batches b ON b.object_id = j.value
 WHERE b.producer_id >= 0
"""
# Then each key keeps its newest 5 entries.
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
    # topic rather than per batch (~1 batch per partition per commit at width).
    parts = {(b.topic_id.int, b.partition): b.topic_id for b in batches}
    topics = {t.int: t for t in parts.values()}
    hex_of = {i: t.hex for i, t in topics.items()}  # SQLite stores a Uuid as its hex
    found = _states(db, hex_of, parts)
    states = {k: PartitionState(lso, hwm) for k, lso, hwm in found}
    keys = list({(b.topic_id.int, b.partition, b.producer_id) for b in batches if b.producer_id >= 0})
    keys_json = _dumps([[hex_of[t], p, pid] for t, p, pid in keys])
    # Each key's newest entry: all a group needs whose idempotent batches each follow
    # their key's sequence (plan_in_order), nearly every group.
    plan = plan_in_order(batches, states, _newest(db, hex_of, keys_json) if keys else {}, now)
    lean = plan is not None and bool(keys)
    producers: dict[IntProducerKey, list[ProducerBatch]] = {}
    stored: dict[IntProducerKey, set[int]] = {}
    if plan is None:  # a retry, a gap, an epoch bump, a marker: the last 5 entries, from the start
        states = {k: PartitionState(lso, hwm) for k, lso, hwm in found}
        producers = _producers(db, hex_of, keys_json)
        # What is stored now, by base offset (unique in a partition): the plan edits the lists in place.
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
    if lean:
        # Every idempotent batch stored is its key's newest entry: copied from its row,
        # then each key keeps its newest 5, the entries the general path leaves.
        if rows:
            db.execute(_PRODUCERS_FROM_BATCHES, (_dumps([i for i in object_ids if i is not None]),))
            db.execute(_TRIM_PRODUCERS, (keys_json,))
    else:
        _store_producers(db, hex_of, plan.touched_producers, producers, stored)
    return out


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
) -> list[tuple[tuple[int, int], int, int]]:
    """``(key, log start, high watermark)`` of the ``wanted`` partitions (topic id's
    int, partition) that exist; ``hex_of``: each topic's hex by its int."""
    keys = list(wanted)
    if not keys:
        return []
    (found,) = db.execute(_STATES, (_dumps([(hex_of[t], p) for t, p in keys]),)).fetchone()
    return [(keys[i], lso, hwm) for i, lso, hwm in json.loads(found)]


def _newest(db: sqlite3.Connection, hex_of: dict[int, str], keys_json: str) -> dict[IntProducerKey, tuple[int, int]]:
    """The epoch and last sequence of the newest stored entry of each key in
    ``keys_json`` ([[topic hex, partition, producer id], ...]) that has one."""
    (found,) = db.execute(_NEWEST_PRODUCERS, (keys_json,)).fetchone()
    int_of = {h: t for t, h in hex_of.items()}
    return {(int_of[r[0]], r[1], r[2]): (r[3], r[5]) for r in json.loads(found)}


def _producers(
    db: sqlite3.Connection, hex_of: dict[int, str], keys_json: str
) -> dict[IntProducerKey, list[ProducerBatch]]:
    """The stored entries of the keys in ``keys_json``, oldest first (what
    plan_commit_by_int expects)."""
    out: dict[IntProducerKey, list[ProducerBatch]] = {}
    (found,) = db.execute(_PRODUCERS, (keys_json,)).fetchone()
    int_of = {h: t for t, h in hex_of.items()}
    for t, p, pid, *entry in sorted(json.loads(found), key=itemgetter(6)):
        out.setdefault((int_of[t], p, pid), []).append(ProducerBatch(*entry))
    return out


def _store_producers(
    db: sqlite3.Connection,
    hex_of: dict[int, str],
    touched: set[IntProducerKey],
    producers: dict[IntProducerKey, list[ProducerBatch]],
    stored: dict[IntProducerKey, set[int]],
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
        h = hex_of[t]
        before = stored.get(key, empty)
        after = producers[key]
        kept = {e.base_offset for e in after}
        gone += [[h, p, pid, base] for base in before - kept]
        rows += [(h, p, pid, *e) for e in after if e.base_offset not in before]
    if gone:
        db.execute(_DELETE_PRODUCERS, (_dumps(gone),))
    row_sql = "(" + ", ".join("?" * len(_PRODUCER_COLUMNS)) + ")"
    for i in range(0, len(rows), _PRODUCER_ROWS_PER_INSERT):
        chunk = rows[i : i + _PRODUCER_ROWS_PER_INSERT]
        sql = f"INSERT INTO producer_batches ({', '.join(_PRODUCER_COLUMNS)}) VALUES " + ", ".join([row_sql] * len(chunk))
        db.execute(sql, tuple(itertools.chain.from_iterable(chunk)))
