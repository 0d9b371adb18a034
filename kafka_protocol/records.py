"""RecordBatch v2 (magic 2): a zero-copy view, in-place offset patching, a builder.

Where it sits: the produce handler wraps each incoming batch in a
:class:`RecordBatchView` and calls :meth:`~RecordBatchView.validate` (magic,
sizes, CRC32C) without decoding records; batches are stored as bytes with
whatever base offset the client sent. The fetch path copies stored batches
into the response and calls :func:`patch_base_offset` / :func:`rebase_batches`
to write the offsets the metastore assigned (baseOffset and
partitionLeaderEpoch lie before the CRC'd range, so no CRC is recomputed).
Only the compactor and the Spark source decode records, through
:meth:`RecordBatchView.records`, with a decompression cap.

Batch header (61 bytes, big-endian)::

    0  baseOffset            int64      -- not covered by the CRC
    8  batchLength           int32      -- bytes after this field
    12 partitionLeaderEpoch  int32      -- not covered by the CRC
    16 magic                 int8  (2)
    17 crc                   uint32     -- CRC32C of bytes [21, end)
    21 attributes            int16
    23 lastOffsetDelta       int32
    27 baseTimestamp         int64
    35 maxTimestamp          int64
    43 producerId            int64
    51 producerEpoch         int16
    53 baseSequence          int32
    57 recordsCount          int32
    61 records...

Record: length varint, attributes int8, timestampDelta varlong, offsetDelta
varint, keyLength varint (-1 = null), key, valueLength varint, value, header
count varint, headers (keyLength varint, key utf-8, valueLength varint, value).
"""

from __future__ import annotations

import struct
import time
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, NamedTuple

import google_crc32c

from .compression import DEFAULT_MAX_DECOMPRESSED_BYTES, Compression, compress, decompress
from .exceptions import CorruptRecordError, DecodeError, UnsupportedMagic
from .varint import encode_varint, encode_varlong, read_varint, read_varlong

__all__ = [
    "ATTR_COMPRESSION_MASK",
    "ATTR_CONTROL",
    "ATTR_DELETE_HORIZON",
    "ATTR_TIMESTAMP_TYPE",
    "ATTR_TRANSACTIONAL",
    "BASE_OFFSET_OFFSET",
    "BATCH_LENGTH_OFFSET",
    "CRC_OFFSET",
    "CRC_START",
    "LOG_OVERHEAD",
    "MAGIC_OFFSET",
    "MAGIC_V2",
    "MIN_BATCH_LENGTH",
    "PARTITION_LEADER_EPOCH_OFFSET",
    "RECORD_BATCH_OVERHEAD",
    "TIMESTAMP_CREATE_TIME",
    "TIMESTAMP_LOG_APPEND_TIME",
    "Record",
    "RecordBatchBuilder",
    "RecordBatchView",
    "assign_base_offsets",
    "iter_batches",
    "patch_base_offset",
    "patch_partition_leader_epoch",
    "rebase_batches",
]

# ---------------------------------------------------------------- layout constants

BASE_OFFSET_OFFSET = 0
BATCH_LENGTH_OFFSET = 8
PARTITION_LEADER_EPOCH_OFFSET = 12
MAGIC_OFFSET = 16
CRC_OFFSET = 17
ATTRIBUTES_OFFSET = 21
CRC_START = ATTRIBUTES_OFFSET  # the CRC covers [attributes, end of batch)
LAST_OFFSET_DELTA_OFFSET = 23
BASE_TIMESTAMP_OFFSET = 27
MAX_TIMESTAMP_OFFSET = 35
PRODUCER_ID_OFFSET = 43
PRODUCER_EPOCH_OFFSET = 51
BASE_SEQUENCE_OFFSET = 53
RECORDS_COUNT_OFFSET = 57
RECORD_BATCH_OVERHEAD = 61
LOG_OVERHEAD = 12  # baseOffset + batchLength: the part batchLength does not count
MIN_BATCH_LENGTH = RECORD_BATCH_OVERHEAD - LOG_OVERHEAD
MAGIC_V2 = 2

