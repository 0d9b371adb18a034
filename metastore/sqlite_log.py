"""The SQLite side of the log: batch lookups and batch rows as raw sqlite3 statements.

Where it sits: under :class:`metastore.log.LogMixin` (lookups, on the read
engine's inline connection, ``metastore.sqlite_inline``) and
:mod:`metastore.sqlite_commit` (the batch rows a commit inserts). Postgres has
its own (``metastore.pg_group``, ``metastore.pg_reads``). Raw statements on
sqlite3's statement cache: SQLAlchemy's query building cost ~5x more per
partition of a Fetch.
"""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Awaitable, Callable, Iterable, Iterator, Sequence
from typing import Any

from metastore import runs
from metastore.types import BatchToCommit, ErrorCode, FindResult, MetastoreError, PartitionOffsets

# SqlBase._read_raw: fn(db, *args) in one read transaction on a raw sqlite3 connection.
RawRead = Callable[..., Awaitable[Any]]

_SQLITE_STATE = "SELECT log_start_offset, high_watermark FROM partitions WHERE topic_id = ? AND partition = ?"
# _find_batches' query as SQLite text, without its window functions: the rows
# from ``offset`` on, in offset order; sqlite_find_many keeps the prefix that fits
# ``max_bytes`` (the first row always) and stops reading there. The windowed form
# materialised up to ``max_batches`` rows for every partition of every Fetch.
_SQLITE_FIND = """
SELECT o.key, b.byte_pos, b.byte_len, b.base_offset, b.last_offset, b.record_count,
       b.max_timestamp, b.append_time, b.entries
  FROM batches b JOIN objects o ON o.id = b.object_id
 WHERE b.topic_id = ? AND b.partition = ? AND b.last_offset >= ?
 ORDER BY b.last_offset
 LIMIT ?
"""

_SQLITE_KEY = "SELECT key FROM objects WHERE id = ?"


def sqlite_find_many(
    db: Any, wants: list[tuple[uuid.UUID, int, int, int]], max_batches: int
) -> list[FindResult]:
    """find_batches of each want on a sqlite3 connection."""
    out: list[FindResult] = []
    keys = _Keys(db)
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
            # The rows up to the one that crosses max_bytes, counting a leading run's
            # bytes as none (some lie before ``offset``); runs.expand trims exactly.
            rows: list[Any] = []
            total = 0
            for r in db.execute(_SQLITE_FIND, (tid, partition, offset, max_batches)):
                if rows and total >= max_bytes:
                    break
                rows.append(r)
                if len(rows) > 1 or r[8] is None:
                    total += r[2]
            found = runs.expand(rows, keys, offset, max_bytes, max_batches)
            out.append(FindResult(ErrorCode.NONE, lso, hwm, found))
    return out


class _Keys(dict[int, str]):
    """Object keys by id, read as a run row names them (SQLite may reuse an id
    once its row is gone, so nothing is kept between lookups)."""

    def __init__(self, db: Any) -> None:
        super().__init__()
        self.db = db

    def __missing__(self, object_id: int) -> str:
        row = self.db.execute(_SQLITE_KEY, (object_id,)).fetchone()
        if row is None:  # read after the GC dropped it: the caller asks again
            raise MetastoreError(f"object {object_id} of a run row is gone")
        self[object_id] = key = str(row[0])
        return key


async def sqlite_find(
    read_raw: RawRead, wants: Sequence[tuple[uuid.UUID, int, int, int]], max_batches: int
) -> list[FindResult]:
    """All lookups in one raw read (``SqlBase._read_raw``: inline on a file-backed
    metastore, aiosqlite's thread otherwise), on sqlite3's statement cache: ~2
    statements per partition, not ~2 SQLAlchemy compilations and hops."""
    result: list[FindResult] = await read_raw(sqlite_find_many, list(wants), max(1, max_batches))
    return result


_SQLITE_OFFSETS = (
    "SELECT partition, log_start_offset, high_watermark FROM partitions WHERE topic_id = ? ORDER BY partition"
)
_SQLITE_TXN_HELD = (
    "SELECT EXISTS (SELECT 1 FROM txn_partitions WHERE topic_id = ?)"
    " OR EXISTS (SELECT 1 FROM aborted_txns WHERE topic_id = ?)"
)


