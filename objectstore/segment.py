"""The segment object format: record batches of many partitions in one object.

Produce path: the agent's batcher feeds each validated Kafka RecordBatch (kept
as bytes) into a :class:`SegmentBuilder`; at ``flush_bytes``/``flush_interval``
it calls :meth:`SegmentBuilder.finish`, PUTs the bytes, and commits the
returned :class:`SegmentEntry` list (byte_pos/byte_len per batch) to the
metastore. Fetch path and compactor read byte ranges back by those positions.
Tools and the orphan GC can list an object's contents without the metastore
via :func:`objectstore.segment_index.read_index` (one ranged GET of the tail).

Layout (all integers big-endian, like Kafka)::

    header   b"FLOESEG" + version(u8)                       8 bytes
    batches  raw RecordBatch bytes, grouped by (topic_id bytes, partition),
             arrival order kept within a partition
    footer   entry_count(u32) + entry_count * ENTRY (72 bytes each)
    trailer  footer_len(u32) + crc32c(footer)(u32) + b"FLOESEG" + version(u8)   16 bytes

    ENTRY = topic_id(16) partition(i32) byte_pos(i64, absolute) byte_len(i32)
            record_count(i32) max_timestamp(i64) base_timestamp(i64)
            last_offset_delta(i32) producer_id(i64) producer_epoch(i16)
            base_sequence(i32) attributes(i16)

Everything read back is validated against the bytes actually present (magic,
version, CRC32C, lengths, entry bounds and order) before any field is trusted;
failures raise :class:`~objectstore.errors.SegmentFormatError`.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Iterable
from typing import NamedTuple, Protocol

import google_crc32c

MAGIC = b"FLOESEG"
VERSION = 1
HEADER = MAGIC + bytes([VERSION])
HEADER_SIZE = len(HEADER)
_ENTRY = struct.Struct(">16siqiiqqiqhih")
ENTRY_SIZE = _ENTRY.size
_COUNT = struct.Struct(">I")
_TRAILER = struct.Struct(">II8s")
TRAILER_SIZE = _TRAILER.size
DEFAULT_TAIL_GUESS = 64 * 1024  # ~900 entries in one GET
_RB_HEADER = struct.Struct(">qiiBIhiqqqhii")  # Kafka RecordBatch v2 header, 61 bytes
_I32_END = 2**31  # partitions and batch sizes are int32 in the footer


class BatchMeta(NamedTuple):
    """Fields of a RecordBatch header the index keeps (so fetch need not parse batches).

    A NamedTuple rather than a frozen dataclass: the produce path builds one per
    batch, and a tuple is built in one step (a frozen dataclass sets each field
    through ``object.__setattr__``)."""

    record_count: int
    max_timestamp: int
    base_timestamp: int
    last_offset_delta: int
    producer_id: int = -1
    producer_epoch: int = -1
    base_sequence: int = -1
    attributes: int = 0

    @classmethod
    def from_record_batch(cls, batch: bytes | memoryview) -> BatchMeta:
        """Read the fields from a v2 RecordBatch header (no CRC check: the codec's job)."""
        if len(batch) < _RB_HEADER.size:
            raise ValueError(f"record batch shorter than its header: {len(batch)} bytes")
        (_, _, _, magic, _, attrs, lod, base_ts, max_ts, pid, epoch, seq, count) = (
            _RB_HEADER.unpack_from(batch)
        )
        if magic != 2:
            raise ValueError(f"record batch magic {magic}, expected 2")
        return cls(count, max_ts, base_ts, lod, pid, epoch, seq, attrs)


class SegmentEntry(NamedTuple):
    """One batch's place in a segment object, plus its header fields (a NamedTuple,
    like :class:`BatchMeta`: :meth:`SegmentBuilder.finish` makes one per batch)."""

    topic_id: uuid.UUID
    partition: int
    byte_pos: int
    byte_len: int
    record_count: int
    max_timestamp: int
    base_timestamp: int
    last_offset_delta: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    attributes: int = 0

    @property
    def meta(self) -> BatchMeta:
        return BatchMeta(
            self.record_count,
            self.max_timestamp,
            self.base_timestamp,
            self.last_offset_delta,
            self.producer_id,
            self.producer_epoch,
            self.base_sequence,
            self.attributes,
        )


class BatchRow(Protocol):
    """What :meth:`SegmentBuilder.extend` reads of each row (the produce pipeline's items)."""

    @property
    def topic_id(self) -> uuid.UUID: ...
    @property
    def partition(self) -> int: ...
    @property
    def batch(self) -> bytes | memoryview: ...
    @property
    def meta(self) -> BatchMeta: ...


class SegmentBuilder:
    """Accumulates batches for one segment object; not thread-safe (one per batcher)."""

    def __init__(self) -> None:
        # topic id's int -> partition -> indexes of its batches. The int is a plain slot
        # (``UUID.bytes`` and ``UUID.__hash__`` are Python code, paid per batch) and sorts
        # as the id's bytes; one dict per topic spares a key tuple and its hash per batch.
        self._groups: dict[int, dict[int, list[int]]] = {}
        self._batches: list[tuple[uuid.UUID, int, bytes | memoryview, BatchMeta]] = []
        self._data_bytes = 0

    def add(
        self,
        topic_id: uuid.UUID,
        partition: int,
        batch: bytes | memoryview,
        meta: BatchMeta,
        *,
        copy: bool = True,
    ) -> int:
        """Append a batch; returns its index in :meth:`finish`'s entry list.

        The bytes are copied unless already ``bytes``, so callers may reuse
        their receive buffer right after this returns. With ``copy=False`` a
        memoryview is kept as is (the caller promises not to change the
        buffer until :meth:`finish`): the batch is then copied once, by finish.
        """
        if not 0 <= partition < _I32_END:
            raise ValueError(f"partition out of range: {partition}")
        data = batch if (not copy or isinstance(batch, bytes)) else bytes(batch)
        n = len(data)
        if not 0 < n < _I32_END:
            raise ValueError(f"batch size out of range: {n} bytes")
        batches = self._batches
        index = len(batches)
        batches.append((topic_id, partition, data, meta))
        by_partition = self._groups.setdefault(topic_id.int, {})
        group = by_partition.get(partition)
        if group is None:
            by_partition[partition] = [index]
        else:
            group.append(index)
        self._data_bytes += n
        return index

    def extend(self, rows: Iterable[BatchRow]) -> None:
        """:meth:`add` with ``copy=False`` for each row, in one call: the produce path
        adds a request's batches at once (at 1,000 partitions ~100 of one record each),
        so the per-batch work is one loop step, not a call. Rows before a refused one
        stay added, as with a loop of :meth:`add`."""
        batches, groups = self._batches, self._groups
        add_batch = batches.append
        index = len(batches)
        total = 0
        last_topic: uuid.UUID | None = None
        by_partition: dict[int, list[int]] = {}
        try:
            for row in rows:
                topic_id, partition, data = row.topic_id, row.partition, row.batch
                n = len(data)
                if not (0 <= partition < _I32_END and 0 < n < _I32_END):
                    if not 0 <= partition < _I32_END:
                        raise ValueError(f"partition out of range: {partition}")
                    raise ValueError(f"batch size out of range: {n} bytes")
                if topic_id is not last_topic:  # a request's batches are mostly one topic's
                    last_topic, by_partition = topic_id, groups.setdefault(topic_id.int, {})
                add_batch((topic_id, partition, data, row.meta))
                group = by_partition.get(partition)
                if group is None:
                    by_partition[partition] = [index]
                else:
                    group.append(index)
                index += 1
                total += n
        finally:
            self._data_bytes += total

    def partitions(self) -> list[tuple[uuid.UUID, int]]:
        """The distinct (topic id, partition) pairs added so far."""
        batches = self._batches
        return [(batches[g[0]][0], p) for ps in self._groups.values() for p, g in ps.items()]

    def __len__(self) -> int:
        return len(self._batches)

    @property
    def size(self) -> int:
        """Bytes the finished object will take (header + batches + footer + trailer)."""
        return (
            HEADER_SIZE
            + self._data_bytes
            + _COUNT.size
            + ENTRY_SIZE * len(self._batches)
            + TRAILER_SIZE
        )

    def finish(self) -> tuple[bytes, list[SegmentEntry]]:
        """Lay out the object. ``entries[i]`` describes the i-th :meth:`add` call."""
        parts: list[bytes | memoryview] = [HEADER]
        batches = self._batches
        entries: list[SegmentEntry | None] = [None] * len(batches)
        # The footer is packed here, entry by entry in byte order, from the topic's
        # int in the group key (UUID.bytes is Python code): once per partition. It is
        # sized up front and packed in place (no bytes object per entry).
        footer = bytearray(_COUNT.size + ENTRY_SIZE * len(batches))
        _COUNT.pack_into(footer, 0, len(batches))
        pack_into, new = _ENTRY.pack_into, tuple.__new__  # SegmentEntry._make is a Python frame
        add_part = parts.append
        pos, at = HEADER_SIZE, _COUNT.size
        groups = self._groups
        for tint in sorted(groups):
            tbytes = tint.to_bytes(16, "big")  # UUID.bytes
            by_partition = groups[tint]
            for partition in sorted(by_partition):
                for index in by_partition[partition]:
                    topic_id, _, data, m = batches[index]
                    n = len(data)
                    add_part(data)
                    entries[index] = new(SegmentEntry, (topic_id, partition, pos, n, *m))
                    pack_into(footer, at, tbytes, partition, pos, n, *m)
                    at += ENTRY_SIZE
                    pos += n
        body = bytes(footer)
        parts.append(body)
        parts.append(_TRAILER.pack(len(body), google_crc32c.value(body), HEADER))
        return b"".join(parts), entries  # type: ignore[return-value]  # every index was set


def encode_footer(entries: list[SegmentEntry]) -> bytes:
    """The footer body (count + entries) for entries in byte_pos order."""
    out = bytearray(_COUNT.pack(len(entries)))
    for e in entries:
        out += _ENTRY.pack(
            e.topic_id.bytes,
            e.partition,
            e.byte_pos,
            e.byte_len,
            e.record_count,
            e.max_timestamp,
            e.base_timestamp,
            e.last_offset_delta,
            e.producer_id,
            e.producer_epoch,
            e.base_sequence,
            e.attributes,
        )
    return bytes(out)