ATTR_COMPRESSION_MASK = 0x07
ATTR_TIMESTAMP_TYPE = 0x08
ATTR_TRANSACTIONAL = 0x10
ATTR_CONTROL = 0x20
ATTR_DELETE_HORIZON = 0x40  # KIP-534: baseTimestamp holds the delete horizon

TIMESTAMP_CREATE_TIME = 0
TIMESTAMP_LOG_APPEND_TIME = 1

# The smallest possible record: length, attributes, timestampDelta, offsetDelta,
# keyLength, valueLength, headerCount, one byte each.
MIN_RECORD_SIZE = 7

_HEADER = struct.Struct(">qiibIhiqqqhii")
assert _HEADER.size == RECORD_BATCH_OVERHEAD
_I64 = struct.Struct(">q")
_I32 = struct.Struct(">i")
_U32 = struct.Struct(">I")

# Indexes into the unpacked header tuple.
_H_BASE_OFFSET, _H_BATCH_LENGTH, _H_PLE, _H_MAGIC, _H_CRC, _H_ATTRS = range(6)
_H_LAST_DELTA, _H_BASE_TS, _H_MAX_TS, _H_PID, _H_PEPOCH, _H_BASE_SEQ, _H_COUNT = range(6, 13)

_OLD_MAGIC_MESSAGE = (
    "message format v0/v1 is not supported, use a client with magic v2 (Kafka >= 0.11)"
)


def _as_bytes_view(data: bytes | bytearray | memoryview) -> memoryview:
    mv = memoryview(data)
    if mv.format != "B" or mv.ndim != 1:
        mv = mv.cast("B")
    return mv


def _check_magic(magic: int) -> None:
    if magic == MAGIC_V2:
        return
    if magic in (0, 1):
        raise UnsupportedMagic(f"{_OLD_MAGIC_MESSAGE} (got magic {magic})")
    raise CorruptRecordError(f"unknown record batch magic {magic}")


_crc32c_buf: Any
try:  # the `crc32c` package (hardware CRC) takes any buffer: no copy of the batch
    from crc32c import crc32c as _crc32c_buf
except ImportError:  # pragma: no cover - optional speed-up
    _crc32c_buf = None


def _crc32c(view: memoryview) -> int:
    if _crc32c_buf is not None:
        return int(_crc32c_buf(view))
    # google_crc32c's C extension only accepts read-only buffers that need no
    # release (it parses with "y#"), so a memoryview has to be copied.
    return int(google_crc32c.value(view.tobytes()))


class Record(NamedTuple):
    """One decoded record, with absolute offset and timestamp."""

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]]
    attributes: int = 0


