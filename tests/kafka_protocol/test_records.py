"""RecordBatch v2: builder <-> view round trips, validation, patching, kafka-python interop."""

from __future__ import annotations

import struct

import cramjam
import google_crc32c
import kafka.codec as kcodec
import pytest
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder
from kafka.record.legacy_records import LegacyRecordBatchBuilder
from kafka.record.memory_records import MemoryRecords

from kafka_protocol.compression import Compression
from kafka_protocol.exceptions import CorruptRecordError, DecompressionError, UnsupportedMagic
from kafka_protocol.records import (
    CRC_OFFSET,
    RECORD_BATCH_OVERHEAD,
    Record,
    RecordBatchBuilder,
    RecordBatchView,
    assign_base_offsets,
    iter_batches,
    patch_base_offset,
    patch_partition_leader_epoch,
    rebase_batches,
)

CODECS = list(Compression)
TS = 1_700_000_000_000


def _records(n: int) -> list[tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]]]]:
    out: list[tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]]]] = []
    for i in range(n):
        key = None if i % 5 == 0 else f"key-{i}".encode()
        value = None if i % 7 == 3 else (f"value-{i}-" * (i % 13)).encode()
        headers: list[tuple[str, bytes | None]] = []
        if i % 3 == 0:
            headers = [("h1", b"v1"), ("ключ", None), ("", b"")]
        out.append((key, value, headers))
    return out


def _build(codec: Compression, n: int, **kwargs: object) -> bytes:
    b = RecordBatchBuilder(codec, **kwargs)  # type: ignore[arg-type]
    for i, (k, v, h) in enumerate(_records(n)):
        b.append(k, v, h, timestamp_ms=TS + (i * 7) % 50 - 10)
    return b.build()


# ------------------------------------------------------------------ round trips


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("n", [1, 2, 500])
def test_round_trip(codec: Compression, n: int) -> None:
    data = _build(
        codec,
        n,
        base_offset=1000,
        producer_id=42,
        producer_epoch=3,
        base_sequence=17,
        partition_leader_epoch=9,
    )
    view = RecordBatchView(data)
    view.validate()
    assert view.magic == 2
    assert view.compression is codec
    assert view.base_offset == 1000
    assert view.records_count == n
    assert view.last_offset_delta == n - 1
    assert view.last_offset == 1000 + n - 1
    assert view.size == len(data) == view.batch_length + 12
    assert view.producer_id == 42 and view.producer_epoch == 3 and view.base_sequence == 17
    assert view.partition_leader_epoch == 9
    assert view.timestamp_type == 0 and not view.is_transactional and not view.is_control
    timestamps = [TS + (i * 7) % 50 - 10 for i in range(n)]
    assert view.base_timestamp == timestamps[0]
    assert view.max_timestamp == max(timestamps)
    records = list(view.records())
    expected = [
        Record(1000 + i, timestamps[i], k, v, h, 0) for i, (k, v, h) in enumerate(_records(n))
    ]
    assert records == expected


def test_header_fields_flags() -> None:
    b = RecordBatchBuilder(
        Compression.NONE,
        is_transactional=True,
        producer_id=7,
        producer_epoch=0,
        base_sequence=0,
        timestamp_type=1,
    )
    b.append(b"k", b"v", timestamp_ms=5)
    b.append(b"k", b"v", timestamp_ms=3)
    view = RecordBatchView(b.build())
    view.validate()
    assert view.is_transactional and view.timestamp_type == 1
    assert view.attributes == 0x10 | 0x08
    # LogAppendTime: every record carries the batch's max timestamp.
    assert [r.timestamp for r in view.records()] == [5, 5]


def test_control_batch() -> None:
    b = RecordBatchBuilder(is_control=True, is_transactional=True, producer_id=5, producer_epoch=1)
    b.append(struct.pack(">hh", 0, 1), struct.pack(">hi", 0, 3), timestamp_ms=1)  # COMMIT marker
    view = RecordBatchView(b.build())
    view.validate()
    assert view.is_control
    (rec,) = view.records()
    assert struct.unpack(">hh", rec.key or b"") == (0, 1)


