"""Property tests: malformed record batches only ever raise DecodeError subclasses,
and decoding never allocates much beyond the bytes received plus the cap."""

from __future__ import annotations

import gzip
import os
import struct
import tracemalloc
from collections.abc import Callable

import cramjam
import google_crc32c
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatch

from kafka_protocol.compression import Compression, compress
from kafka_protocol.exceptions import CorruptRecordError, DecodeError, DecompressionError
from kafka_protocol.records import (
    RECORD_BATCH_OVERHEAD,
    RecordBatchBuilder,
    RecordBatchView,
    iter_batches,
)
from kafka_protocol.varint import (
    encode_varint,
    encode_varlong,
    read_uvarint,
    read_varint,
    read_varlong,
)

MiB = 1024 * 1024
# FLOE_FUZZ_EXAMPLES raises the example count for a long local or nightly run.
FUZZ = settings(
    max_examples=int(os.environ.get("FLOE_FUZZ_EXAMPLES", "300")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

keys = st.none() | st.binary(max_size=40)
headers = st.lists(st.tuples(st.text(max_size=10), st.none() | st.binary(max_size=20)), max_size=3)
record_st = st.tuples(keys, keys, headers, st.integers(0, 2**41))
codecs = st.sampled_from(list(Compression))
RecordSpec = tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]], int]


def _build(codec: Compression, records: list[RecordSpec]) -> bytes:
    b = RecordBatchBuilder(codec, base_offset=10)
    for k, v, h, ts in records:
        b.append(k, v, h, timestamp_ms=ts)
    return b.build()


def _exercise(data: bytes | bytearray, *, check_crc: bool) -> None:
    """Everything a consumer of untrusted bytes would do; only DecodeError may escape."""
    for view in iter_batches(data, allow_partial_tail=True):
        if check_crc:
            view.validate()
        _ = (view.last_offset, view.compression, view.max_timestamp, view.is_control)
        for rec in view.records(max_decompressed_bytes=MiB):
            assert rec.key is None or isinstance(rec.key, bytes)


def _seal(header: bytearray, payload: bytes) -> bytes:
    """Fix batchLength and CRC so a crafted payload reaches the record parser."""
    struct.pack_into(">i", header, 8, RECORD_BATCH_OVERHEAD - 12 + len(payload))
    crc = google_crc32c.extend(google_crc32c.value(bytes(header[21:])), payload)
    struct.pack_into(">I", header, 17, crc)
    return bytes(header) + payload


def _header(codec: Compression = Compression.NONE, count: int = 1) -> bytearray:
    h = bytearray(RecordBatchBuilder(codec).build()[:RECORD_BATCH_OVERHEAD])
    struct.pack_into(">i", h, 57, count)
    return h


# ------------------------------------------------------------------ round trips


@FUZZ
@given(codecs, st.lists(record_st, min_size=1, max_size=30))
def test_round_trip_property(codec: Compression, records: list[RecordSpec]) -> None:
    data = _build(codec, records)
    view = RecordBatchView(data)
    view.validate()
    got = list(view.records())
    assert [(r.key, r.value, r.headers, r.timestamp) for r in got] == [
        (k, v, h, ts) for k, v, h, ts in records
    ]
    assert [r.offset for r in got] == list(range(10, 10 + len(records)))
    theirs = list(DefaultRecordBatch(data))
    assert [(r.key, r.value, r.timestamp) for r in theirs] == [
        (k, v, ts) for k, v, _, ts in records
    ]


@given(st.integers(-(2**31), 2**31 - 1))
def test_varint_round_trip(n: int) -> None:
    enc = encode_varint(n)
    assert read_varint(enc, 0, len(enc)) == (n, len(enc))


@given(st.integers(-(2**63), 2**63 - 1))
def test_varlong_round_trip(n: int) -> None:
    enc = encode_varlong(n)
    assert read_varlong(enc, 0, len(enc)) == (n, len(enc))


# ------------------------------------------------------------------ malformed input


