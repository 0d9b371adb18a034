"""The SQLite side of the log: raw sqlite3 statements for the hot paths of ``metastore.log``.

Where it sits: under :class:`metastore.log.LogMixin`, which calls these on a
SQLite metastore (``floe dev``, a single-node agent); Postgres has its own
(``metastore.pg_group``, ``metastore.pg_reads``). Lookups (``sqlite_find``)
run as one call on the connection, so on the read engine's inline connection
(``metastore.sqlite_inline``). The commit's statements run on aiosqlite's
writer thread, which takes the GIL back after every row sqlite3 steps through,
and behind a busy event loop every take waited for the switch interval: so the
commit reads and writes a group's partition rows in one step each, through
JSON arrays (``sqlite_states``, ``sqlite_update_partitions``), and inserts its
batch rows in multi-row INSERTs. At 1,000 partitions per group the per-row
statements were ~2,000 steps, and commits averaged 0.8-1 s under load.
"""

from __future__ import annotations

import itertools
import json
import uuid
from collections.abc import Iterable, Sequence
from typing import Any

from sqlalchemy.ext.asyncio import AsyncConnection

from metastore.types import BatchLocation, BatchToCommit, ErrorCode, FindResult

_SQLITE_STATE = "SELECT log_start_offset, high_watermark FROM partitions WHERE topic_id = ? AND partition = ?"
# _find_batches' query as SQLite text, without its window functions: the rows
# from ``offset`` on, in offset order; sqlite_find_many keeps the prefix that fits
# ``max_bytes`` (the first row always) and stops reading there. The windowed form
# materialised up to ``max_batches`` rows for every partition of every Fetch.
_SQLITE_FIND = """
SELECT o.key, b.byte_pos, b.byte_len, b.base_offset, b.last_offset, b.record_count,
       b.max_timestamp, b.append_time
  FROM batches b JOIN objects o ON o.id = b.object_id
 WHERE b.topic_id = ? AND b.partition = ? AND b.last_offset >= ?
 ORDER BY b.last_offset
 LIMIT ?
"""


def sqlite_find_many(
    db: Any, wants: list[tuple[uuid.UUID, int, int, int]], max_batches: int
) -> list[FindResult]:
    """find_batches of each want on a sqlite3 connection (aiosqlite's thread)."""
    out: list[FindResult] = []
    for topic_id, partition, offset, max_bytes in wants:
        tid = topic_id.hex
        state = db.execute(_SQLITE_STATE, (tid, partition)).fetchone()
        if state is None:
            out.append(FindResult(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, -1, -1))
            continue
        lso, hwm = state
        if offset < lso or offset > hwm:
            out.append(FindResult(ErrorCode.OFFSET_OUT_OF_RANGE, lso, hwm))
        elif offset == hwm:
            out.append(FindResult(ErrorCode.NONE, lso, hwm))
        else:
            found: list[BatchLocation] = []
            total = 0
            for r in db.execute(_SQLITE_FIND, (tid, partition, offset, max_batches)):
                total += r[2]
                if found and total > max_bytes:
                    break
                found.append(BatchLocation(*r))
            out.append(FindResult(ErrorCode.NONE, lso, hwm, found))
    return out


async def sqlite_find(
    conn: AsyncConnection, wants: Sequence[tuple[uuid.UUID, int, int, int]], max_batches: int
) -> list[FindResult]:
    """All lookups in one hop to aiosqlite's thread, on sqlite3's statement cache:
    ~2 statements per partition, not ~2 SQLAlchemy compilations and thread hops."""
    raw = await conn.get_raw_connection()
    aio: Any = raw.driver_connection
    result: list[FindResult] = await aio._execute(
        sqlite_find_many, aio._conn, list(wants), max(1, max_batches)
    )
    return result