class RecordBatchView:
    """A read-only view over exactly one v2 record batch.

    The constructor checks the structure (at least 61 bytes, magic 2,
    batchLength equal to the buffer, known codec) so properties never fail;
    :meth:`validate` checks the CRC and counts. Nothing is copied: the view
    keeps a memoryview of the caller's buffer.
    """

    __slots__ = ("_buf", "_h")

    def __init__(self, data: bytes | bytearray | memoryview) -> None:
        buf = _as_bytes_view(data)
        n = len(buf)
        if n <= MAGIC_OFFSET:
            raise CorruptRecordError(f"record batch too short: {n} bytes")
        magic = buf[MAGIC_OFFSET]
        _check_magic(magic - 256 if magic > 127 else magic)
        if n < RECORD_BATCH_OVERHEAD:
            raise CorruptRecordError(
                f"record batch too short: {n} bytes, header needs {RECORD_BATCH_OVERHEAD}"
            )
        h = _HEADER.unpack_from(buf, 0)
        if h[_H_BATCH_LENGTH] + LOG_OVERHEAD != n:
            raise CorruptRecordError(
                f"batchLength {h[_H_BATCH_LENGTH]} does not match the {n}-byte buffer "
                f"(expected {n - LOG_OVERHEAD})"
            )
        if h[_H_ATTRS] & ATTR_COMPRESSION_MASK > Compression.ZSTD:
            raise CorruptRecordError(
                f"unknown compression codec {h[_H_ATTRS] & ATTR_COMPRESSION_MASK}"
            )
        self._buf = buf
        self._h = h

    @classmethod
    def at(cls, data: bytes | bytearray | memoryview, pos: int = 0) -> RecordBatchView:
        """The batch starting at ``pos`` of a larger buffer (length read from its header)."""
        buf = _as_bytes_view(data)
        if pos < 0 or len(buf) - pos < LOG_OVERHEAD:
            raise CorruptRecordError(f"no record batch header at position {pos}")
        (length,) = _I32.unpack_from(buf, pos + BATCH_LENGTH_OFFSET)
        if length < 0 or pos + LOG_OVERHEAD + length > len(buf):
            raise CorruptRecordError(f"batchLength {length} at position {pos} exceeds the buffer")
        return cls(buf[pos : pos + LOG_OVERHEAD + length])

    # ----------------------------------------------------------- header fields

    @property
    def buffer(self) -> memoryview:
        """The batch's bytes (a view of the caller's buffer)."""
        return self._buf

    @property
    def base_offset(self) -> int:
        return int(self._h[_H_BASE_OFFSET])

    @property
    def batch_length(self) -> int:
        return int(self._h[_H_BATCH_LENGTH])

    @property
    def partition_leader_epoch(self) -> int:
        return int(self._h[_H_PLE])

    @property
    def magic(self) -> int:
        return int(self._h[_H_MAGIC])

    @property
    def crc(self) -> int:
        return int(self._h[_H_CRC])

    @property
    def attributes(self) -> int:
        return int(self._h[_H_ATTRS])

    @property
    def compression(self) -> Compression:
        return Compression(self._h[_H_ATTRS] & ATTR_COMPRESSION_MASK)

    @property
    def timestamp_type(self) -> int:
        """0 = CreateTime, 1 = LogAppendTime."""
        return 1 if self._h[_H_ATTRS] & ATTR_TIMESTAMP_TYPE else 0

    @property
    def is_transactional(self) -> bool:
        return bool(self._h[_H_ATTRS] & ATTR_TRANSACTIONAL)

    @property
    def is_control(self) -> bool:
        return bool(self._h[_H_ATTRS] & ATTR_CONTROL)

    @property
    def has_delete_horizon(self) -> bool:
        return bool(self._h[_H_ATTRS] & ATTR_DELETE_HORIZON)

    @property
    def last_offset_delta(self) -> int:
        return int(self._h[_H_LAST_DELTA])

    @property
    def base_timestamp(self) -> int:
        """The first timestamp (or the delete horizon if :attr:`has_delete_horizon`)."""
        return int(self._h[_H_BASE_TS])

    @property
    def max_timestamp(self) -> int:
        return int(self._h[_H_MAX_TS])

    @property
    def producer_id(self) -> int:
        return int(self._h[_H_PID])

    @property
    def producer_epoch(self) -> int:
        return int(self._h[_H_PEPOCH])

    @property
    def base_sequence(self) -> int:
        return int(self._h[_H_BASE_SEQ])

    @property
    def records_count(self) -> int:
        return int(self._h[_H_COUNT])

    @property
    def last_offset(self) -> int:
        return int(self._h[_H_BASE_OFFSET] + self._h[_H_LAST_DELTA])

    @property
    def next_offset(self) -> int:
        return self.last_offset + 1

    @property
    def size(self) -> int:
        """Total bytes of the batch, header included (batchLength + 12)."""
        return len(self._buf)

    @property
    def payload(self) -> memoryview:
        """The records section, compressed as the attributes say."""
        return self._buf[RECORD_BATCH_OVERHEAD:]

    def __repr__(self) -> str:
        return (
            f"RecordBatchView(base_offset={self.base_offset}, count={self.records_count}, "
            f"size={self.size}, compression={self.compression.name}, control={self.is_control})"
        )

    # ----------------------------------------------------------- validation

    def compute_crc(self) -> int:
        return _crc32c(self._buf[CRC_START:])

    def validate(self) -> None:
        """Check the CRC32C and the counts; raise :class:`CorruptRecordError`.

        Does not decode records (that is :meth:`records`). Structure (size,
        magic, batchLength, codec) was already checked by the constructor.
        """
        h = self._h
        computed = self.compute_crc()
        if computed != h[_H_CRC]:
            raise CorruptRecordError(
                f"record batch CRC32C mismatch: stored 0x{h[_H_CRC]:08x}, computed 0x{computed:08x}"
            )
        count = h[_H_COUNT]
        if count < 0:
            raise CorruptRecordError(f"negative records count {count}")
        if h[_H_LAST_DELTA] < 0:
            raise CorruptRecordError(f"negative lastOffsetDelta {h[_H_LAST_DELTA]}")
        if (
            h[_H_ATTRS] & ATTR_COMPRESSION_MASK == 0
            and count > (len(self._buf) - RECORD_BATCH_OVERHEAD) // MIN_RECORD_SIZE
        ):
            raise CorruptRecordError(
                f"records count {count} cannot fit in {len(self._buf) - RECORD_BATCH_OVERHEAD} bytes"
            )

    # ----------------------------------------------------------- records

    def records(
        self, max_decompressed_bytes: int = DEFAULT_MAX_DECOMPRESSED_BYTES
    ) -> Iterator[Record]:
        """Decode the records, decompressing at most ``max_decompressed_bytes``.

        Raises :class:`DecodeError` subclasses on any malformation, including a
        count that does not match the records present. Control batches are
        decoded like others (their key holds version and type); callers that
        want data records only should skip batches with :attr:`is_control`.
        Does not check the CRC: call :meth:`validate` first for untrusted data.
        """
        h = self._h
        codec = h[_H_ATTRS] & ATTR_COMPRESSION_MASK
        if codec != 0 and h[_H_COUNT] == 0 and len(self._buf) == RECORD_BATCH_OVERHEAD:
            return iter(())  # an empty batch whose writer skipped the empty stream
        if codec == 0:
            if len(self._buf) - RECORD_BATCH_OVERHEAD > max_decompressed_bytes:
                raise CorruptRecordError(
                    f"records section exceeds the {max_decompressed_bytes}-byte limit"
                )
            # One copy of the records section: bytes index and slice much faster
            # than a memoryview, and key/value come out as bytes anyway.
            data = self._buf[RECORD_BATCH_OVERHEAD:].tobytes()
        else:
            data = decompress(codec, self.payload, max_decompressed_bytes)
        return _iter_records(
            data,
            count=h[_H_COUNT],
            base_offset=h[_H_BASE_OFFSET],
            base_timestamp=h[_H_BASE_TS],
            log_append_time=h[_H_MAX_TS] if h[_H_ATTRS] & ATTR_TIMESTAMP_TYPE else None,
        )