@FUZZ
@given(codecs, st.lists(record_st, min_size=1, max_size=10), st.data())
def test_truncation(codec: Compression, records: list[RecordSpec], data: st.DataObject) -> None:
    blob = _build(codec, records)
    cut = data.draw(st.integers(1, len(blob) - 1))
    with pytest.raises(CorruptRecordError):
        list(iter_batches(blob[:cut]))
    assert list(iter_batches(blob[:cut], allow_partial_tail=True)) == []
    with pytest.raises(CorruptRecordError):
        RecordBatchView(blob[:cut])


@FUZZ
@given(
    codecs,
    st.lists(record_st, min_size=1, max_size=10),
    st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 255)), min_size=1, max_size=8),
    st.booleans(),
)
def test_random_mutations(
    codec: Compression,
    records: list[RecordSpec],
    mutations: list[tuple[int, int]],
    reseal: bool,
) -> None:
    blob = bytearray(_build(codec, records))
    for pos, value in mutations:
        blob[pos % len(blob)] = value
    if reseal and blob[16] == 2 and len(blob) >= RECORD_BATCH_OVERHEAD:
        # recompute the CRC so the mutation reaches decompression and record parsing
        blob = bytearray(_seal(blob[:RECORD_BATCH_OVERHEAD], bytes(blob[RECORD_BATCH_OVERHEAD:])))
    try:
        _exercise(blob, check_crc=True)
    except DecodeError:
        pass
    try:
        _exercise(blob, check_crc=False)
    except DecodeError:
        pass


@FUZZ
@given(st.binary(max_size=300), st.integers(-5, 100), codecs)
def test_arbitrary_payload_reaches_parser(payload: bytes, count: int, codec: Compression) -> None:
    blob = _seal(_header(codec, count), payload)
    try:
        _exercise(blob, check_crc=True)
    except DecodeError:
        pass


@FUZZ
@given(st.binary(min_size=0, max_size=400))
def test_arbitrary_bytes(blob: bytes) -> None:
    for allow in (False, True):
        try:
            _exercise(blob, check_crc=False)
            list(iter_batches(blob, allow_partial_tail=allow, validate=True))
        except DecodeError:
            pass


def _record_body(*fields: bytes) -> bytes:
    body = b"".join(fields)
    return encode_varint(len(body)) + body


@pytest.mark.parametrize(
    ("payload", "count"),
    [
        # record length larger than what is left
        (encode_varint(1000) + b"\x00" * 10, 1),
        # negative record length
        (encode_varint(-5) + b"\x00" * 10, 1),
        # key length larger than the record
        (_record_body(b"\x00", b"\x00", b"\x00", encode_varint(50), b"k", b"\x01", b"\x00"), 1),
        # key length below -1
        (_record_body(b"\x00", b"\x00", b"\x00", encode_varint(-3), b"\x01", b"\x00"), 1),
        # value length larger than the record
        (_record_body(b"\x00", b"\x00", b"\x00", b"\x01", encode_varint(99), b"\x00"), 1),
        # header count larger than what is left / negative
        (_record_body(b"\x00", b"\x00", b"\x00", b"\x01", b"\x01", encode_varint(1000)), 1),
        (_record_body(b"\x00", b"\x00", b"\x00", b"\x01", b"\x01", encode_varint(-1)), 1),
        # header key not UTF-8
        (_record_body(b"\x00\x00\x00\x01\x01", b"\x02", encode_varint(1), b"\xff", b"\x01"), 1),
        # negative header key length
        (_record_body(b"\x00\x00\x00\x01\x01", b"\x02", encode_varint(-1), b"\x01", b"\x00"), 1),
        # record length with bytes left over inside it
        (_record_body(b"\x00\x00\x00\x01\x01\x00", b"\x00\x00"), 1),
        # varint longer than 5 bytes (offset delta)
        (_record_body(b"\x00", b"\x00", b"\x80\x80\x80\x80\x80\x01", b"\x01\x01\x00"), 1),
        # varint whose 5th byte overflows 32 bits
        (_record_body(b"\x00", b"\x00", b"\xff\xff\xff\xff\x7f", b"\x01\x01\x00"), 1),
        # varlong longer than 10 bytes (timestamp delta)
        (_record_body(b"\x00", b"\x80" * 10 + b"\x01", b"\x00\x01\x01\x00"), 1),
        # huge record count with few bytes
        (b"\x00" * 20, 2**31 - 1),
        # fewer records than counted
        (_record_body(b"\x00\x00\x00\x01\x01\x00"), 2),
        # varint truncated at end of buffer
        (b"\x80", 1),
    ],
)
def test_crafted_malformed_records(payload: bytes, count: int) -> None:
    blob = _seal(_header(Compression.NONE, count), payload)
    with pytest.raises(CorruptRecordError):
        view = RecordBatchView(blob)
        view.validate()
        list(view.records())


