"""Record-batch compression codecs (attributes bits 0-2) with a hard output cap.

Sits under ``records.py``: the agent never decompresses (batches stay bytes),
the compactor and the Spark source do, on data that came from untrusted
clients. So every ``decompress`` takes ``max_size`` and never materialises
more than ``max_size + 1`` bytes of output, whatever the input declares
(snappy-java CVE-2023-34455 was exactly an unchecked declared length).

Formats, as Kafka writes them:

* GZIP: RFC 1952 gzip (concatenated members are accepted, like Java's
  ``GZIPInputStream``). Decoded with ``zlib.decompressobj`` and ``max_length``.
* SNAPPY: Java (snappy-java ``SnappyOutputStream``), kafka-python and aiokafka
  write the *xerial* framing: ``b"\\x82SNAPPY\\x00"``, int32 version, int32
  compat, then ``[int32 length][raw snappy block]...``; librdkafka writes one
  *raw* snappy block. We read both (xerial is recognised by its magic, like
  snappy-java does) and **write xerial** with 32 KiB blocks, because that is
  what the Java client writes and every client reads it. Raw snappy carries its
  uncompressed length as a varint preamble: we check it against the cap before
  allocating anything.
* LZ4: the LZ4 frame format (KIP-57: correct header checksum, magic v2 batches
  only). We write frames the way Kafka's ``KafkaLZ4BlockOutputStream`` does:
  independent 64 KiB blocks, no block or content checksum, no content size.
  Any valid frame is read.
* ZSTD: standard zstd frames.

LZ4 and ZSTD are decoded by cramjam's ``decompress_into`` into a buffer no
larger than ``max_size + 1``; cramjam streams into that buffer and fails when it
is full, so a bomb costs at most the cap. The buffer starts small and grows
geometrically, so a small batch does not pay for a large cap.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Callable
from enum import IntEnum

import cramjam

from .exceptions import DecompressionError

__all__ = [
    "DEFAULT_MAX_DECOMPRESSED_BYTES",
    "XERIAL_MAGIC",
    "Compression",
    "compress",
    "decompress",
]


class Compression(IntEnum):
    """The compression codec of a record batch (``attributes & 0x07``)."""

    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4


#: A reasonable cap for one batch: Kafka's default ``message.max.bytes`` is ~1 MiB
#: compressed; 64 MiB decompressed leaves room for highly compressible data.
DEFAULT_MAX_DECOMPRESSED_BYTES = 64 * 1024 * 1024

XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = XERIAL_MAGIC + struct.pack(">ii", 1, 1)  # version 1, min compatible 1
_XERIAL_HEADER_LEN = 16
_XERIAL_BLOCK = 32 * 1024  # snappy-java's default block size
_I32 = struct.Struct(">i")

_LZ4_BLOCK = 64 * 1024
# Frame header as Kafka writes it: magic, FLG=0x60 (version 01, independent
# blocks, no checksums, no content size), BD=0x40 (64 KiB max block), and the
# header checksum (xxh32(FLG, BD) >> 8) & 0xFF == 0x82.
_LZ4_FRAME_HEADER = b"\x04\x22\x4d\x18\x60\x40\x82"
_LZ4_END_MARK = b"\x00\x00\x00\x00"
_LZ4_UNCOMPRESSED_BIT = 0x80000000
_U32LE = struct.Struct("<I")

_GZIP_SLICE = 64 * 1024  # gzip input and output slice

# First guess for the output buffer of the geometric-growth decoders.
_MIN_GUESS = 64 * 1024
_GUESS_RATIO = 8
_GROWTH = 4


# --------------------------------------------------------------------------- compress


def compress(codec: Compression | int, data: bytes | bytearray | memoryview) -> bytes:
    """Compress ``data`` the way the Java client would for this codec."""
    codec = Compression(codec)
    if codec is Compression.NONE:
        return bytes(data)
    if codec is Compression.GZIP:
        return bytes(cramjam.gzip.compress(data))
    if codec is Compression.SNAPPY:
        return _snappy_xerial_compress(data)
    if codec is Compression.LZ4:
        return _lz4_frame_compress(data)
    return bytes(cramjam.zstd.compress(data))


def _snappy_xerial_compress(data: bytes | bytearray | memoryview) -> bytes:
    view = memoryview(data).cast("B")
    out = bytearray(_XERIAL_HEADER)
    # Empty input still gets one (empty) block: readers such as kafka-python only
    # recognise the xerial framing when something follows the 16-byte header.
    for start in range(0, max(len(view), 1), _XERIAL_BLOCK):
        block = bytes(cramjam.snappy.compress_raw(view[start : start + _XERIAL_BLOCK]))
        out += _I32.pack(len(block))
        out += block
    return bytes(out)


def _lz4_frame_compress(data: bytes | bytearray | memoryview) -> bytes:
    view = memoryview(data).cast("B")
    out = bytearray(_LZ4_FRAME_HEADER)
    for start in range(0, len(view), _LZ4_BLOCK):
        chunk = view[start : start + _LZ4_BLOCK]
        block = bytes(cramjam.lz4.compress_block(chunk, store_size=False))
        if len(block) >= len(chunk):  # incompressible: store as-is, flagged
            out += _U32LE.pack(len(chunk) | _LZ4_UNCOMPRESSED_BIT)
            out += chunk
        else:
            out += _U32LE.pack(len(block))
            out += block
    out += _LZ4_END_MARK
    return bytes(out)


# --------------------------------------------------------------------------- decompress


def decompress(
    codec: Compression | int,
    data: bytes | bytearray | memoryview,
    max_size: int = DEFAULT_MAX_DECOMPRESSED_BYTES,
) -> bytes:
    """Decompress ``data``; raise :class:`DecompressionError` on any failure,
    including output larger than ``max_size`` bytes.

    Peak memory is about ``len(data) + max_size`` on failure and at most
    ``len(data) + 2 * len(result)`` on success (the result is copied out of the
    working buffer once).
    """
    if max_size < 0:
        raise ValueError("max_size must be >= 0")
    try:
        codec = Compression(codec)
    except ValueError:
        raise DecompressionError(f"unknown compression codec {codec}") from None
    view = memoryview(data).cast("B") if isinstance(data, memoryview) else memoryview(data)
    if codec is Compression.NONE:
        if len(view) > max_size:
            raise _too_large(codec, max_size)
        return bytes(view)
    if codec is Compression.GZIP:
        return _gzip_decompress(view, max_size)
    if codec is Compression.SNAPPY:
        return _snappy_decompress(view, max_size)
    if codec is Compression.LZ4:
        return _bounded_into(codec, cramjam.lz4.decompress_into, view, max_size)
    return _bounded_into(codec, cramjam.zstd.decompress_into, view, max_size)


def _too_large(codec: Compression, max_size: int) -> DecompressionError:
    return DecompressionError(
        f"{codec.name} records decompress to more than the {max_size}-byte limit"
    )


def _gzip_decompress(view: memoryview, max_size: int) -> bytes:
    # Input is fed in slices and output taken in slices: zlib copies whatever
    # input it has not consumed (``unconsumed_tail``, ``unused_data``) into new
    # bytes objects, and a list of small chunks (joined once) never over-allocates
    # the way a growing bytearray does. Memory stays at about max_size + 2 slices.
    chunks: list[bytes] = []
    total = 0
    d = zlib.decompressobj(47)  # wbits 47: gzip or zlib header, auto-detected
    members = 0
    fed = False  # has the current decompressor seen any input?
    more = False  # did the last call stop on its output limit?
    pos, n = 0, len(view)
    pending: bytes | memoryview = b""
    try:
        while True:
            if not pending and not more:
                if pos >= n:
                    break
                pending = view[pos : pos + _GZIP_SLICE]
                pos += len(pending)
            fed = True
            # One byte beyond the budget tells "at the cap" from "over the cap".
            want = min(_GZIP_SLICE, max_size + 1 - total)
            chunk = d.decompress(pending, want)
            total += len(chunk)
            if total > max_size:
                raise _too_large(Compression.GZIP, max_size)
            chunks.append(chunk)
            if d.eof:
                # End of a member; like Java's GZIPInputStream, read concatenated ones.
                members += 1
                pending = d.unused_data
                d = zlib.decompressobj(47)
                fed = more = False
            else:
                pending = d.unconsumed_tail
                more = len(chunk) == want
    except zlib.error as e:
        raise DecompressionError(f"GZIP records are corrupt (member {members + 1}): {e}") from e
    if fed or members == 0:
        raise DecompressionError("GZIP records are truncated")
    return b"".join(chunks)


def _snappy_decompress(view: memoryview, max_size: int) -> bytes:
    if len(view) >= _XERIAL_HEADER_LEN and view[:8] == XERIAL_MAGIC:
        return _snappy_xerial_decompress(view, max_size)
    return _snappy_raw_block(view, max_size, 0)


def _snappy_raw_block(data: memoryview, max_size: int, used: int) -> bytes:
    try:
        declared = cramjam.snappy.decompress_raw_len(data)
    except Exception as e:
        raise DecompressionError(f"SNAPPY block has a bad length preamble: {e}") from e
    if declared < 0 or used + declared > max_size:
        raise _too_large(Compression.SNAPPY, max_size)
    try:
        # The declared length was checked above, and the decoder refuses to write
        # past it, so this allocates at most ``declared`` bytes.
        return bytes(cramjam.snappy.decompress_raw(data))
    except Exception as e:
        raise DecompressionError(f"SNAPPY block is corrupt: {e}") from e


def _snappy_xerial_decompress(view: memoryview, max_size: int) -> bytes:
    # Header: magic(8) version(4) compat(4). snappy-java accepts any version
    # whose "compatible" field it understands; we do not interpret either.
    pos = _XERIAL_HEADER_LEN
    end = len(view)
    out = bytearray()
    while pos < end:
        if end - pos < 4:
            raise DecompressionError("SNAPPY xerial stream ends inside a block length")
        (length,) = _I32.unpack_from(view, pos)
        pos += 4
        if length < 0 or length > end - pos:
            raise DecompressionError(
                f"SNAPPY xerial block length {length} exceeds the {end - pos} bytes left"
            )
        out += _snappy_raw_block(view[pos : pos + length], max_size, len(out))
        pos += length
    return bytes(out)


def _bounded_into(
    codec: Compression,
    into: Callable[[memoryview, bytearray], int],
    view: memoryview,
    max_size: int,
) -> bytes:
    """Run a cramjam ``decompress_into`` with a buffer of at most ``max_size + 1``.

    cramjam fails with "failed to write whole buffer" when the output does not
    fit; we cannot tell that apart from corrupt input portably, so on any
    failure we retry with a larger buffer until the cap, and report the last
    error. Retries grow geometrically, so total work is a constant factor.
    """
    data = view  # cramjam reads any buffer without copying it
    limit = max_size + 1
    size = min(limit, max(_MIN_GUESS, len(data) * _GUESS_RATIO))
    while True:
        buf = bytearray(size)
        try:
            n = into(data, buf)
        except Exception as e:
            del buf
            if size >= limit:
                if "whole buffer" in str(e):
                    raise _too_large(codec, max_size) from e
                raise DecompressionError(f"{codec.name} records are corrupt: {e}") from e
            size = min(limit, size * _GROWTH)
            continue
        if not isinstance(n, int) or n > max_size:
            raise _too_large(codec, max_size)
        if n == size and size < limit:
            # Output filled the buffer exactly: it may have been cut short. Retry
            # bigger to be sure (cramjam normally errors in that case anyway).
            del buf
            size = min(limit, size * _GROWTH)
            continue
        return bytes(memoryview(buf)[:n])