def test_offset_deltas_with_gaps() -> None:
    b = RecordBatchBuilder(base_offset=100)
    b.append(b"a", b"1", timestamp_ms=1, offset_delta=0)
    b.append(b"b", b"2", timestamp_ms=2, offset_delta=5)
    b.append(b"c", b"3", timestamp_ms=3, offset_delta=9)
    view = RecordBatchView(b.build())
    assert view.last_offset == 109
    assert [r.offset for r in view.records()] == [100, 105, 109]
    with pytest.raises(ValueError):
        b.append(b"d", b"4", offset_delta=9)


@pytest.mark.parametrize("codec", CODECS)
def test_empty_batch(codec: Compression) -> None:
    data = RecordBatchBuilder(codec).build()
    view = RecordBatchView(data)
    view.validate()
    assert view.records_count == 0 and list(view.records()) == []
    assert view.base_timestamp == -1 and view.max_timestamp == -1


def test_records_cap() -> None:
    data = _build(Compression.ZSTD, 200)
    with pytest.raises(DecompressionError):
        list(RecordBatchView(data).records(max_decompressed_bytes=100))
    with pytest.raises(CorruptRecordError):
        list(RecordBatchView(_build(Compression.NONE, 200)).records(max_decompressed_bytes=100))


# ------------------------------------------------------------------ validation


def test_crc_mismatch_detected() -> None:
    data = bytearray(_build(Compression.NONE, 3))
    data[-1] ^= 0x01
    view = RecordBatchView(data)
    with pytest.raises(CorruptRecordError, match="CRC32C"):
        view.validate()
    data[-1] ^= 0x01
    data[CRC_OFFSET] ^= 0x80
    with pytest.raises(CorruptRecordError, match="CRC32C"):
        RecordBatchView(data).validate()


@pytest.mark.parametrize("magic", [0, 1])
def test_old_magic_rejected(magic: int) -> None:
    builder = LegacyRecordBatchBuilder(magic, 0, 1 << 20)
    builder.append(0, TS if magic else None, b"k", b"v")
    data = bytes(builder.build())
    with pytest.raises(UnsupportedMagic, match="magic v2"):
        RecordBatchView(data)
    with pytest.raises(UnsupportedMagic, match=r"v0/v1 is not supported"):
        list(iter_batches(data))
    with pytest.raises(UnsupportedMagic):
        list(iter_batches(_build(Compression.NONE, 1) + data))


def test_unknown_magic_and_codec() -> None:
    data = bytearray(_build(Compression.NONE, 1))
    data[16] = 3
    with pytest.raises(CorruptRecordError):
        RecordBatchView(data)
    data = bytearray(_build(Compression.NONE, 1))
    data[22] |= 0x07  # codec 7
    with pytest.raises(CorruptRecordError, match="codec"):
        RecordBatchView(data)


def test_length_mismatch() -> None:
    data = _build(Compression.NONE, 2)
    with pytest.raises(CorruptRecordError, match="batchLength"):
        RecordBatchView(data + b"\x00")
    with pytest.raises(CorruptRecordError):
        RecordBatchView(data[:-1])
    with pytest.raises(CorruptRecordError):
        RecordBatchView(data[:40])


def test_count_mismatch() -> None:
    data = bytearray(_build(Compression.NONE, 3))
    struct.pack_into(">i", data, 57, 4)  # claims one more record than present
    view = RecordBatchView(data)
    with pytest.raises(CorruptRecordError):
        list(view.records())
    struct.pack_into(">i", data, 57, 2)  # one fewer: trailing bytes
    with pytest.raises(CorruptRecordError, match="after the last"):
        list(RecordBatchView(data).records())
    struct.pack_into(">i", data, 57, -1)
    with pytest.raises(CorruptRecordError):
        RecordBatchView(data).validate()


