"""Fetch planning: which batches fit, which byte ranges to read, and the bytes put back together.

Pure functions between the batch lookup and the block cache (:mod:`agent.fetch`):
:func:`select_batches` applies Kafka's byte budgets to a partition's batches,
:func:`plan_reads` turns the batches of a whole Fetch response into one read per
run of adjacent bytes of an object (a segment holds the batches of many
partitions side by side, so a consumer's partitions are usually one or a few
ranges), and :func:`assemble` copies each partition's batches out of the ranges
and patches their base offsets and leader epochs. No I/O here.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

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


@dataclass(frozen=True, slots=True)
class ReadRange:
    """One contiguous read of an object covering one or more batches."""

    object_key: str
    start: int
    end: int
    batches: tuple[BatchLocation, ...]


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


def plan_reads(batches: Iterable[BatchLocation]) -> list[ReadRange]:
    """Group batches by object and merge adjacent byte ranges into one read each."""
    by_object: dict[str, list[BatchLocation]] = {}
    for b in batches:
        by_object.setdefault(b.object_key, []).append(b)
    ranges: list[ReadRange] = []
    for key, group in by_object.items():
        group.sort(key=lambda b: b.byte_pos)
        start = group[0].byte_pos
        end = start + group[0].byte_len
        members = [group[0]]
        for b in group[1:]:
            if b.byte_pos <= end:  # adjacent (or, defensively, overlapping)
                end = max(end, b.byte_pos + b.byte_len)
                members.append(b)
            else:
                ranges.append(ReadRange(key, start, end, tuple(members)))
                start, end, members = b.byte_pos, b.byte_pos + b.byte_len, [b]
        ranges.append(ReadRange(key, start, end, tuple(members)))
    return ranges


def assemble(batches: Sequence[BatchLocation], reads: dict[tuple[str, int], tuple[int, bytes]]) -> bytes:
    """Copy ``batches`` (in order) out of the read ranges and patch their headers.

    ``reads`` maps ``(object_key, byte_pos)`` of each batch to ``(range start,
    range bytes)``.
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
