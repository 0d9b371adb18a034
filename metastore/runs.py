"""Run rows: one ``batches`` row standing for a run of batches (issue 18, migration 0016).

Where it sits: under every reader of the batch index (both metastores' batch
lookups, ListOffsets by time, the compactor's queries and swap, retention and
the GC) and under the Postgres group commit (``metastore.pg_group``), which
writes them. A group of G objects touching P partitions used to insert one
row per batch, G x P rows or more: at 1,000 partitions per object that COPY
was the floor no sequencer could pass (docs/ARCHITECTURE.md, "Run rows"). The
group commit now writes one row per partition where the group (one object or
several) put two batches or more, their fields packed in ``entries``:

* the row's key columns (``last_offset``, ``base_offset``) span the run, so
  "the rows with ``last_offset >= x`` in offset order" still finds the run
  holding ``x``; readers unpack it (:func:`unpack`) and drop the batches
  below ``x``;
* ``byte_len`` and ``record_count`` are the run's totals, ``max_timestamp`` and
  ``append_time`` its maxima: retention and the lookups' byte windows treat a
  run as a whole (as Kafka treats a segment), readers then trim per batch;
* ``object_id`` is the group's *head* object (its first object with batches);
  the other objects of the group name it in ``objects.run_head``, so "no row
  references this object" (the GC) becomes "none references it or its head"
  (:func:`unreferenced`);
* runs hold plain and idempotent batches only: a partition whose share of the
  group has a transactional batch gets one row per batch, so the transaction
  code (``is_transactional`` rows) is unchanged; the producer state stays in
  ``producer_batches``.

A row with ``entries`` NULL is one batch, as before. The compactor turns runs
back into one row per batch before it swaps (:func:`stored`, used by
``CompactionMixin``), and clears ``run_head`` of the group's objects then.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
from sqlalchemy import ColumnElement, exists, or_, select
from sqlalchemy.ext.asyncio import AsyncConnection
from sqlalchemy.orm import aliased

from metastore import schema as s
from metastore.base import chunks
from metastore.types import BatchLocation, MetastoreError, StoredBatch

FORMAT = 1  # first byte of ``entries``
# A batch inside a run: what readers and the compactor need of it (topic and
# partition are the row's, append time is the row's: one group, one time).
ENTRY = np.dtype(
    [
        ("base_offset", "<i8"), ("last_offset", "<i8"), ("object_id", "<i8"), ("byte_pos", "<i8"),
        ("byte_len", "<i4"), ("record_count", "<i4"), ("base_timestamp", "<i8"),
        ("max_timestamp", "<i8"), ("producer_id", "<i8"), ("producer_epoch", "<i2"),
        ("base_sequence", "<i4"),
    ]
)  # fmt: skip
_HEAD = bytes([FORMAT])
_CHUNK = 500  # ids per IN (...) list


class RunFormatError(ValueError):
    """``entries`` this code cannot read (a newer format, or damaged)."""


def pack(entries: np.ndarray) -> bytes:
    """``entries`` (an array of :data:`ENTRY`, offsets ascending) as a column value."""
    return _HEAD + entries.astype(ENTRY, copy=False).tobytes()


def unpack(entries: bytes | memoryview) -> np.ndarray:
    """The batches of a run, offsets ascending."""
    raw = memoryview(entries)
    if len(raw) < 1 or raw[0] != FORMAT or (len(raw) - 1) % ENTRY.itemsize:
        raise RunFormatError(
            f"run entries of {len(raw)} bytes, format {raw[0] if len(raw) else None}"
        )
    return np.frombuffer(raw, dtype=ENTRY, offset=1)


def object_ids(entries: bytes | memoryview) -> set[int]:
    return set(unpack(entries)["object_id"].tolist())


def locations(
    entries: bytes | memoryview, keys: Mapping[int, str], append_time: int, offset: int
) -> list[BatchLocation]:
    """A run's batches from ``offset`` on, as lookups answer them."""
    e = unpack(entries)
    e = e[e["last_offset"] >= offset]
    return [
        BatchLocation(keys[oid], pos, n, base, last, count, mts, append_time)
        for base, last, oid, pos, n, count, _, mts, _, _, _ in e.tolist()
    ]


def stored(
    topic_id: uuid.UUID,
    partition: int,
    entries: bytes | memoryview,
    keys: Mapping[int, str],
    append_time: int,
) -> list[StoredBatch]:
    """A run's batches as full rows (the compactor's view, and what explodes it)."""
    out = []
    for base, last, oid, pos, n, count, bts, mts, pid, epoch, seq in unpack(entries).tolist():
        key = keys.get(oid, "")
        out.append(
            StoredBatch(
                topic_id,
                partition,
                base,
                last,
                oid,
                key,
                pos,
                n,
                count,
                bts,
                mts,
                append_time,
                pid,
                epoch,
                seq,
            )
        )
    return out


