"""Reading a segment object's index back: the footer validated, one object or its tail.

Where it sits: beside :mod:`objectstore.segment`, which defines the format and
writes it. The Spark planning grants (``agent/planning_grants.py``), tools and
the orphan GC read an object's contents without the metastore with
:func:`read_index` (one ranged GET of the tail); the compactor and tests walk a
whole object with :func:`iter_segment`. Everything read is validated against the
bytes actually present (magic, version, CRC32C, lengths, entry bounds and order)
before any field is trusted; failures raise
:class:`~objectstore.errors.SegmentFormatError`.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import google_crc32c

from objectstore.base import ObjectStore
from objectstore.errors import SegmentFormatError
from objectstore.segment import (
    _COUNT,
    _ENTRY,
    _TRAILER,
    DEFAULT_TAIL_GUESS,
    ENTRY_SIZE,
    HEADER,
    HEADER_SIZE,
    MAGIC,
    TRAILER_SIZE,
    VERSION,
    SegmentEntry,
)


def footer_length(tail: bytes | memoryview, object_size: int) -> int:
    """Total bytes of footer + trailer, from the trailer at the end of ``tail``."""
    if object_size < HEADER_SIZE + _COUNT.size + TRAILER_SIZE:
        raise SegmentFormatError(f"object of {object_size} bytes is too small to be a segment")
    if len(tail) < TRAILER_SIZE:
        raise SegmentFormatError(f"need the last {TRAILER_SIZE} bytes, got {len(tail)}")
    if len(tail) > object_size:
        raise SegmentFormatError(
            f"tail of {len(tail)} bytes longer than the object ({object_size})"
        )
    footer_len, _crc, magic = _TRAILER.unpack_from(tail, len(tail) - TRAILER_SIZE)
    if magic[:7] != MAGIC:
        raise SegmentFormatError(f"bad trailer magic {magic!r}")
    if magic[7] != VERSION:
        raise SegmentFormatError(f"unsupported segment version {magic[7]}")
    if footer_len < _COUNT.size or (footer_len - _COUNT.size) % ENTRY_SIZE:
        raise SegmentFormatError(f"bad footer length {footer_len}")
    total = footer_len + TRAILER_SIZE
    if HEADER_SIZE + total > object_size:
        raise SegmentFormatError(
            f"footer of {footer_len} bytes does not fit a {object_size}-byte object"
        )
    return total


def parse_footer(tail: bytes | memoryview, object_size: int) -> list[SegmentEntry]:
    """Decode and validate the index from the last ``len(tail)`` bytes of an object.

    ``tail`` must hold the whole footer (see :func:`footer_length`); extra
    leading bytes are fine.
    """
    total = footer_length(tail, object_size)
    if len(tail) < total:
        raise SegmentFormatError(f"tail holds {len(tail)} bytes, footer needs {total}")
    view = memoryview(tail)
    footer_len, crc, _ = _TRAILER.unpack_from(view, len(view) - TRAILER_SIZE)
    footer = bytes(view[len(view) - total : len(view) - TRAILER_SIZE])  # crc32c wants bytes
    if google_crc32c.value(footer) != crc:
        raise SegmentFormatError("footer CRC32C mismatch")
    (count,) = _COUNT.unpack_from(footer)
    if _COUNT.size + count * ENTRY_SIZE != footer_len:
        raise SegmentFormatError(f"footer declares {count} entries but holds {footer_len} bytes")
    data_end = object_size - total
    entries: list[SegmentEntry] = []
    pos = HEADER_SIZE
    for f in _ENTRY.iter_unpack(footer[_COUNT.size :]):
        e = SegmentEntry(uuid.UUID(bytes=f[0]), *f[1:])
        if e.partition < 0 or e.byte_len < 0 or e.record_count < 0:
            raise SegmentFormatError(f"negative field in entry {e}")
        if e.byte_pos < pos or e.byte_pos + e.byte_len > data_end:
            raise SegmentFormatError(f"entry out of order or out of bounds: {e}")
        pos = e.byte_pos + e.byte_len
        entries.append(e)
    return entries


async def read_index(
    store: ObjectStore, key: str, *, object_size: int | None = None, guess: int = DEFAULT_TAIL_GUESS
) -> list[SegmentEntry]:
    """An object's index: one ranged GET of the last ``guess`` bytes, a second if the footer is larger.

    Pass ``object_size`` when known (the metastore has it); otherwise a HEAD is
    made first.
    """
    size = (await store.head(key)).size if object_size is None else object_size
    start = max(0, size - max(guess, TRAILER_SIZE))
    tail = await store.get(key, start, size)
    if len(tail) != size - start:
        raise SegmentFormatError(f"{key}: object shorter than {size} bytes")
    total = footer_length(tail, size)
    if total > len(tail):
        more = await store.get(key, size - total, start)
        tail = more + tail
        if len(tail) != total:
            raise SegmentFormatError(f"{key}: short read of the footer")
    return parse_footer(tail, size)


def iter_segment(data: bytes | memoryview) -> Iterator[tuple[SegmentEntry, memoryview]]:
    """Yield ``(entry, batch bytes)`` for every batch of a whole segment object."""
    view = memoryview(data)
    if view[:HEADER_SIZE] != HEADER:
        raise SegmentFormatError(f"bad segment header {bytes(view[:HEADER_SIZE])!r}")
    for entry in parse_footer(view, len(view)):
        yield entry, view[entry.byte_pos : entry.byte_pos + entry.byte_len]
