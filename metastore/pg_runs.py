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


def group_copy(group: GroupCommit, object_ids: Sequence[int], hwms: Sequence[int], now: int) -> Copy:
    """The COPY of ``group`` at offsets ``hwms`` (per partition), with run rows
    where they pay: see the module docstring."""
    rows = group.fill_rows(object_ids, hwms, now)
    if group.n == 0:
        return Copy(group.copy_bytes(), BATCH_COLUMNS, None, [])
    m = len(group.t_part)
    counts = np.bincount(group.idx, minlength=m)
    part = group.idx[group.order]  # partition of each row (rows are partition-major)
    txn = np.bincount(part, weights=rows["is_transactional"], minlength=m)
    packed = (counts >= 2) & (txn == 0)
    if not packed.any():
        return Copy(group.copy_bytes(), BATCH_COLUMNS, None, [])
    in_run = packed[part]
    head = next(int(i) for i, c in zip(object_ids, group.counts, strict=True) if c)
    out = [_COPY_HEADER]
    singles = rows[~in_run]
    if len(singles):
        p = np.zeros(len(singles), dtype=_PLAIN)
        for name in _ROW.names or ():
            p[name] = singles[name]
        p["n"] = len(COLUMNS)
        p["len_entries"] = -1
        out.append(p.tobytes())
    r = rows[in_run]
    e = np.empty(len(r), dtype=runs.ENTRY)
    for name in runs.ENTRY.names or ():
        e[name] = r[name]
    members = np.unique(e["object_id"]).tolist()
    size = runs.ENTRY.itemsize
    buf = e.tobytes()
    # each run's first row among r, and the aggregates of the runs
    starts = np.flatnonzero(np.r_[True, part[in_run][1:] != part[in_run][:-1]])
    ends = np.r_[starts[1:], len(r)]
    h = np.zeros(len(starts), dtype=_RUN_HEAD)
    h["n"] = len(COLUMNS)
    for name, kind in _FIELDS:
        h[f"len_{name}"] = np.dtype(kind).itemsize
    h["topic_id"] = r["topic_id"][starts]
    h["partition"] = r["partition"][starts]
    h["last_offset"] = r["last_offset"][ends - 1]
    h["base_offset"] = r["base_offset"][starts]
    h["object_id"] = head
    h["byte_len"] = np.add.reduceat(r["byte_len"].astype(np.int64), starts)
    h["record_count"] = np.add.reduceat(r["record_count"].astype(np.int64), starts)
    h["base_timestamp"] = np.minimum.reduceat(r["base_timestamp"].astype(np.int64), starts)
    h["max_timestamp"] = np.maximum.reduceat(r["max_timestamp"].astype(np.int64), starts)
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