# ------------------------------------------------------------------ iter_batches


def test_iter_batches() -> None:
    blobs = [_build(c, 3 + i, base_offset=i * 10) for i, c in enumerate(CODECS)]
    data = b"".join(blobs)
    views = list(iter_batches(data, validate=True))
    assert [v.base_offset for v in views] == [0, 10, 20, 30, 40]
    assert [bytes(v.buffer) for v in views] == blobs
    assert list(iter_batches(b"")) == []


@pytest.mark.parametrize("cut", [1, 11, 12, 17, 60, 61, 100])
def test_iter_batches_partial_tail(cut: int) -> None:
    first = _build(Compression.NONE, 3)
    second = _build(Compression.NONE, 5)
    data = first + second[:cut]
    with pytest.raises(CorruptRecordError, match="truncated"):
        list(iter_batches(data))
    views = list(iter_batches(data, allow_partial_tail=True))
    assert len(views) == 1 and bytes(views[0].buffer) == first


def test_iter_batches_is_zero_copy() -> None:
    data = bytearray(_build(Compression.NONE, 2) * 2)
    views = list(iter_batches(data))
    data[0:8] = struct.pack(">q", 77)
    assert views[0].buffer[:8].tobytes() == struct.pack(">q", 77)


def test_iter_batches_too_small_length() -> None:
    data = bytearray(_build(Compression.NONE, 1))
    struct.pack_into(">i", data, 8, 10)
    with pytest.raises(CorruptRecordError):
        list(iter_batches(data, allow_partial_tail=True))


# ------------------------------------------------------------------ patching


def test_patch_base_offset_keeps_crc() -> None:
    data = bytearray(_build(Compression.LZ4, 10))
    patch_base_offset(data, 0, 123_456_789_000)
    patch_partition_leader_epoch(data, 0, 12)
    view = RecordBatchView(data)
    view.validate()
    assert view.base_offset == 123_456_789_000 and view.partition_leader_epoch == 12
    assert [r.offset for r in view.records()][-1] == 123_456_789_009
    # kafka-python agrees
    kp = DefaultRecordBatch(bytes(data))
    assert kp.validate_crc() and kp.base_offset == 123_456_789_000


def test_rebase_batches() -> None:
    counts = [3, 1, 7]
    buf = bytearray(b"".join(_build(Compression.SNAPPY, n) for n in counts))
    next_offset = rebase_batches(buf, 500, partition_leader_epoch=4)
    assert next_offset == 500 + sum(counts)
    views = list(iter_batches(buf, validate=True))
    assert [v.base_offset for v in views] == [500, 503, 504]
    assert all(v.partition_leader_epoch == 4 for v in views)
    offsets = [r.offset for v in views for r in v.records()]
    assert offsets == list(range(500, 511))
    # memoryview slices of a larger buffer work too
    big = bytearray(b"xx") + buf
    rebase_batches(memoryview(big)[2:], 0)
    assert [v.base_offset for v in iter_batches(big[2:])] == [0, 3, 4]


def test_assign_base_offsets() -> None:
    buf = bytearray(_build(Compression.NONE, 2) + _build(Compression.NONE, 2))
    assign_base_offsets(buf, [10, 50])
    assert [v.base_offset for v in iter_batches(buf, validate=True)] == [10, 50]
    with pytest.raises(ValueError):
        assign_base_offsets(buf, [1])
    before = bytes(buf)
    with pytest.raises(CorruptRecordError):
        rebase_batches(memoryview(buf)[:-3], 0)
    assert bytes(buf) == before  # nothing written on error


# ------------------------------------------------------------------ kafka-python interop


