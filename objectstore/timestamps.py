"""Record-level timestamp lookup: the first offset whose timestamp is >= T.

Where it sits: the metastore indexes one row per batch (its max timestamp), so
``Metastore.list_offsets(ts)`` finds the first *batch* that reaches ``ts``.
Kafka's ListOffsets (and so Spark's ``startingTimestamp``) answers the first
*record*: every batch before the found one ends below ``ts``, so the answer
lies inside that batch, and these helpers find it in the batch's bytes
(segments) or rows (Parquet). Both the agent's planning API and the Spark
source's direct mode use them, so neither imports the other.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kafka_protocol.records import (
    TIMESTAMP_LOG_APPEND_TIME,
    RecordBatchView,
    iter_batches,
    patch_base_offset,
)

if TYPE_CHECKING:
    import pyarrow as pa


def first_offset_in_batch(data: bytes | memoryview, base_offset: int, timestamp: int) -> int | None:
    """The first offset of a stored batch whose record timestamp is >= ``timestamp``.

    ``base_offset`` is the batch's real base (stored batches may hold a
    placeholder). A LogAppendTime batch stamps every record with the batch's
    max timestamp. None if no record reaches ``timestamp``.
    """
    buf = bytearray(data)
    patch_base_offset(buf, 0, base_offset)
    view = RecordBatchView(buf)
    if view.timestamp_type == TIMESTAMP_LOG_APPEND_TIME:
        return base_offset if view.max_timestamp >= timestamp else None
    for r in view.records():
        if r.timestamp >= timestamp:
            return int(r.offset)
    return None


def first_offset_in_rows(table: pa.Table, timestamp: int) -> int | None:
    """The same over Parquet rows (Kafka schema, ``timestamp`` in microseconds)."""
    import pyarrow.compute as pc

    if table.num_rows == 0:
        return None
    ts = table["timestamp"].cast("int64")
    hit = table.filter(pc.greater_equal(ts, timestamp * 1000))
    if hit.num_rows == 0:
        return None
    return int(pc.min(hit["offset"]).as_py())


def first_record_at(
    data: bytes | memoryview, timestamp: int, *, min_offset: int = 0, exact: bool = False
) -> tuple[int, int] | None:
    """``(offset, timestamp)`` of the first record of fetch-ready batches (base
    offsets patched in, as the agent's fetch reader returns them, segments and
    rebuilt Parquet alike) whose timestamp is >= ``timestamp`` (== with ``exact``,
    for ListOffsets' max-timestamp), at or after ``min_offset`` (the log start).

    Compressed batches are decompressed; LogAppendTime batches stamp every record
    with the batch's max timestamp. Control records (transaction markers) count,
    as in Kafka's log: a lookup past the last data record may name a marker."""
    for view in iter_batches(data, allow_partial_tail=True):
        if view.last_offset < min_offset or view.max_timestamp < timestamp:
            continue
        for r in view.records():
            if r.offset < min_offset:
                continue
            if r.timestamp == timestamp if exact else r.timestamp >= timestamp:
                return int(r.offset), int(r.timestamp)
    return None


def max_record(data: bytes | memoryview, *, min_offset: int = 0) -> tuple[int, int] | None:
    """``(offset, timestamp)`` of the first record carrying the largest timestamp
    among the records (markers included, as in Kafka) of fetch-ready batches at or
    after ``min_offset`` (ListOffsets' max-timestamp over what is still
    readable), or None."""
    best: tuple[int, int] | None = None
    for view in iter_batches(data, allow_partial_tail=True):
        if view.last_offset < min_offset:
            continue
        if best is not None and view.max_timestamp <= best[1]:
            continue
        for r in view.records():
            if r.offset >= min_offset and (best is None or r.timestamp > best[1]):
                best = (int(r.offset), int(r.timestamp))
    return best
