"""Codecs: round trips, interop with the reference libraries, and bomb defence."""

from __future__ import annotations

import gzip
import os
import struct
import tracemalloc
import zlib
from collections.abc import Callable

import cramjam
import kafka.codec as kcodec
import lz4.frame
import pytest
import zstandard

from kafka_protocol.compression import XERIAL_MAGIC, Compression, compress, decompress
from kafka_protocol.exceptions import DecodeError, DecompressionError

MiB = 1024 * 1024
GiB = 1024 * MiB
CODECS = list(Compression)
COMPRESSED = [c for c in Compression if c is not Compression.NONE]


def _sample(n: int) -> bytes:
    half = n // 2
    return os.urandom(half) + b"kafka " * ((n - half) // 6 + 1)


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("size", [0, 1, 100, 65536, 65537, 300_000])
def test_round_trip(codec: Compression, size: int) -> None:
    data = _sample(size)[:size]
    assert decompress(codec, compress(codec, data), size) == data
    assert decompress(codec, memoryview(compress(codec, data)), size) == data


@pytest.mark.parametrize("codec", COMPRESSED)
def test_cap_is_exact(codec: Compression) -> None:
    data = b"x" * 100_000
    blob = compress(codec, data)
    assert decompress(codec, blob, len(data)) == data
    with pytest.raises(DecompressionError, match="limit"):
        decompress(codec, blob, len(data) - 1)


def test_none_respects_cap() -> None:
    assert decompress(Compression.NONE, b"abc", 3) == b"abc"
    with pytest.raises(DecompressionError):
        decompress(Compression.NONE, b"abcd", 3)


def test_unknown_codec() -> None:
    with pytest.raises(DecompressionError):
        decompress(7, b"", 10)


# ------------------------------------------------------------------ interop


@pytest.mark.parametrize("size", [0, 10, 100_000])
def test_snappy_reads_both_framings(size: int) -> None:
    data = _sample(size)[:size]
    raw = bytes(cramjam.snappy.compress_raw(data))  # librdkafka style
    xerial = kcodec.snappy_encode(data, xerial_compatible=True)  # Java / kafka-python style
    assert xerial.startswith(XERIAL_MAGIC)
    assert decompress(Compression.SNAPPY, raw, size) == data
    assert decompress(Compression.SNAPPY, xerial, size) == data


def test_snappy_writes_xerial() -> None:
    data = _sample(200_000)
    blob = compress(Compression.SNAPPY, data)
    assert blob[:8] == XERIAL_MAGIC and struct.unpack(">ii", blob[8:16]) == (1, 1)
    assert kcodec.snappy_decode(blob) == data
    assert kcodec.snappy_decode(compress(Compression.SNAPPY, b"")) == b""


def test_lz4_frame_is_kafka_style() -> None:
    data = _sample(200_000)
    blob = compress(Compression.LZ4, data)
    # magic, FLG = version 01 + independent blocks, BD = 64 KiB blocks, header checksum
    assert blob[:7] == b"\x04\x22\x4d\x18\x60\x40\x82"
    assert lz4.frame.decompress(blob) == data  # python-lz4 checks the header checksum
    info = lz4.frame.get_frame_info(blob)
    assert info["block_linked"] is False and info["content_checksum"] is False
    # And frames from python-lz4 (linked blocks, checksums) are read.
    for linked in (True, False):
        other = lz4.frame.compress(data, block_linked=linked, content_checksum=True)
        assert decompress(Compression.LZ4, other, len(data)) == data


def test_gzip_and_zstd_interop() -> None:
    data = _sample(100_000)
    assert decompress(Compression.GZIP, gzip.compress(data), len(data)) == data
    assert decompress(Compression.GZIP, zlib.compress(data), len(data)) == data
    assert gzip.decompress(compress(Compression.GZIP, data)) == data
    # Concatenated gzip members decode to the concatenation, like GZIPInputStream.
    two = gzip.compress(data[:10]) + gzip.compress(data[10:])
    assert decompress(Compression.GZIP, two, len(data)) == data
    assert decompress(Compression.ZSTD, zstandard.compress(data), len(data)) == data
    assert zstandard.ZstdDecompressor().decompress(compress(Compression.ZSTD, data)) == data


# ------------------------------------------------------------------ corrupt input


@pytest.mark.parametrize("codec", COMPRESSED)
@pytest.mark.parametrize(
    "mangle",
    [
        lambda b: b"",
        lambda b: b[: len(b) // 2],
        lambda b: b[:-1],
        lambda b: b + b"garbage",
        lambda b: bytes(x ^ 0x55 for x in b),
        lambda b: b[:20] + bytes(len(b) - 20),
    ],
)
def test_corrupt_input_raises_decompression_error(
    codec: Compression, mangle: Callable[[bytes], bytes]
) -> None:
    data = _sample(50_000)
    bad = mangle(compress(codec, data))
    try:
        out = decompress(codec, bad, 10 * len(data))
    except DecompressionError:
        return
    # Some mangles (e.g. lz4 or zstd trailing bytes) may still decode; they
    # must never produce garbage silently longer than the cap.
    assert len(out) <= 10 * len(data)


def test_snappy_xerial_bad_block_length() -> None:
    data = _sample(1000)
    blob = bytearray(compress(Compression.SNAPPY, data))
    struct.pack_into(">i", blob, 16, 10**9)
    with pytest.raises(DecompressionError):
        decompress(Compression.SNAPPY, bytes(blob), MiB)
    struct.pack_into(">i", blob, 16, -5)
    with pytest.raises(DecompressionError):
        decompress(Compression.SNAPPY, bytes(blob), MiB)


# ------------------------------------------------------------------ bombs


def _gzip_bomb(total: int) -> bytes:
    """``total`` zero bytes as concatenated gzip members of 1 MiB each (~1 KiB each)."""
    member = gzip.compress(bytes(MiB))
    return member * (total // MiB)


def _gzip_single_member_bomb(total: int) -> bytes:
    comp = zlib.compressobj(9, zlib.DEFLATED, 31)
    chunk = bytes(MiB)
    parts = [comp.compress(chunk) for _ in range(total // MiB)]
    parts.append(comp.flush())
    return b"".join(parts)


def _zstd_bomb(total: int) -> bytes:
    comp = cramjam.zstd.Compressor()
    chunk = bytes(MiB)
    for _ in range(total // MiB):
        comp.compress(chunk)
    return bytes(comp.finish())


def _zstd_declared_window_bomb(total: int) -> bytes:
    # One frame with a 128 MiB window and the content size declared up front.
    params = zstandard.ZstdCompressionParameters.from_level(3, window_log=27)
    cctx = zstandard.ZstdCompressor(compression_params=params)
    chunk = bytes(MiB)
    out = []
    cobj = cctx.compressobj(size=total)
    for _ in range(total // MiB):
        out.append(cobj.compress(chunk))
    out.append(cobj.flush())
    return b"".join(out)


def _lz4_bomb(total: int) -> bytes:
    # Kafka-style frame: independent blocks, so one compressed 64 KiB block of
    # zeros can simply be repeated.
    one = compress(Compression.LZ4, bytes(64 * 1024))
    header, block, end = one[:7], one[7:-4], one[-4:]
    return header + block * (total // (64 * 1024)) + end


def _snappy_raw_bomb(total: int) -> bytes:
    # Declares ``total`` bytes in the preamble; the body is a few bytes.
    out = bytearray()
    n = total
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out) + b"\x00\x00\x00"


def _snappy_xerial_bomb(total: int) -> bytes:
    block = bytes(cramjam.snappy.compress_raw(bytes(MiB)))
    framed = struct.pack(">i", len(block)) + block
    return XERIAL_MAGIC + struct.pack(">ii", 1, 1) + framed * (total // MiB)


BOMBS: dict[str, tuple[Compression, Callable[[int], bytes], int]] = {
    "gzip-members-1GiB": (Compression.GZIP, _gzip_bomb, GiB),
    "gzip-single-64MiB": (Compression.GZIP, _gzip_single_member_bomb, 64 * MiB),
    "zstd-1GiB": (Compression.ZSTD, _zstd_bomb, GiB),
    "zstd-window-64MiB": (Compression.ZSTD, _zstd_declared_window_bomb, 64 * MiB),
    "lz4-1GiB": (Compression.LZ4, _lz4_bomb, GiB),
    "snappy-raw-1GiB": (Compression.SNAPPY, _snappy_raw_bomb, GiB),
    "snappy-xerial-64MiB": (Compression.SNAPPY, _snappy_xerial_bomb, 64 * MiB),
}
CAP = MiB
SLACK = 256 * 1024  # fixed overhead: interpreter objects, zlib buffers, exception


@pytest.mark.parametrize("name", sorted(BOMBS))
def test_decompression_bomb_is_bounded(name: str) -> None:
    codec, make, total = BOMBS[name]
    bomb = make(total)
    assert len(bomb) < 8 * MiB
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        with pytest.raises(DecompressionError) as info:
            decompress(codec, bomb, CAP)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert isinstance(info.value, DecodeError)
    assert peak <= len(bomb) + CAP + SLACK, f"{name}: peak {peak} bytes"


@pytest.mark.parametrize("codec", COMPRESSED)
def test_success_memory_is_bounded(codec: Compression) -> None:
    data = bytes(4 * MiB)
    blob = compress(codec, data)
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        out = decompress(codec, blob, 8 * MiB)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert out == data
    # working buffer (at most the cap) plus the returned copy
    assert peak <= len(blob) + 8 * MiB + len(data) + SLACK