def _kp_build(codec: Compression, n: int, base_offset: int = 0) -> bytes:
    b = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=int(codec),
        is_transactional=False,
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=-1,
        batch_size=1 << 24,
    )
    for i, (k, v, h) in enumerate(_records(n)):
        b.append(i, timestamp=TS + i, key=k, value=v, headers=h)
    data = bytearray(b.build())
    struct.pack_into(">q", data, 0, base_offset)
    return bytes(data)


@pytest.mark.parametrize("codec", CODECS)
def test_kafka_python_batches_parse(codec: Compression) -> None:
    data = _kp_build(codec, 300, base_offset=1000)
    view = RecordBatchView(data)
    view.validate()
    assert view.base_offset == 1000
    assert view.compression is codec  # the data is compressible, so kafka-python kept the codec
    kp_records = list(DefaultRecordBatch(data))
    ours = list(view.records())
    assert len(ours) == len(kp_records) == 300
    for mine, theirs in zip(ours, kp_records, strict=True):
        assert mine.offset == theirs.offset >= 1000
        assert mine.timestamp == theirs.timestamp
        assert mine.key == theirs.key and mine.value == theirs.value
        assert mine.headers == [(k, v) for k, v in theirs.headers]


@pytest.mark.parametrize("codec", CODECS)
def test_our_batches_read_by_kafka_python(codec: Compression) -> None:
    blobs = [_build(codec, 300, base_offset=0), _build(codec, 5, base_offset=300)]
    data = b"".join(blobs)
    mr = MemoryRecords(data)
    seen = []
    while mr.has_next():
        batch = mr.next_batch()
        assert batch is not None and batch.validate_crc()
        assert batch.compression_type == int(codec)
        seen.extend(batch)
    ours = [r for v in iter_batches(data) for r in v.records()]
    assert len(seen) == len(ours) == 305
    for mine, theirs in zip(ours, seen, strict=True):
        assert (mine.offset, mine.timestamp, mine.key, mine.value) == (
            theirs.offset,
            theirs.timestamp,
            theirs.key,
            theirs.value,
        )
        assert mine.headers == [(k, v) for k, v in theirs.headers]


@pytest.mark.parametrize("framing", ["raw", "xerial"])
def test_snappy_framings_in_a_batch(framing: str) -> None:
    """A batch whose payload is raw snappy (librdkafka) or xerial (Java) reads the same."""
    plain = RecordBatchView(_build(Compression.NONE, 50))
    body = plain.payload.tobytes()
    if framing == "raw":
        payload = bytes(cramjam.snappy.compress_raw(body))
    else:
        payload = kcodec.snappy_encode(body, xerial_compatible=True)
    header = bytearray(plain.buffer[:RECORD_BATCH_OVERHEAD].tobytes())
    struct.pack_into(">i", header, 8, RECORD_BATCH_OVERHEAD - 12 + len(payload))
    struct.pack_into(">h", header, 21, int(Compression.SNAPPY))
    crc = google_crc32c.extend(google_crc32c.value(bytes(header[21:])), payload)
    struct.pack_into(">I", header, CRC_OFFSET, crc)
    data = bytes(header) + payload
    view = RecordBatchView(data)
    view.validate()
    assert list(view.records()) == list(plain.records())
    assert [r.value for r in DefaultRecordBatch(data)] == [r.value for r in plain.records()]


@pytest.mark.parametrize("codec", [Compression.NONE, Compression.ZSTD])
def test_stamp_log_append_time(codec: Compression) -> None:
    from kafka_protocol.records import stamp_log_append_time

    b = RecordBatchBuilder(codec)
    for i in range(3):
        b.append(b"k", b"v%d" % i, [], timestamp_ms=1000 + i)
    buf = bytearray(b.build())
    stamp_log_append_time(buf, 5_000_000)
    view = RecordBatchView(buf)
    view.validate()  # the CRC was rewritten
    assert (view.timestamp_type, view.max_timestamp) == (1, 5_000_000)
    assert [r.timestamp for r in view.records()] == [5_000_000] * 3
