"""Kafka record batches rebuilt from Parquet rows, vectorised (no per-record Python).

Where it sits: when the compactor has moved a partition's data into Parquet,
the agent's fetch path serves Kafka consumers from those rows. Rebuilding is
split in two so that its costly part is done once per row group and cached:

* :func:`encode_rows` - the part of every record that does not depend on the
  batch it ends up in: ``keyLength key valueLength value headerCount headers``
  (Kafka's record layout after ``offsetDelta``), built with pyarrow compute
  and numpy over whole columns. Held as :class:`EncodedRows`.
* :func:`build_batch` - one batch for a span of rows: the per-record head
  (``length attributes timestampDelta offsetDelta``) as numpy varints, joined
  with the cached tails by ``binary_join_element_wise``, the 61-byte header,
  the CRC32C. :class:`BatchHeader` carries the producer fields, transactional
  flag and codec to write, so a batch can be rebuilt with the producer's
  original ones (the Iceberg work keeps them per batch); by default it is an
  uncompressed batch without producer id, as before.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import crc32c
import numpy as np

from kafka_protocol.compression import Compression, compress
from kafka_protocol.records import (
    ATTR_TIMESTAMP_TYPE,
    ATTR_TRANSACTIONAL,
    CRC_OFFSET,
    CRC_START,
    MIN_BATCH_LENGTH,
    RECORD_BATCH_OVERHEAD,
)

if TYPE_CHECKING:
    import pyarrow as pa

_HEADER = struct.Struct(">qiibIhiqqqhii")
_MAX_VARINT = 10


class SpanMismatch(ValueError):
    """Rows encoded for some batches were asked for another (re-encode without spans)."""


@dataclass(frozen=True, slots=True)
class BatchHeader:
    """Producer fields and codec of a rebuilt batch (defaults: none, uncompressed)."""

    producer_id: int = -1
    producer_epoch: int = -1
    base_sequence: int = -1
    is_transactional: bool = False
    codec: Compression = Compression.NONE
    partition_leader_epoch: int = 0
    # The original header timestamps (None: the rows' first and largest).
    base_timestamp: int | None = None
    max_timestamp: int | None = None

    @classmethod
    def from_info(cls, info: Any) -> BatchHeader:
        """From an :class:`objectstore.parquet.BatchInfo` kept in the file's footer."""
        return cls(
            info.producer_id,
            info.producer_epoch,
            info.base_sequence,
            bool(info.attributes & ATTR_TRANSACTIONAL),
            Compression(info.attributes & 0x07)
            if info.attributes & 0x07 <= 4
            else Compression.NONE,
            info.partition_leader_epoch,
            info.base_timestamp if info.base_timestamp >= 0 else None,
            info.max_timestamp if info.max_timestamp >= 0 else None,
        )


