"""Fetch planning: which batches fit, and the bytes put back together.

Pure functions between the batch lookup and the block cache (:mod:`agent.fetch`):
:func:`select_batches` applies Kafka's byte budgets to a partition's batches, and
:func:`assemble` copies a partition's batches out of the bytes read for them and
patches their base offsets and leader epochs. No I/O here.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

from kafka_protocol.records import (
    BATCH_LENGTH_OFFSET,
    LOG_OVERHEAD,
    MAGIC_OFFSET,
    patch_base_offset,
    patch_partition_leader_epoch,
)
from metastore.types import BatchLocation

_I32 = struct.Struct(">i")


class BatchReadError(Exception):
    """The bytes at a batch's recorded position are not that batch."""


def select_batches(
    batches: Sequence[BatchLocation], limit: int, *, min_one: bool
) -> list[BatchLocation]:
    """The leading batches whose total size stays within ``limit``; if none fits and
    ``min_one``, the first batch alone (Kafka returns it whole so that large
    messages make progress)."""
    out: list[BatchLocation] = []
    total = 0
    for b in batches:
        if total + b.byte_len > limit:
            break
        out.append(b)
        total += b.byte_len
    if not out and min_one and batches:
        out.append(batches[0])
    return out


def assemble(batches: Sequence[BatchLocation], reads: dict[tuple[str, int], tuple[int, bytes]]) -> bytes:
    """Copy ``batches`` (in order) out of the bytes read and patch their headers.

    ``reads`` maps ``(object_key, byte_pos)`` of each batch to ``(start, bytes)``:
    bytes of the object from ``start`` on that hold the batch.
    """
    out = bytearray(sum(b.byte_len for b in batches))
    pos = 0
    for b in batches:
        start, data = reads[(b.object_key, b.byte_pos)]
        lo = b.byte_pos - start
        chunk = data[lo : lo + b.byte_len]
        if len(chunk) != b.byte_len:
            raise BatchReadError(
                f"object {b.object_key} has {len(chunk)} bytes at {b.byte_pos}, expected {b.byte_len}"
            )
        out[pos : pos + b.byte_len] = chunk
        (length,) = _I32.unpack_from(out, pos + BATCH_LENGTH_OFFSET)
        if length + LOG_OVERHEAD != b.byte_len or out[pos + MAGIC_OFFSET] != 2:
            raise BatchReadError(
                f"object {b.object_key} at {b.byte_pos}: not a v2 batch of {b.byte_len} bytes"
            )
        patch_base_offset(out, pos, b.base_offset)
        patch_partition_leader_epoch(out, pos, 0)
        pos += b.byte_len
    return bytes(out)
