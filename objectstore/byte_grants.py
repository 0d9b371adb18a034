"""Byte-range grants: the bytes of an object a credential-free reader may fetch.

Where it sits: between the planning API (``agent/planning.py``), which knows
the batches a Kafka principal may read, and the object store's presigner
(:func:`objectstore.presign_get`). A segment object holds the batches of many
topics, so a reader is never handed a URL for a whole segment object: it gets
one URL per run of adjacent batches it was authorized for, and each URL signs
its exact ``Range`` header (SigV4 query auth puts ``range`` in
``X-Amz-SignedHeaders``, so S3 refuses the URL with any other range or with
none). Parquet objects the compactor writes hold one partition of one topic,
so those are presigned whole. Executors read a granted run whole (the signed
header cannot change) and cut their batches out of it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

# A run of adjacent batches is cut after this many bytes: a task reading the
# first batch of a run downloads all of it, so runs stay small next to a task.
MAX_GRANT_BYTES = 8 * 1024 * 1024

Range = tuple[int, int]  # [start, end) in bytes


def merge_ranges(spans: Iterable[Range], max_bytes: int = MAX_GRANT_BYTES) -> list[Range]:
    """Sorted runs of adjacent or overlapping ``spans``, each cut before it passes
    ``max_bytes`` (a single span larger than that stays whole). Holes are never
    bridged: the bytes between two spans belong to someone else."""
    out: list[Range] = []
    for s, e in sorted((int(s), int(e)) for s, e in spans if e > s):
        if out and s <= out[-1][1]:
            ps, pe = out[-1]
            if e <= pe:
                continue  # inside the last run already
            if s < pe or e - ps <= max_bytes:  # overlapping, or adjacent and small enough
                out[-1] = (ps, e)
                continue
        out.append((s, e))
    return out


def covered(start: int, end: int, allowed: Sequence[Range]) -> bool:
    """Does the union of ``allowed`` hold every byte of ``[start, end)``?"""
    pos = start
    for s, e in sorted(allowed):
        if s > pos:
            break
        pos = max(pos, e)
        if pos >= end:
            return True
    return pos >= end


def range_header(start: int, end: int) -> str:
    """The HTTP ``Range`` value of ``[start, end)`` (what a grant's URL signs)."""
    if end <= start or start < 0:
        raise ValueError(f"empty byte range [{start}, {end})")
    return f"bytes={start}-{end - 1}"