@dataclass(frozen=True, slots=True)
class EncodedRows:
    """Rows of one Parquet row group (in offset order), each record's tail encoded."""

    offsets: np.ndarray  # int64
    timestamps: np.ndarray  # int64, ms
    log_append: np.ndarray  # bool: timestampType 1
    # The tail's pieces, one binary array each (keyLength, key, valueLength, value,
    # headers): joined only when a batch is built, so the data is copied once.
    pieces: tuple[Any, ...]
    tail_len: np.ndarray  # int64, bytes of each row's tail
    # With the batch spans known at encoding (the object's batch rows), whole records
    # are encoded once against their batch's base offset and timestamp: a batch is
    # then a slice of ``records`` plus a header (the pieces are dropped).
    records: Any = None  # pa.BinaryArray
    rec_base: np.ndarray | None = None  # int64, base offset each record was encoded for
    rec_base_ts: np.ndarray | None = None  # int64, base timestamp used

    @property
    def nbytes(self) -> int:
        """Memory held (buffer sizes: O(1), unlike ``Array.nbytes``)."""
        held = sum(p.get_total_buffer_size() for p in self.pieces)
        if self.records is not None:
            held += self.records.get_total_buffer_size()
        return int(held + self.offsets.nbytes * 6)

    def __len__(self) -> int:
        return len(self.offsets)

    def span(self, first: int, last: int) -> tuple[int, int]:
        """Row indexes ``[i0, i1)`` of offsets ``first..last``."""
        i0 = int(np.searchsorted(self.offsets, first, "left"))
        return i0, int(np.searchsorted(self.offsets, last, "right"))

    def rows(self, i0: int, i1: int) -> EncodedRows:
        """Rows ``[i0, i1)`` (zero-copy slices)."""
        n = i1 - i0
        return EncodedRows(
            self.offsets[i0:i1],
            self.timestamps[i0:i1],
            self.log_append[i0:i1],
            tuple(p.slice(i0, n) for p in self.pieces),
            self.tail_len[i0:i1],
            None if self.records is None else self.records.slice(i0, n),
            None if self.rec_base is None else self.rec_base[i0:i1],
            None if self.rec_base_ts is None else self.rec_base_ts[i0:i1],
        )

    @staticmethod
    def concat(parts: list[EncodedRows]) -> EncodedRows:
        """Rows of consecutive row groups as one run (a batch may straddle two)."""
        import pyarrow as pa

        if len(parts) == 1:
            return parts[0]
        return EncodedRows(
            np.concatenate([p.offsets for p in parts]),
            np.concatenate([p.timestamps for p in parts]),
            np.concatenate([p.log_append for p in parts]),
            tuple(
                pa.concat_arrays([p.pieces[j] for p in parts]) for j in range(len(parts[0].pieces))
            ),
            np.concatenate([p.tail_len for p in parts]),
            None
            if any(p.records is None for p in parts)
            else pa.concat_arrays([p.records for p in parts]),
            None
            if any(p.rec_base is None for p in parts)
            else np.concatenate([p.rec_base for p in parts]),
            None
            if any(p.rec_base_ts is None for p in parts)
            else np.concatenate([p.rec_base_ts for p in parts]),
        )