def _iter_records(
    data: bytes,
    *,
    count: int,
    base_offset: int,
    base_timestamp: int,
    log_append_time: int | None,
) -> Iterator[Record]:
    end = len(data)
    if count < 0 or count > end // MIN_RECORD_SIZE:
        raise CorruptRecordError(f"records count {count} cannot fit in {end} bytes")
    pos = 0
    i = 0
    try:
        for i in range(count):
            length, pos = read_varint(data, pos, end)
            if length < MIN_RECORD_SIZE - 1 or length > end - pos:
                raise CorruptRecordError(
                    f"record {i}: length {length} invalid with {end - pos} bytes left"
                )
            rec_end = pos + length
            attributes = data[pos]
            pos += 1
            ts_delta, pos = read_varlong(data, pos, rec_end)
            offset_delta, pos = read_varint(data, pos, rec_end)
            key_len, pos = read_varint(data, pos, rec_end)
            if key_len < 0:
                if key_len != -1:
                    raise CorruptRecordError(f"record {i}: negative key length {key_len}")
                key = None
            else:
                if key_len > rec_end - pos:
                    raise CorruptRecordError(f"record {i}: key length {key_len} exceeds record")
                key = data[pos : pos + key_len]
                pos += key_len
            value_len, pos = read_varint(data, pos, rec_end)
            if value_len < 0:
                if value_len != -1:
                    raise CorruptRecordError(f"record {i}: negative value length {value_len}")
                value = None
            else:
                if value_len > rec_end - pos:
                    raise CorruptRecordError(f"record {i}: value length {value_len} exceeds record")
                value = data[pos : pos + value_len]
                pos += value_len
            n_headers, pos = read_varint(data, pos, rec_end)
            if n_headers < 0 or n_headers > (rec_end - pos) // 2:
                raise CorruptRecordError(f"record {i}: invalid header count {n_headers}")
            headers: list[tuple[str, bytes | None]] = []
            for _ in range(n_headers):
                hk_len, pos = read_varint(data, pos, rec_end)
                if hk_len < 0 or hk_len > rec_end - pos:
                    raise CorruptRecordError(f"record {i}: invalid header key length {hk_len}")
                try:
                    hkey = data[pos : pos + hk_len].decode("utf-8")
                except UnicodeDecodeError as e:
                    raise CorruptRecordError(f"record {i}: header key is not UTF-8") from e
                pos += hk_len
                hv_len, pos = read_varint(data, pos, rec_end)
                if hv_len < 0:
                    if hv_len != -1:
                        raise CorruptRecordError(f"record {i}: negative header value length")
                    hval = None
                else:
                    if hv_len > rec_end - pos:
                        raise CorruptRecordError(f"record {i}: header value length exceeds record")
                    hval = data[pos : pos + hv_len]
                    pos += hv_len
                headers.append((hkey, hval))
            if pos != rec_end:
                raise CorruptRecordError(
                    f"record {i}: {rec_end - pos} unread bytes inside the declared length"
                )
            yield Record(
                base_offset + offset_delta,
                log_append_time if log_append_time is not None else base_timestamp + ts_delta,
                key,
                value,
                headers,
                attributes,
            )
    except CorruptRecordError:
        raise
    except DecodeError as e:  # a bad varint: report it as a corrupt record
        raise CorruptRecordError(f"record {i}: {e}") from e
    if pos != end:
        raise CorruptRecordError(f"{end - pos} bytes after the last of {count} records")