@pytest.mark.parametrize(
    "raw",
    [b"\x80\x80\x80\x80\x80\x01", b"\xff\xff\xff\xff\x1f", b"\x80", b""],
)
def test_varint_overflow(raw: bytes) -> None:
    with pytest.raises(DecodeError):
        read_varint(raw, 0, len(raw))
    with pytest.raises(DecodeError):
        read_uvarint(raw, 0, len(raw))


def test_varlong_overflow() -> None:
    with pytest.raises(DecodeError):
        read_varlong(b"\x80" * 10 + b"\x01", 0, 11)
    with pytest.raises(DecodeError):
        read_varlong(b"\xff" * 9 + b"\x7f", 0, 10)  # > 64 bits
    assert read_varlong(b"\xff" * 9 + b"\x01", 0, 10)[0] == -(2**63)


@FUZZ
@given(st.binary(max_size=64), st.integers(0, 40))
def test_varint_readers_only_raise_decode_error(raw: bytes, pos: int) -> None:
    for reader in (read_varint, read_varlong, read_uvarint):
        try:
            value, new_pos = reader(raw, pos, len(raw))
        except DecodeError:
            continue
        assert pos < new_pos <= len(raw)
        assert isinstance(value, int)


# ------------------------------------------------------------------ bombs inside batches


def _bomb_gzip() -> bytes:
    return gzip.compress(bytes(MiB)) * 64  # 64 MiB in 64 members


def _bomb_zstd() -> bytes:
    c = cramjam.zstd.Compressor()
    chunk = bytes(MiB)
    for _ in range(1024):
        c.compress(chunk)
    return bytes(c.finish())  # 1 GiB


def _bomb_lz4() -> bytes:
    one = compress(Compression.LZ4, bytes(64 * 1024))
    return one[:7] + one[7:-4] * 16384 + one[-4:]  # 1 GiB


def _bomb_snappy() -> bytes:
    return b"\x80\x80\x80\x80\x04" + b"\x00" * 16  # declares 1 GiB


BOMBS: dict[Compression, Callable[[], bytes]] = {
    Compression.GZIP: _bomb_gzip,
    Compression.ZSTD: _bomb_zstd,
    Compression.LZ4: _bomb_lz4,
    Compression.SNAPPY: _bomb_snappy,
}


@pytest.mark.parametrize("codec", list(BOMBS))
def test_bomb_in_batch_is_bounded(codec: Compression) -> None:
    blob = _seal(_header(codec, 1000), BOMBS[codec]())
    view = RecordBatchView(blob)
    view.validate()  # the CRC is fine; only decompression can catch it
    cap = MiB
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        with pytest.raises(DecompressionError):
            list(view.records(max_decompressed_bytes=cap))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # Slack over blob + cap: the gzip path's own buffers take ~230 KB (measured alone),
    # and tracemalloc counts every thread of the process (the full suite's run went
    # 5 KB over a 256 KiB slack). 512 KiB still bounds a 64 MiB-1 GiB bomb at ~1.6 MiB.
    assert peak <= len(blob) + cap + 512 * 1024, peak


@FUZZ
@given(st.lists(record_st, min_size=1, max_size=5), codecs)
def test_records_memory_bounded(records: list[RecordSpec], codec: Compression) -> None:
    assume(codec is not Compression.NONE)
    blob = _build(codec, records)
    uncompressed = RecordBatchBuilder()
    for k, v, h, ts in records:
        uncompressed.append(k, v, h, timestamp_ms=ts)
    size = uncompressed.uncompressed_size - RECORD_BATCH_OVERHEAD
    # exactly at the cap decodes, one below fails with DecompressionError
    assert len(list(RecordBatchView(blob).records(max_decompressed_bytes=size))) == len(records)
    with pytest.raises(DecompressionError):
        list(RecordBatchView(blob).records(max_decompressed_bytes=size - 1))