def zigzag_varints(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Kafka's zigzag varints of int64 ``values``: ``(bytes (n, 10) uint8, lengths)``;
    row ``i``'s encoding is ``bytes[i, :lengths[i]]``."""
    v = values.astype(np.int64)
    z = ((v << 1) ^ (v >> 63)).view(np.uint64)
    n = len(z)
    out = np.zeros((n, _MAX_VARINT), dtype=np.uint8)
    lengths = np.ones(n, dtype=np.int64)
    rest = z.copy()
    for k in range(_MAX_VARINT):
        more = rest >= 0x80
        out[:, k] = (rest & np.uint64(0x7F)).astype(np.uint8) | (more.astype(np.uint8) << 7)
        rest = rest >> np.uint64(7)
        if not more.any():
            break
        lengths += more
    return out, lengths


def _packed(pieces: list[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    """Concatenate per-row byte pieces ``(matrix, lengths)`` row by row: ``(data, offsets)``."""
    mats = np.concatenate([m for m, _ in pieces], axis=1)
    masks = np.concatenate(
        [np.arange(m.shape[1])[None, :] < ln[:, None] for m, ln in pieces], axis=1
    )
    data = mats[masks]
    lengths = sum((ln for _, ln in pieces), np.zeros(len(pieces[0][1]), dtype=np.int64))
    offsets = np.zeros(len(lengths) + 1, dtype=np.int32)
    np.cumsum(lengths, out=offsets[1:])
    return data, offsets


def _binary(data: np.ndarray, offsets: np.ndarray) -> pa.Array:
    import pyarrow as pa

    return pa.Array.from_buffers(
        pa.binary(),
        len(offsets) - 1,
        [None, pa.py_buffer(offsets.astype(np.int32)), pa.py_buffer(data)],
    )


def _lengths(arr: pa.Array) -> np.ndarray:
    """Byte lengths of a binary/string array, -1 for nulls."""
    import pyarrow.compute as pc

    n = pc.binary_length(arr).fill_null(-1)
    return np.asarray(n.to_numpy(zero_copy_only=False), dtype=np.int64)


def _offsets(arr: pa.Array) -> np.ndarray:
    """The int32 value offsets of a binary array (slices included)."""
    off = np.frombuffer(arr.buffers()[1], dtype=np.int32)
    return off[arr.offset : arr.offset + len(arr) + 1]


def _varint_array(values: np.ndarray) -> pa.Array:
    return _binary(*_packed([zigzag_varints(values)]))


def _col(table: pa.Table, name: str) -> pa.Array:
    col = table[name]
    return col.chunk(0) if col.num_chunks == 1 else col.combine_chunks()


def _no_nulls(arr: pa.Array) -> pa.Array:
    """Nulls as empty values (their length prefix says -1); no copy when there are none."""
    return arr.fill_null(b"") if arr.null_count else arr


def _join(*arrays: pa.Array) -> pa.Array:
    import pyarrow as pa
    import pyarrow.compute as pc

    cast = [a.cast(pa.binary()) if a.type != pa.binary() else a for a in arrays]
    return pc.binary_join_element_wise(*cast, b"")


def _headers(headers: pa.Array) -> pa.Array:
    """``headerCount headers...`` per row from ``list<struct<key string, value binary>>``."""
    import pyarrow as pa
    import pyarrow.compute as pc

    lists = headers.fill_null(pa.scalar([], headers.type)) if headers.null_count else headers
    if isinstance(lists, pa.ChunkedArray):
        lists = lists.combine_chunks()
    counts = np.asarray(pc.list_value_length(lists).to_numpy(zero_copy_only=False), np.int64)
    flat = lists.flatten()
    if len(flat) == 0:
        return _varint_array(counts)
    hk, hv = flat.field("key"), flat.field("value")
    one = _join(
        _varint_array(_lengths(hk)),
        hk.fill_null(""),
        _varint_array(_lengths(hv)),
        hv.fill_null(b""),
    )
    offs = lists.offsets
    base = offs[0].as_py()
    per_row = pa.ListArray.from_arrays(pc.subtract(offs, base), one)
    joined = pc.binary_join(per_row, b"")
    return _join(_varint_array(counts), joined)


def encode_rows(table: pa.Table, spans: Sequence[tuple[int, int]] | None = None) -> EncodedRows:
    """The records of ``table`` (Kafka schema, offset order), encoded.

    Without ``spans``: each record's tail (what does not depend on its batch).
    With ``spans`` (``(base offset, base timestamp)`` of every batch the rows
    belong to, sorted): whole records, encoded once for their batch."""
    import pyarrow as pa

    key = _col(table, "key")
    value = _col(table, "value")
    klen, vlen = _lengths(key), _lengths(value)
    pieces = [
        _varint_array(klen),
        _no_nulls(key),
        _varint_array(vlen),
        _no_nulls(value),
        _headers(_col(table, "headers"))
        if "headers" in table.column_names
        else _varint_array(np.zeros(table.num_rows, np.int64)),
    ]
    tail_len = sum(
        (np.diff(_offsets(p).astype(np.int64)) for p in pieces),
        np.zeros(table.num_rows, np.int64),
    )
    ts = _col(table, "timestamp").cast(pa.int64()).to_numpy(zero_copy_only=False)
    types = _col(table, "timestampType").to_numpy(zero_copy_only=False)
    offsets = np.asarray(_col(table, "offset").to_numpy(zero_copy_only=False), np.int64)
    stamps = np.asarray(ts, np.int64) // 1000
    append = np.asarray(types) == 1
    if not spans or len(offsets) == 0:
        return EncodedRows(offsets, stamps, append, tuple(pieces), tail_len)
    bases = np.asarray([b for b, _ in spans], np.int64)
    base_ts = np.asarray([t for _, t in spans], np.int64)
    idx = np.searchsorted(bases, offsets, "right") - 1
    if (idx < 0).any():
        return EncodedRows(offsets, stamps, append, tuple(pieces), tail_len)
    rec_base, rec_base_ts = bases[idx], base_ts[idx]
    heads = _heads(offsets - rec_base, np.where(append, 0, stamps - rec_base_ts), tail_len)
    records = _join(heads, *pieces)
    return EncodedRows(offsets, stamps, append, (), tail_len, records, rec_base, rec_base_ts)


def _heads(off_delta: np.ndarray, ts_delta: np.ndarray, tail_len: np.ndarray) -> pa.Array:
    """``length attributes timestampDelta offsetDelta`` of each record."""
    n = len(off_delta)
    ts_var = zigzag_varints(ts_delta)
    off_var = zigzag_varints(off_delta)
    body_len = 1 + ts_var[1] + off_var[1] + tail_len
    attr = (np.zeros((n, 1), np.uint8), np.ones(n, np.int64))
    return _binary(*_packed([zigzag_varints(body_len), attr, ts_var, off_var]))


def build_batch(
    rows: EncodedRows,
    i0: int,
    i1: int,
    base_offset: int,
    last_offset: int,
    header: BatchHeader | None = None,
) -> bytes:
    """One Kafka batch of rows ``[i0, i1)`` spanning offsets ``base..last``
    (``lastOffsetDelta`` is the span's, so a batch whose tail was compacted away
    still ends where it did)."""
    h = header or BatchHeader()
    n = i1 - i0
    if n <= 0:
        raise ValueError("a batch needs at least one row")
    ts = rows.timestamps[i0:i1]
    append = bool(rows.log_append[i0])
    if (
        rows.records is not None
        and rows.rec_base is not None
        and rows.rec_base_ts is not None
        and rows.rec_base[i0] == base_offset
        and rows.rec_base[i1 - 1] == base_offset
    ):
        # Encoded for this very batch: a slice of the row group's records.
        base_ts = int(rows.rec_base_ts[i0])
        recs = rows.records.slice(i0, n)
    elif rows.pieces:
        base_ts = int(ts[0]) if h.base_timestamp is None or append else h.base_timestamp
        tail_len = rows.tail_len[i0:i1]
        heads = _heads(
            rows.offsets[i0:i1] - base_offset,
            np.zeros(n, np.int64) if append else ts - base_ts,
            tail_len,
        )
        recs = _join(heads, *(p.slice(i0, n) for p in rows.pieces))
    else:
        raise SpanMismatch(f"rows were encoded for other batches than {base_offset}..{last_offset}")
    offs = _offsets(recs)
    lo, hi = int(offs[0]), int(offs[-1])
    records = memoryview(recs.buffers()[2])[lo:hi]
    payload = compress(h.codec, records) if h.codec != Compression.NONE else records
    attributes = int(h.codec)
    if append:
        attributes |= ATTR_TIMESTAMP_TYPE
    if h.is_transactional:
        attributes |= ATTR_TRANSACTIONAL
    head = bytearray(RECORD_BATCH_OVERHEAD)
    _HEADER.pack_into(
        head,
        0,
        base_offset,
        MIN_BATCH_LENGTH + len(payload),
        h.partition_leader_epoch,
        2,
        0,
        attributes,
        last_offset - base_offset,
        base_ts,
        int(ts.max()) if h.max_timestamp is None else h.max_timestamp,
        h.producer_id,
        h.producer_epoch,
        h.base_sequence,
        n,
    )
    # CRC32C over [attributes, end): the header's tail, then the records in place.
    crc = crc32c.crc32c(payload, value=crc32c.crc32c(bytes(head[CRC_START:])))
    struct.pack_into(">I", head, CRC_OFFSET, crc)
    return b"".join((head, payload))  # the records are copied once


def batches_for_spans(
    rows: EncodedRows,
    spans: list[tuple[int, int]],
    header: BatchHeader | None = None,
    headers: dict[int, BatchHeader] | None = None,
) -> list[bytes | None]:
    """One batch per ``(base, last)`` span (None where the span has no row);
    ``headers`` (by base offset) override ``header``."""
    out: list[bytes | None] = []
    for base, last in spans:
        i0, i1 = rows.span(base, last)
        h = (headers or {}).get(base, header)
        out.append(build_batch(rows, i0, i1, base, last, h) if i1 > i0 else None)
    return out