# ---------------------------------------------------------------- splitting


def iter_batches(
    data: bytes | bytearray | memoryview,
    *,
    allow_partial_tail: bool = False,
    validate: bool = False,
) -> Iterator[RecordBatchView]:
    """Split a concatenation of batches (a produce or fetch records blob).

    A truncated last batch raises :class:`CorruptRecordError` unless
    ``allow_partial_tail`` (fetch responses may end in a partial batch; it is
    then silently dropped). With ``validate`` each batch is also CRC-checked.
    Magic 0/1 raises :class:`UnsupportedMagic` as soon as it is seen.
    """
    buf = _as_bytes_view(data)
    n = len(buf)
    pos = 0
    while pos < n:
        remaining = n - pos
        if remaining > MAGIC_OFFSET:
            magic = buf[pos + MAGIC_OFFSET]
            _check_magic(magic - 256 if magic > 127 else magic)
        if remaining < LOG_OVERHEAD:
            if allow_partial_tail:
                return
            raise CorruptRecordError(f"truncated record batch: {remaining} trailing bytes")
        (length,) = _I32.unpack_from(buf, pos + BATCH_LENGTH_OFFSET)
        if length < MIN_BATCH_LENGTH:
            raise CorruptRecordError(f"batchLength {length} at position {pos} is too small")
        size = LOG_OVERHEAD + length
        if size > remaining:
            if allow_partial_tail:
                return
            raise CorruptRecordError(
                f"truncated record batch at position {pos}: {size} bytes declared, {remaining} left"
            )
        view = RecordBatchView(buf[pos : pos + size])
        if validate:
            view.validate()
        yield view
        pos += size


# ---------------------------------------------------------------- patching


def patch_base_offset(buf: bytearray | memoryview, pos: int, base_offset: int) -> None:
    """Write ``base_offset`` into the batch starting at ``pos`` (outside the CRC)."""
    _I64.pack_into(buf, pos + BASE_OFFSET_OFFSET, base_offset)