_BATCH_COLUMNS = (
    "topic_id", "partition", "last_offset", "base_offset", "object_id", "byte_pos", "byte_len",
    "record_count", "base_timestamp", "max_timestamp", "append_time", "producer_id",
    "producer_epoch", "base_sequence", "is_transactional",
)
_SQLITE_INSERT_PREFIX = f"INSERT INTO batches ({', '.join(_BATCH_COLUMNS)}) VALUES "
_SQLITE_ROW = "(" + ", ".join("?" * len(_BATCH_COLUMNS)) + ")"
_SQLITE_ROWS_PER_INSERT = 1000  # 15,000 parameters, under SQLite's 32,766


async def sqlite_insert_batches(conn: AsyncConnection, rows: list[Any]) -> None:
    """Batch rows in multi-row INSERTs of up to 1,000 rows each.

    Not ``executemany``: the sqlite3 module releases and re-takes the GIL around
    every row it steps, and with the agent's event loop busy each re-take waits up
    to the interpreter's switch interval, so a 2,600-row commit took ~440 ms under
    load (librdkafka's default linger sends ~1 record per batch). One statement per
    1,000 rows takes the GIL a few times per commit. No SQLAlchemy parameter
    processing either (a Uuid is stored as its 32-digit hex on SQLite)."""
    for i in range(0, len(rows), _SQLITE_ROWS_PER_INSERT):
        chunk = rows[i : i + _SQLITE_ROWS_PER_INSERT]
        sql = _SQLITE_INSERT_PREFIX + ", ".join([_SQLITE_ROW] * len(chunk))
        await conn.exec_driver_sql(sql, tuple(itertools.chain.from_iterable(chunk)))


def batch_tuple(batch: BatchToCommit, base: int, object_id: int, now: int) -> tuple[Any, ...]:
    """The row of :func:`metastore.log._batch_row` as SQLite stores it (a Uuid is its 32-digit hex)."""
    return (
        batch.topic_id.hex, batch.partition, base + batch.last_offset_delta, base, object_id,
        batch.byte_pos, batch.byte_len, batch.record_count, batch.base_timestamp,
        batch.max_timestamp, now, batch.producer_id, batch.producer_epoch, batch.base_sequence,
        int(batch.is_transactional),
    )


# One row of JSON for all the partitions a commit touches: [[topic hex, partition,
# log start, high watermark], ...], looked up by primary key from a JSON array.
_SQLITE_STATES = """
SELECT json_group_array(json_array(p.topic_id, p.partition, p.log_start_offset, p.high_watermark))
  FROM json_each(?) AS j
  JOIN partitions p ON p.topic_id = json_extract(j.value, '$[0]')
                   AND p.partition = json_extract(j.value, '$[1]')
"""
_SQLITE_UPDATE_PARTITIONS = """
UPDATE partitions
   SET high_watermark = json_extract(j.value, '$[2]'),
       bytes = bytes + json_extract(j.value, '$[3]')
  FROM json_each(?) AS j
 WHERE partitions.topic_id = json_extract(j.value, '$[0]')
   AND partitions.partition = json_extract(j.value, '$[1]')
"""


async def sqlite_states(
    conn: AsyncConnection, wanted: Sequence[tuple[uuid.UUID, int]]
) -> dict[tuple[uuid.UUID, int], tuple[int, int]]:
    """``(log start, high watermark)`` of each existing partition of ``wanted``, in
    one statement (the caller holds the write lock: BEGIN IMMEDIATE)."""
    if not wanted:
        return {}
    ids = {t.hex: t for t, _ in wanted}
    arg = json.dumps([[t.hex, p] for t, p in wanted])
    row = (await conn.exec_driver_sql(_SQLITE_STATES, (arg,))).one()
    return {(ids[t], p): (lso, hwm) for t, p, lso, hwm in json.loads(row[0])}


async def sqlite_update_partitions(
    conn: AsyncConnection, updates: Iterable[tuple[uuid.UUID, int, int, int]]
) -> None:
    """Set each ``(topic, partition, high watermark, added bytes)``: one statement."""
    arg = json.dumps([[t.hex, p, hwm, added] for t, p, hwm, added in updates])
    if arg != "[]":
        await conn.exec_driver_sql(_SQLITE_UPDATE_PARTITIONS, (arg,))
