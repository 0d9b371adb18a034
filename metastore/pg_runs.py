"""The Postgres group commit's COPY with run rows (issue 18; ``metastore.runs``).

Where it sits: between :class:`metastore.pg_group.GroupCommit`, which lays out
one COPY row per batch, and ``PostgresMetastore.commit_objects``, which sends
the COPY. A group sends instead one row per partition where it put at least
two batches (of one object or several) and no transactional one, those batches'
fields packed in ``entries``; every other batch keeps a row of its own (with
``entries`` NULL). The run rows name the group's head object (its first object
with batches); :data:`HEADS_SQL` records the head on every object packed in a
run, in the same transaction.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from metastore import runs
from metastore.pg_group import (
    _COPY_HEADER,
    _COPY_TRAILER,
    _FIELDS,
    _ROW,
    BATCH_COLUMNS,
    GroupCommit,
)

COLUMNS = (*BATCH_COLUMNS, "entries")
HEADS_SQL = "UPDATE objects SET run_head = $1 WHERE id = ANY($2::bigint[])"

# A row of COLUMNS with entries NULL: the per-batch row and a length of -1.
_PLAIN = np.dtype([*_ROW.descr, ("len_entries", ">i4")])
# A run row up to its entries' bytes: the per-batch row's fields, then the entries' length.
_RUN_HEAD = np.dtype(
    [("n", ">i2")]
    + [f for name, kind in _FIELDS for f in ((f"len_{name}", ">i4"), (name, kind))]
    + [("len_entries", ">i4")]
)


class Copy(NamedTuple):
    """A group's COPY: its bytes, its columns, and the head and the objects packed
    in run rows (``None`` and empty when there is no run)."""

    data: bytes
    columns: tuple[str, ...]
    head: int | None
    members: list[int]


def prepare(group: GroupCommit, run_rows: bool = True) -> None:
    """What can be done before any lock: the column arrays, and the per-batch
    rows if the group has no run (none ever, without ``run_rows``)."""
    if not run_rows or _packed(group) is None:
        group.prepare_rows()


def _packed(group: GroupCommit) -> np.ndarray | None:
    """Per partition, whether its batches go in a run (None: no partition's do)."""
    if group.n == 0:
        return None
    m = len(group.t_part)
    counts = np.bincount(group.idx, minlength=m)
    txn = np.bincount(group.idx, weights=group.columns()["is_transactional"], minlength=m)
    packed = (counts >= 2) & (txn == 0)
    return packed if packed.any() else None


def group_copy(
    group: GroupCommit, object_ids: Sequence[int], hwms: Sequence[int], now: int, run_rows: bool = True
) -> Copy:
    """The COPY of ``group`` at offsets ``hwms`` (per partition), with run rows
    where they pay (unless not ``run_rows``): see the module docstring. Run batches go
    from the group's column arrays straight into entries; only the others get
    per-batch rows."""
    packed = _packed(group) if run_rows else None
    if packed is None:
        return Copy(group.copy_rows(object_ids, hwms, now), BATCH_COLUMNS, None, [])
    cols = group.columns()
    idx, order = group.idx, group.order
    base = np.asarray(hwms, dtype=np.int64)[idx] + group.rel  # group order
    last = base + group.deltas
    oid = np.repeat(np.asarray(object_ids, dtype=np.int64), group.counts)
    in_run = packed[idx[order]]
    head = next(int(i) for i, c in zip(object_ids, group.counts, strict=True) if c)
    out = [_COPY_HEADER]
    plain = order[~in_run]  # partition-major, as the per-batch COPY
    if len(plain):
        p = group.layout(plain, _PLAIN)
        p["base_offset"] = base[plain]
        p["last_offset"] = last[plain]
        p["object_id"] = oid[plain]
        p["append_time"] = now
        p["len_entries"] = -1
        out.append(p.tobytes())
    sel = order[in_run]  # the run batches, partition-major, offsets ascending
    e = np.empty(len(sel), dtype=runs.ENTRY)
    e["base_offset"] = base[sel]
    e["last_offset"] = last[sel]
    e["object_id"] = oid[sel]
    for name in runs.ENTRY.names or ():
        if name in cols:
            e[name] = cols[name][sel]
    members = np.unique(e["object_id"]).tolist()
    size = runs.ENTRY.itemsize
    buf = e.tobytes()
    part = idx[sel]
    # each run's first batch among sel, and the aggregates of the runs
    starts = np.flatnonzero(np.r_[True, part[1:] != part[:-1]])
    ends = np.r_[starts[1:], len(sel)]
    first = sel[starts]
    h = group.layout(first, _RUN_HEAD)  # topic, partition, lengths; the rest is the run's
    h["last_offset"] = last[sel[ends - 1]]
    h["base_offset"] = base[first]
    h["object_id"] = head
    h["byte_pos"] = 0
    h["byte_len"] = np.add.reduceat(e["byte_len"].astype(np.int64), starts)
    h["record_count"] = np.add.reduceat(e["record_count"].astype(np.int64), starts)
    h["base_timestamp"] = np.minimum.reduceat(e["base_timestamp"], starts)
    h["max_timestamp"] = np.maximum.reduceat(e["max_timestamp"], starts)
    h["append_time"] = now
    h["producer_id"] = -1
    h["producer_epoch"] = -1
    h["base_sequence"] = -1
    h["len_entries"] = (ends - starts) * size + 1
    heads = h.tobytes()
    hs = _RUN_HEAD.itemsize
    fmt = bytes([runs.FORMAT])
    for i, (a, b) in enumerate(zip(starts.tolist(), ends.tolist(), strict=True)):
        out += (heads[i * hs : (i + 1) * hs], fmt, buf[a * size : b * size])
    out.append(_COPY_TRAILER)
    return Copy(b"".join(out), COLUMNS, head, members)