def stamp_log_append_time(buf: bytearray, timestamp: int) -> None:
    """Make the single batch in ``buf`` a LogAppendTime batch stamped ``timestamp``
    (the timestamp-type attribute and max timestamp, then the CRC), as a broker
    does for a topic with ``message.timestamp.type=LogAppendTime``: readers take
    every record's timestamp from the max timestamp."""
    (attrs,) = struct.unpack_from(">h", buf, ATTRIBUTES_OFFSET)
    struct.pack_into(">h", buf, ATTRIBUTES_OFFSET, attrs | ATTR_TIMESTAMP_TYPE)
    _I64.pack_into(buf, MAX_TIMESTAMP_OFFSET, timestamp)
    _U32.pack_into(buf, CRC_OFFSET, _crc32c(memoryview(buf)[CRC_START:]))


def patch_partition_leader_epoch(buf: bytearray | memoryview, pos: int, epoch: int) -> None:
    """Write the partition leader epoch of the batch at ``pos`` (outside the CRC)."""
    _I32.pack_into(buf, pos + PARTITION_LEADER_EPOCH_OFFSET, epoch)


def _walk_for_patch(buf: bytearray | memoryview) -> Iterator[tuple[int, int]]:
    """Yield ``(pos, lastOffsetDelta)`` of each whole batch; strict about structure."""
    view = _as_bytes_view(buf)
    n = len(view)
    pos = 0
    while pos < n:
        if n - pos < RECORD_BATCH_OVERHEAD:
            raise CorruptRecordError(f"truncated record batch at position {pos}")
        magic = view[pos + MAGIC_OFFSET]
        _check_magic(magic - 256 if magic > 127 else magic)
        (length,) = _I32.unpack_from(view, pos + BATCH_LENGTH_OFFSET)
        if length < MIN_BATCH_LENGTH or pos + LOG_OVERHEAD + length > n:
            raise CorruptRecordError(f"invalid batchLength {length} at position {pos}")
        (delta,) = _I32.unpack_from(view, pos + LAST_OFFSET_DELTA_OFFSET)
        if delta < 0:
            raise CorruptRecordError(f"negative lastOffsetDelta at position {pos}")
        yield pos, delta
        pos += LOG_OVERHEAD + length


def rebase_batches(
    buf: bytearray | memoryview,
    first_offset: int,
    *,
    partition_leader_epoch: int | None = None,
) -> int:
    """Give consecutive batches contiguous offsets starting at ``first_offset``.

    For a server that stores batches with a placeholder base offset: batch i
    gets the offset after the last offset of batch i-1. Optionally stamps the
    partition leader epoch too. Returns the next offset (last offset + 1). The
    buffer is walked before anything is written, so a malformed buffer is left
    untouched.
    """
    spans = list(_walk_for_patch(buf))
    offset = first_offset
    for pos, delta in spans:
        _I64.pack_into(buf, pos + BASE_OFFSET_OFFSET, offset)
        if partition_leader_epoch is not None:
            _I32.pack_into(buf, pos + PARTITION_LEADER_EPOCH_OFFSET, partition_leader_epoch)
        offset += delta + 1
    return offset


def assign_base_offsets(
    buf: bytearray | memoryview,
    base_offsets: Sequence[int],
    *,
    partition_leader_epoch: int | None = None,
) -> None:
    """Write ``base_offsets[i]`` into batch i, e.g. offsets read from the metastore
    when the batches in ``buf`` are not contiguous in the log. The number of
    batches must equal ``len(base_offsets)`` (``ValueError`` otherwise, before
    anything is written)."""
    spans = list(_walk_for_patch(buf))
    if len(spans) != len(base_offsets):
        raise ValueError(f"{len(spans)} batches in buffer but {len(base_offsets)} base offsets")
    for (pos, _), offset in zip(spans, base_offsets, strict=True):
        _I64.pack_into(buf, pos + BASE_OFFSET_OFFSET, offset)
        if partition_leader_epoch is not None:
            _I32.pack_into(buf, pos + PARTITION_LEADER_EPOCH_OFFSET, partition_leader_epoch)


# ---------------------------------------------------------------- builder