def _topic_offsets(db: Any, topic_hex: str, with_state: bool) -> tuple[list[PartitionOffsets], bool]:
    offsets = list(map(PartitionOffsets._make, db.execute(_SQLITE_OFFSETS, (topic_hex,))))
    if not with_state:
        return offsets, False
    (held,) = db.execute(_SQLITE_TXN_HELD, (topic_hex, topic_hex)).fetchone()
    return offsets, not held


async def sqlite_topic_offsets(
    read_raw: RawRead, topic_id: uuid.UUID, with_state: bool
) -> tuple[list[PartitionOffsets], bool]:
    """Every partition's offsets in partition order and, ``with_state``, whether the
    topic holds no transaction state (read after them), as raw statements in one
    read: the width path of Fetch reads 1,000 rows per wide Fetch, and SQLAlchemy's
    row processing cost more than the query."""
    result: tuple[list[PartitionOffsets], bool] = await read_raw(_topic_offsets, topic_id.hex, with_state)
    return result


_BATCH_COLUMNS = (
    "topic_id", "partition", "last_offset", "base_offset", "object_id", "byte_pos", "byte_len",
    "record_count", "base_timestamp", "max_timestamp", "append_time", "producer_id",
    "producer_epoch", "base_sequence", "is_transactional",
)
_SQLITE_INSERT_PREFIX = f"INSERT INTO batches ({', '.join(_BATCH_COLUMNS)}) VALUES "
_SQLITE_ROW = "(" + ", ".join("?" * len(_BATCH_COLUMNS)) + ")"
_SQLITE_ROWS_PER_INSERT = 1000  # 15,000 parameters, under SQLite's 32,766


def insert_batches_sql(rows: list[tuple[Any, ...]]) -> Iterator[tuple[str, tuple[Any, ...]]]:
    """Batch rows as multi-row INSERTs of up to 1,000 rows each: ``(sql, params)``.

    Not ``executemany``: the sqlite3 module releases and re-takes the GIL around
    every row it steps, and with the agent's event loop busy each re-take waits up
    to the interpreter's switch interval, so a 2,600-row commit took ~440 ms under
    load (librdkafka's default linger sends ~1 record per batch). One statement per
    1,000 rows takes the GIL a few times per commit."""
    for i in range(0, len(rows), _SQLITE_ROWS_PER_INSERT):
        chunk = rows[i : i + _SQLITE_ROWS_PER_INSERT]
        sql = _SQLITE_INSERT_PREFIX + ", ".join([_SQLITE_ROW] * len(chunk))
        yield sql, tuple(itertools.chain.from_iterable(chunk))


_HEX: dict[int, str] = {}  # a topic id's hex by its int: the row's first column


def _hex(topic_int: int) -> str:
    if len(_HEX) >= 4096:  # topics come and go: a bound, not an eviction policy
        _HEX.clear()
    _HEX[topic_int] = hexed = f"{topic_int:032x}"
    return hexed


def batch_tuple(batch: BatchToCommit, base: int, object_id: int, now: int) -> tuple[Any, ...]:
    """The row of :func:`metastore.log._batch_row` as SQLite stores it (one batch of
    :func:`batch_rows`, which lays the row out)."""
    return batch_rows((batch,), (base,), object_id, now)[0]


def batch_rows(
    batches: Sequence[BatchToCommit], bases: Iterable[int], object_id: int, now: int
) -> list[tuple[Any, ...]]:
    """The SQLite rows (:data:`_BATCH_COLUMNS`; a Uuid is its 32-digit hex, cached by
    the id's int: ``UUID.hex`` is a Python frame) of each batch at its base offset, in
    one comprehension: a commit at width stores ~1,400 rows on the writer thread, and
    a call per row was a third of their cost."""
    get = _HEX.get
    return [
        (get(t.int) or _hex(t.int), partition, base + delta, base, object_id, pos, size, count,
         base_ts, max_ts, now, pid, epoch, seq, int(txn))
        for (t, partition, pos, size, count, delta, base_ts, max_ts, pid, epoch, seq, txn), base
        in zip(batches, bases, strict=True)
    ]  # fmt: skip