def _candidates(row: Any, lso: int, from_offset: int, append: bool) -> list[tuple[int, int, int]]:
    """ListOffsets' view of a lookup row (base_offset, last_offset, ts, entries):
    ``(base, last, ts)`` of each batch in it within the bounds."""
    if row.entries is None:
        return [(int(row.base_offset), int(row.last_offset), int(row.ts))]
    e = unpack(row.entries)
    keep = e["last_offset"] >= lso
    if from_offset > 0:
        keep &= e["base_offset"] >= from_offset
    e = e[keep]
    ts = [int(row.ts)] * len(e) if append else e["max_timestamp"].tolist()
    return list(zip(e["base_offset"].tolist(), e["last_offset"].tolist(), ts, strict=True))


def pick_max(
    rows: Sequence[Any], lso: int, from_offset: int, append: bool
) -> tuple[int, int] | None:
    """ListOffsets -3 over rows in (ts desc, last_offset) order: ``(last offset,
    ts)`` of the first batch with the largest timestamp."""
    best: tuple[int, int] | None = None  # (-ts, last)
    for r in rows:
        for _, last, ts in _candidates(r, lso, from_offset, append):
            if best is None or (-ts, last) < best:
                best = (-ts, last)
    return None if best is None else (best[1], -best[0])


def pick_first(
    rows: Sequence[Any], lso: int, from_offset: int, append: bool, timestamp: int
) -> tuple[int, int] | None:
    """ListOffsets by time over rows in offset order: ``(base offset, ts)`` of the
    first batch whose timestamp is at least ``timestamp``."""
    for r in rows:
        for base, _, ts in _candidates(r, lso, from_offset, append):
            if ts >= timestamp:
                return base, ts
    return None


def trim(found: Iterable[BatchLocation], max_bytes: int, max_batches: int) -> list[BatchLocation]:
    """The prefix a lookup answers: the first batch always, then while the bytes
    fit ``max_bytes`` and there are at most ``max_batches``."""
    out: list[BatchLocation] = []
    total = 0
    for b in found:
        total += b.byte_len
        if out and (total > max_bytes or len(out) >= max_batches):
            break
        out.append(b)
    return out


def expand(
    rows: Iterable[Sequence[Any]], keys: Mapping[int, str], offset: int, max_bytes: int, max_batches: int
) -> list[BatchLocation]:
    """A lookup's rows (key, byte_pos, byte_len, base, last, count, max ts, append
    time, entries) as its answer: a run unpacked from ``offset`` on, then trimmed
    (the lookups read up to the row that crosses ``max_bytes``, and a run's total
    counts batches before ``offset`` and after the limit)."""
    out: list[BatchLocation] = []
    for r in rows:
        if r[8] is None:
            out.append(BatchLocation(r[0], r[1], r[2], r[3], r[4], r[5], r[6], r[7]))
        else:
            try:
                out.extend(locations(r[8], keys, r[7], offset))
            except KeyError as e:  # read after the GC dropped it: the caller asks again
                raise MetastoreError(f"object {e} of a run row is gone") from e
    return trim(out, max_bytes, max(1, max_batches))


def run_object_ids(entries: Iterable[bytes | memoryview | None]) -> set[int]:
    """Every object named inside the runs among ``entries`` (NULL: a plain row)."""
    out: set[int] = set()
    for e in entries:
        if e is not None:
            out |= object_ids(e)
    return out


async def object_keys(conn: AsyncConnection, ids: set[int]) -> dict[int, str]:
    """Keys of the objects named inside run rows (one gone: MetastoreError, as
    for a read that raced the GC; the caller asks again)."""
    keys: dict[int, str] = {}
    o = s.objects.c
    for chunk in chunks(sorted(ids), _CHUNK):
        keys.update(
            (r.id, r.key) for r in await conn.execute(select(o.id, o.key).where(o.id.in_(chunk)))
        )
    if len(keys) < len(ids):
        raise MetastoreError(f"objects {sorted(ids - set(keys))} of run rows are gone")
    return keys


def unreferenced(o: Any = None) -> ColumnElement[bool]:
    """SQL: no batch row names object ``o`` (default: the objects table), nor,
    for an object of a run group, its head."""
    o = o if o is not None else s.objects.c
    b = s.batches.c
    head = aliased(s.batches)
    return ~exists().where(b.object_id == o.id) & or_(
        o.run_head.is_(None), ~exists().where(head.c.object_id == o.run_head)
    )
