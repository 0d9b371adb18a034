"""Zigzag varints (record fields) and unsigned varints (flexible-version fields).

Sits under ``records.py`` (every record field after the batch header is a
zigzag varint or varlong) and is usable by the message codec for compact
strings and tagged fields. Readers take ``(buf, pos, end)`` and return
``(value, new_pos)`` so callers can walk a buffer without slicing it; every
failure is a :class:`DecodeError`, never an ``IndexError``.
"""

from __future__ import annotations

from .exceptions import DecodeError

__all__ = [
    "encode_uvarint",
    "encode_varint",
    "encode_varlong",
    "read_uvarint",
    "read_varint",
    "read_varlong",
    "zigzag_decode",
    "zigzag_encode",
]

_INT32_MIN, _INT32_MAX = -(1 << 31), (1 << 31) - 1
_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1

# Byte buffers we walk: bytes, bytearray, or a memoryview with format "B".
Buf = bytes | bytearray | memoryview


def _read_raw(buf: Buf, pos: int, end: int, max_bytes: int, what: str) -> tuple[int, int]:
    """Read an unsigned LEB128 value of at most ``max_bytes`` bytes."""
    if pos >= end:
        raise DecodeError(f"truncated {what} at position {pos}")
    b = buf[pos]
    if b < 0x80:  # fast path: one byte, by far the most common case
        return b, pos + 1
    result = b & 0x7F
    shift = 7
    pos += 1
    limit = 7 * max_bytes
    while True:
        if pos >= end:
            raise DecodeError(f"truncated {what} at position {pos}")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            break
        shift += 7
        if shift >= limit:
            raise DecodeError(f"{what} longer than {max_bytes} bytes at position {pos}")
    # The last byte may still carry bits above 32/64: reject, as Java would overflow.
    if result >> (32 if max_bytes == 5 else 64):
        raise DecodeError(f"{what} overflows {32 if max_bytes == 5 else 64} bits")
    return result, pos


def read_uvarint(buf: Buf, pos: int, end: int) -> tuple[int, int]:
    """Unsigned varint (uint32, at most 5 bytes), as used by compact arrays and tags."""
    return _read_raw(buf, pos, end, 5, "unsigned varint")


def read_varint(buf: Buf, pos: int, end: int) -> tuple[int, int]:
    """Zigzag varint (int32, at most 5 bytes)."""
    raw, pos = _read_raw(buf, pos, end, 5, "varint")
    return (raw >> 1) ^ -(raw & 1), pos


def read_varlong(buf: Buf, pos: int, end: int) -> tuple[int, int]:
    """Zigzag varlong (int64, at most 10 bytes)."""
    raw, pos = _read_raw(buf, pos, end, 10, "varlong")
    return (raw >> 1) ^ -(raw & 1), pos


def zigzag_encode(value: int) -> int:
    """Map a signed integer to an unsigned one: 0, -1, 1, -2 -> 0, 1, 2, 3."""
    return (value << 1) if value >= 0 else ((-value) << 1) - 1


def zigzag_decode(raw: int) -> int:
    return (raw >> 1) ^ -(raw & 1)


def encode_uvarint(value: int) -> bytes:
    if value < 0 or value > 0xFFFFFFFF:
        raise ValueError(f"unsigned varint out of range: {value}")
    return _encode_raw(value)


def encode_varint(value: int) -> bytes:
    if not _INT32_MIN <= value <= _INT32_MAX:
        raise ValueError(f"varint out of int32 range: {value}")
    return _encode_raw(zigzag_encode(value))


def encode_varlong(value: int) -> bytes:
    if not _INT64_MIN <= value <= _INT64_MAX:
        raise ValueError(f"varlong out of int64 range: {value}")
    return _encode_raw(zigzag_encode(value))


# Small values dominate (lengths, deltas): precompute their encodings.
_SMALL = [bytes([i]) for i in range(0x80)]


def _encode_raw(raw: int) -> bytes:
    if raw < 0x80:
        return _SMALL[raw]
    out = bytearray()
    while raw >= 0x80:
        out.append((raw & 0x7F) | 0x80)
        raw >>= 7
    out.append(raw)
    return bytes(out)