class RecordBatchBuilder:
    """Build one v2 batch (tests, compactor output). Not a hot path."""

    def __init__(
        self,
        compression: Compression | int = Compression.NONE,
        *,
        base_offset: int = 0,
        producer_id: int = -1,
        producer_epoch: int = -1,
        base_sequence: int = -1,
        is_transactional: bool = False,
        is_control: bool = False,
        timestamp_type: int = TIMESTAMP_CREATE_TIME,
        partition_leader_epoch: int = -1,
    ) -> None:
        if timestamp_type not in (TIMESTAMP_CREATE_TIME, TIMESTAMP_LOG_APPEND_TIME):
            raise ValueError(f"timestamp_type must be 0 or 1, not {timestamp_type}")
        self.compression = Compression(compression)
        self.base_offset = base_offset
        self.producer_id = producer_id
        self.producer_epoch = producer_epoch
        self.base_sequence = base_sequence
        self.is_transactional = is_transactional
        self.is_control = is_control
        self.timestamp_type = timestamp_type
        self.partition_leader_epoch = partition_leader_epoch
        self._records = bytearray()
        self._count = 0
        self._base_timestamp: int | None = None
        self._max_timestamp = -1
        self._last_offset_delta = -1

    def __len__(self) -> int:
        return self._count

    @property
    def uncompressed_size(self) -> int:
        return RECORD_BATCH_OVERHEAD + len(self._records)

    def append(
        self,
        key: bytes | None,
        value: bytes | None,
        headers: Iterable[tuple[str, bytes | None]] = (),
        timestamp_ms: int | None = None,
        offset_delta: int | None = None,
    ) -> int:
        """Add a record; returns its offset delta. Offsets must increase."""
        if timestamp_ms is None:
            timestamp_ms = int(time.time() * 1000)
        if offset_delta is None:
            offset_delta = self._last_offset_delta + 1
        elif offset_delta <= self._last_offset_delta:
            raise ValueError(
                f"offset delta {offset_delta} does not follow {self._last_offset_delta}"
            )
        if self._base_timestamp is None:
            self._base_timestamp = timestamp_ms
        body = bytearray(b"\x00")  # record attributes: unused, always 0
        body += encode_varlong(timestamp_ms - self._base_timestamp)
        body += encode_varint(offset_delta)
        _append_bytes(body, key)
        _append_bytes(body, value)
        header_list = list(headers)
        body += encode_varint(len(header_list))
        for hkey, hval in header_list:
            _append_bytes(body, hkey.encode("utf-8"))
            _append_bytes(body, hval)
        self._records += encode_varint(len(body))
        self._records += body
        self._count += 1
        self._last_offset_delta = offset_delta
        self._max_timestamp = max(self._max_timestamp, timestamp_ms)
        return offset_delta

    def build(self) -> bytes:
        """Serialise: compress the records, fill lengths and timestamps, CRC32C."""
        # Like Java, compressed batches always carry a compressed stream, even empty.
        payload = compress(self.compression, self._records)
        attributes = int(self.compression)
        if self.timestamp_type == TIMESTAMP_LOG_APPEND_TIME:
            attributes |= ATTR_TIMESTAMP_TYPE
        if self.is_transactional:
            attributes |= ATTR_TRANSACTIONAL
        if self.is_control:
            attributes |= ATTR_CONTROL
        base_ts = self._base_timestamp if self._base_timestamp is not None else -1
        header = bytearray(
            _HEADER.pack(
                self.base_offset,
                MIN_BATCH_LENGTH + len(payload),
                self.partition_leader_epoch,
                MAGIC_V2,
                0,  # CRC, filled below
                attributes,
                max(self._last_offset_delta, 0),
                base_ts,
                self._max_timestamp,
                self.producer_id,
                self.producer_epoch,
                self.base_sequence,
                self._count,
            )
        )
        crc = google_crc32c.extend(google_crc32c.value(bytes(header[CRC_START:])), payload)
        _U32.pack_into(header, CRC_OFFSET, crc)
        return bytes(header) + payload


def _append_bytes(out: bytearray, data: bytes | None) -> None:
    if data is None:
        out += b"\x01"  # zigzag(-1)
    else:
        out += encode_varint(len(data))
        out += data
