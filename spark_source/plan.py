"""Read plans: what an executor reads for one offset range, as plain picklable values.

The driver asks the metastore for the batch rows that cover ``[start, end)`` of
a partition and turns them into :class:`ReadTask`\\ s: for segment objects,
coalesced byte ranges with the real base offset of every batch in them; for
Parquet objects (written by the compactor), the object key and the inclusive
offset range to take from it. Executors need nothing else: no metastore, no
database credentials.

Planning is a pure function of (offset ranges, batch rows): replaying a batch
after a failure re-plans the same offset range, and if compaction moved the
data meanwhile the plan names other objects but yields the same rows, because
readers keep exactly the records whose offsets lie in ``[start, end)``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from metastore.types import BatchLocation
from objectstore.parquet import is_parquet_key

# Adjacent batches of one segment object are read with one ranged GET when the
# hole between them is at most this many bytes.
MERGE_GAP = 256 * 1024
# ... and a single GET reads at most this much.
MAX_SPAN_BYTES = 64 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class SegmentSpan:
    """One ranged read ``[pos, pos + length)`` of a segment object, holding
    ``batches``: ``(offset within the span, byte length, real base offset)``."""

    key: str
    pos: int
    length: int
    batches: tuple[tuple[int, int, int], ...]


@dataclass(frozen=True, slots=True)
class ParquetSpan:
    """Rows ``first <= offset <= last`` of one partition in a Parquet object."""

    key: str
    first: int
    last: int


Span = SegmentSpan | ParquetSpan


@dataclass(frozen=True, slots=True)
class ObjectRef:
    """How an executor reaches one object: its size (so no HEAD request is needed)
    and, when the agent presigned it, a URL that needs no credentials: ``url`` for
    a whole object (Parquet), or ``ranges`` ``(start, end, url)`` for a segment
    object, each URL good only for exactly its bytes ``[start, end)`` (a segment
    object holds other topics' batches too: ``objectstore.byte_grants``)."""

    size: int
    url: str | None = None
    ranges: tuple[tuple[int, int, str], ...] = ()

    @property
    def presigned(self) -> bool:
        return bool(self.url or self.ranges)


@dataclass(frozen=True, slots=True)
class ReadTask:
    """Records ``start <= offset < end`` of one partition, found in ``spans``."""

    topic: str
    partition: int
    start: int
    end: int
    spans: tuple[Span, ...]
    # read_committed: aborted transactions overlapping the range, as (producer id,
    # first offset, marker offset); their batches are skipped.
    aborted: tuple[tuple[int, int, int], ...] = ()

    @property
    def records(self) -> int:
        return self.end - self.start


def covering(batches: Iterable[BatchLocation], start: int, end: int) -> list[BatchLocation]:
    """The batches that hold some offset of ``[start, end)``, in offset order."""
    return sorted(
        (b for b in batches if b.last_offset >= start and b.base_offset < end),
        key=lambda b: b.base_offset,
    )


def spans_for(
    batches: Sequence[BatchLocation],
    start: int,
    end: int,
    *,
    merge_gap: int = MERGE_GAP,
    max_span_bytes: int = MAX_SPAN_BYTES,
) -> tuple[Span, ...]:
    """Coalesce ``batches`` (covering, in offset order) into reads."""
    out: list[Span] = []
    seg_key: str | None = None
    seg_pos = seg_end = 0
    seg_batches: list[tuple[int, int, int]] = []
    pq: ParquetSpan | None = None

    def flush_segment() -> None:
        nonlocal seg_key, seg_batches
        if seg_key is not None and seg_batches:
            out.append(SegmentSpan(seg_key, seg_pos, seg_end - seg_pos, tuple(seg_batches)))
        seg_key, seg_batches = None, []

    def flush_parquet() -> None:
        nonlocal pq
        if pq is not None:
            out.append(pq)
        pq = None

    for b in batches:
        if is_parquet_key(b.object_key):
            flush_segment()
            first, last = max(b.base_offset, start), min(b.last_offset, end - 1)
            if pq is not None and pq.key == b.object_key:
                # Consecutive rows of one object (holes from compaction included): one read.
                pq = ParquetSpan(pq.key, pq.first, max(pq.last, last))
            else:
                flush_parquet()
                pq = ParquetSpan(b.object_key, first, last)
            continue
        flush_parquet()
        b_end = b.byte_pos + b.byte_len
        if (
            seg_key == b.object_key
            and seg_end <= b.byte_pos <= seg_end + merge_gap
            and b_end - seg_pos <= max_span_bytes
        ):
            seg_batches.append((b.byte_pos - seg_pos, b.byte_len, b.base_offset))
            seg_end = b_end
            continue
        flush_segment()
        seg_key, seg_pos, seg_end = b.object_key, b.byte_pos, b_end
        seg_batches = [(0, b.byte_len, b.base_offset)]
    flush_segment()
    flush_parquet()
    return tuple(out)


def split_range(
    topic: str,
    partition: int,
    start: int,
    end: int,
    batches: Sequence[BatchLocation],
    *,
    max_bytes: int,
    max_records: int | None = None,
    merge_gap: int = MERGE_GAP,
) -> list[ReadTask]:
    """Cut ``[start, end)`` of a partition into tasks at batch boundaries.

    A task closes once it holds ``max_bytes`` of batches or ``max_records``
    offsets; cuts fall on batch base offsets, so every batch is read by one task
    (a batch straddling ``start`` or ``end`` is read and clipped).
    """
    if end <= start:
        return []
    bs = covering(batches, start, end)
    tasks: list[ReadTask] = []
    cur: list[BatchLocation] = []
    cur_start = start
    cur_bytes = 0
    for b in bs:
        cut = max(b.base_offset, start)
        full = cur_bytes >= max_bytes or (
            max_records is not None and cut - cur_start >= max_records
        )
        if cur and full and cut > cur_start:
            tasks.append(
                ReadTask(
                    topic,
                    partition,
                    cur_start,
                    cut,
                    spans_for(cur, cur_start, cut, merge_gap=merge_gap),
                )
            )
            cur, cur_start, cur_bytes = [], cut, 0
        cur.append(b)
        cur_bytes += b.byte_len
    tasks.append(
        ReadTask(
            topic, partition, cur_start, end, spans_for(cur, cur_start, end, merge_gap=merge_gap)
        )
    )
    return tasks


def records_per_task(
    total_records: int, min_partitions: int | None, max_records: int | None
) -> int | None:
    """The record cap per task that yields about ``min_partitions`` tasks (Kafka's hint)."""
    caps = [c for c in (max_records,) if c is not None]
    if min_partitions is not None and total_records > 0:
        caps.append(max(1, math.ceil(total_records / min_partitions)))
    return min(caps) if caps else None
