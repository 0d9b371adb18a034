"""The client half of the Postgres group commit (migration 0005): arguments, COPY rows, results.

``PostgresMetastore.commit_objects`` sequences a group of objects in one
transaction. Everything that needs no database state is done here, with numpy
rather than per-batch Python where it counts (a group can hold 100,000
batches): the distinct partitions in Postgres' lock order, each batch's
partition index, its offset relative to its partition's high watermark if
every batch is accepted (``rel``), each partition's totals. Then

1. ``floe_group_begin`` (fast path) locks and updates the partitions and
   returns their high watermarks before the group; the batch rows, whose
   offsets are now known, go in with one binary COPY built here
   (:meth:`GroupCommit.copy_rows`); COMMIT;
2. if the fast path declines (a retry or an out-of-order producer batch, an
   object already committed, an unknown partition), the transaction is rolled
   back and ``floe_commit_objects`` decides every batch server-side.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from itertools import repeat
from operator import attrgetter
from typing import Any

import numpy as np

from metastore.types import (
    BatchToCommit,
    CommitResult,
    ErrorCode,
    ObjectCommitResult,
    ObjectToCommit,
)

BEGIN_SQL = (
    "SELECT fast, object_ids, high_watermarks, log_start_offsets FROM floe_group_begin("
    "$1::bigint, $2::text[], $3::bigint[], $4::text[], $5::boolean[], $6::uuid[], $7::integer[], "
    "$8::bigint[], $9::bigint[], $10::integer[], $11::integer[], $12::bigint[], $13::integer[], "
    "$14::bigint[], $15::smallint[], $16::integer[])"
)

# The optimistic path (migration 0014): the object rows first (a key already
# registered, or repeated in the group, gets NULL), then the COPY at the expected
# offsets, then the seal that locks, checks and updates the partitions.
OBJECTS_SQL = """
WITH u AS (
    SELECT * FROM unnest($2::text[], $4::text[], $3::bigint[], $5::boolean[])
           WITH ORDINALITY AS u(key, agent_id, size, empty, ord)
), ins AS (
    INSERT INTO objects (key, agent_id, size, state, created_at, deleting_since)
    SELECT u.key, u.agent_id, u.size, CASE WHEN u.empty THEN 'deleting' ELSE 'live' END,
           $1::bigint, CASE WHEN u.empty THEN $1::bigint END
      FROM u
     ORDER BY u.key, u.ord  -- concurrent groups take key locks in one order
    ON CONFLICT (key) DO NOTHING
    RETURNING id, key
)
SELECT array_agg(x.id ORDER BY u.ord)
  FROM u
  LEFT JOIN ins x ON x.key = u.key
                 AND u.ord = (SELECT min(v.ord) FROM u v WHERE v.key = u.key)
"""

SEAL_SQL = (
    "SELECT fast, log_start_offsets FROM floe_group_seal($1::bigint, $2::uuid[], $3::integer[], "
    "$4::bigint[], $5::bigint[], $6::bigint[], $7::integer[], $8::integer[], $9::bigint[], "
    "$10::integer[], $11::bigint[], $12::smallint[], $13::integer[])"
)

GENERAL_SQL = (
    "SELECT object_ids, high_watermarks, log_start_offsets, errors, base_offsets "
    "FROM floe_commit_objects($1::bigint, $2::text[], $3::bigint[], $4::text[], $5::integer[], "
    "$6::uuid[], $7::integer[], $8::integer[], $9::bigint[], $10::bigint[], $11::integer[], "
    "$12::integer[], $13::bigint[], $14::bigint[], $15::integer[], $16::bigint[], "
    "$17::smallint[], $18::integer[], $19::boolean[])"
)

BATCH_COLUMNS = (
    "topic_id", "partition", "last_offset", "base_offset", "object_id", "byte_pos", "byte_len",
    "record_count", "base_timestamp", "max_timestamp", "append_time", "producer_id",
    "producer_epoch", "base_sequence", "is_transactional",
)  # fmt: skip

# One row of a binary COPY of BATCH_COLUMNS: a field count, then (length, value)
# per field, big-endian.
_FIELDS = (
    ("topic_id", "S16"), ("partition", ">i4"), ("last_offset", ">i8"), ("base_offset", ">i8"),
    ("object_id", ">i8"), ("byte_pos", ">i8"), ("byte_len", ">i8"), ("record_count", ">i4"),
    ("base_timestamp", ">i8"), ("max_timestamp", ">i8"), ("append_time", ">i8"),
    ("producer_id", ">i8"), ("producer_epoch", ">i2"), ("base_sequence", ">i4"),
    ("is_transactional", "u1"),
)  # fmt: skip
_ROW = np.dtype(
    [("n", ">i2")] + [f for name, kind in _FIELDS for f in ((f"len_{name}", ">i4"), (name, kind))]
)
_COPY_HEADER = b"PGCOPY\n\xff\r\n\x00" + struct.pack(">ii", 0, 0)
_COPY_TRAILER = struct.pack(">h", -1)

_UUID_INT = attrgetter("int")
_CODES = {code.value: code for code in ErrorCode}
_NO_COLUMNS: list[tuple[Any, ...]] = [() for _ in BatchToCommit._fields]


def _ints(values: Sequence[Any], dtype: str = "int64") -> np.ndarray:
    return np.fromiter(values, dtype=dtype, count=len(values))


class GroupCommit:
    """One group: its arguments, its COPY rows and the decoding of the answers."""

    def __init__(self, objects: Sequence[ObjectToCommit]) -> None:
        self.objects = objects
        batches = [b for o in objects for b in o.batches]
        self.n = n = len(batches)
        cols: list[Any] = list(zip(*batches, strict=True)) if batches else _NO_COLUMNS
        self.cols = cols
        topics, parts = cols[0], cols[1]
        # Partitions in Postgres' order (uuids compare by their bytes, as UUID.int).
        # Keyed by UUID.int: UUID.__hash__ is Python code, int hashing is not.
        topic_ints = list(map(_UUID_INT, topics))
        by_int = dict(zip(topic_ints, topics, strict=True))
        distinct_topics = [by_int[i] for i in sorted(by_int)]
        tmap = {t.int: i for i, t in enumerate(distinct_topics)}
        keys = (_ints(list(map(tmap.__getitem__, topic_ints))) << 32) | _ints(parts)
        uniq, inv = np.unique(keys, return_inverse=True)
        self.idx = idx = inv.reshape(-1).astype(np.int64)  # 0-based partition index per batch
        self.distinct_topics = distinct_topics
        self.t_tidx = t_tidx = uniq >> 32  # index into distinct_topics, per partition
        self.t_topic = [distinct_topics[t] for t in t_tidx.tolist()]
        self.t_part = (uniq & 0xFFFFFFFF).tolist()
        self.deltas = deltas = _ints(cols[5])
        sizes = deltas + 1
        m = len(uniq)
        self.t_size = np.bincount(idx, weights=sizes, minlength=m).astype(np.int64)
        self.t_bytes = np.bincount(idx, weights=_ints(cols[3]), minlength=m).astype(np.int64)
        # rel: sizes of the batches before each one on its partition, in group order.
        self.order = order = np.argsort(idx, kind="stable")
        before = np.cumsum(sizes[order]) - sizes[order]
        firsts = np.searchsorted(idx[order], np.arange(m))
        rel = np.empty(n, dtype=np.int64)
        rel[order] = before - np.repeat(before[firsts], np.diff(np.append(firsts, n)))
        self.rel = rel
        counts = [len(o.batches) for o in objects]
        self.counts = counts
        self.pids = pids = _ints(cols[8])
        self.sparse = np.flatnonzero(pids >= 0)
        self._rows: np.ndarray | None = None
        self._columns: dict[str, np.ndarray] | None = None

    # -- the fast path ------------------------------------------------------------------

    def begin_args(self) -> list[Any]:
        s = self.sparse
        return [
            [o.key for o in self.objects],
            [o.size for o in self.objects],
            [o.agent_id for o in self.objects],
            [c == 0 for c in self.counts],
            self.t_topic,
            self.t_part,
            self.t_size.tolist(),
            self.t_bytes.tolist(),
            (s + 1).tolist(),
            (self.idx[s] + 1).tolist(),
            self.rel[s].tolist(),
            self.deltas[s].tolist(),
            self.pids[s].tolist(),
            [self.cols[9][i] for i in s.tolist()],
            [self.cols[10][i] for i in s.tolist()],
        ]

    def objects_args(self) -> list[Any]:
        return self.begin_args()[:4]

    def seal_args(self, expected: list[int]) -> list[Any]:
        """``floe_group_seal``'s arguments: ``begin_args`` without the objects, with
        the expected high watermarks after the partitions."""
        args = self.begin_args()
        return [args[4], args[5], expected, *args[6:]]

    def prepare_rows(self) -> None:
        """Lay out the COPY rows except offsets and object ids (before any lock is
        taken, so that the partition rows stay locked for as short as possible)."""
        # Partition-major, offsets ascending: consecutive rows go to the same leaf of
        # the batches' primary key (object-major, a wide group's rows visited every
        # partition's leaf once per object): ~15% less COPY time for 16 objects x
        # 1,000 partitions, and a partition's rows of one group lie together in the heap.
        self._rows = self.layout(self.order)

    def columns(self) -> dict[str, np.ndarray]:
        """The batches' fields as arrays, in group order (computed once)."""
        if self._columns is None:
            cols = self.cols
            self._columns = {
                "byte_pos": _ints(cols[2]),
                "byte_len": _ints(cols[3]),
                "record_count": _ints(cols[4]),
                "base_timestamp": _ints(cols[6]),
                "max_timestamp": _ints(cols[7]),
                "producer_id": self.pids,
                "producer_epoch": _ints(cols[9]),
                "base_sequence": _ints(cols[10]),
                "is_transactional": _ints(cols[11], "uint8"),
            }
        return self._columns

    def layout(self, sel: np.ndarray, dtype: np.dtype = _ROW) -> np.ndarray:
        """COPY rows of ``dtype`` (``_ROW``, or ``_ROW`` plus more fields) for the
        batches ``sel`` (group-order indices, in COPY order), without offsets,
        object ids and time."""
        rows = np.zeros(len(sel), dtype=dtype)
        rows["n"] = len(dtype.names or ()) // 2
        names = dtype.names or ()
        for name in names:
            if name.startswith("len_") and name[4:] in names:
                rows[name] = dtype[name[4:]].itemsize
        # UUID.bytes is Python code: once per distinct topic, not once per partition
        distinct = np.frombuffer(b"".join(t.bytes for t in self.distinct_topics), dtype="S16")
        part = self.idx[sel]
        rows["topic_id"] = distinct[self.t_tidx][part]
        rows["partition"] = np.asarray(self.t_part, dtype=np.int64)[part]
        for name, values in self.columns().items():
            rows[name] = values[sel]
        return rows

    def copy_rows(self, object_ids: Sequence[int], hwms: Sequence[int], now: int) -> bytes:
        """The binary COPY of every batch row, offsets = high watermark + rel."""
        if self._rows is None:
            self.prepare_rows()
        rows = self._rows
        assert rows is not None
        base = np.asarray(hwms, dtype=np.int64)[self.idx] + self.rel
        order = self.order
        rows["base_offset"] = base[order]
        rows["last_offset"] = (base + self.deltas)[order]
        rows["object_id"] = np.repeat(np.asarray(object_ids, dtype=np.int64), self.counts)[order]
        rows["append_time"] = now
        return _COPY_HEADER + rows.tobytes() + _COPY_TRAILER

    def fast_results(self, hwms: Sequence[int], lsos: Sequence[int], now: int) -> list[ObjectCommitResult]:
        bases = (np.asarray(hwms, dtype=np.int64)[self.idx] + self.rel).tolist()
        lso = np.asarray(lsos, dtype=np.int64)[self.idx].tolist()
        make = CommitResult._make
        results = list(map(make, zip(repeat(ErrorCode.NONE), bases, repeat(now), lso)))
        return self._split(results, [True] * len(self.objects))

    # -- the general path ---------------------------------------------------------------

    def general_args(self) -> list[Any]:
        cols, s = self.cols, self.sparse.tolist()
        starts, first = [], 1
        for c in self.counts:
            starts.append(first)
            first += c
        txns = cols[11]
        sparse = sorted(set(s) | {i for i, t in enumerate(txns) if t})
        return [
            [o.key for o in self.objects],
            [o.size for o in self.objects],
            [o.agent_id for o in self.objects],
            starts,
            self.t_topic,
            self.t_part,
            (self.idx + 1).tolist(),
            cols[2],
            cols[3],
            cols[4],
            cols[5],
            cols[6],
            cols[7],
            [i + 1 for i in sparse],
            [cols[8][i] for i in sparse],
            [cols[9][i] for i in sparse],
            [cols[10][i] for i in sparse],
            [txns[i] for i in sparse],
        ]

    def general_results(self, row: Any, now: int) -> list[ObjectCommitResult]:
        hwms, lsos = row["high_watermarks"] or [], row["log_start_offsets"] or []
        errors, bases = row["errors"], row["base_offsets"]
        codes, unknown = _CODES, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        results = []
        for b, i in enumerate(self.idx.tolist()):
            if hwms[i] is None:
                results.append(CommitResult(unknown, -1, now, -1))
            else:
                results.append(CommitResult(codes[errors[b]], bases[b], now, lsos[i]))
        return self._split(results, [oid is not None for oid in row["object_ids"] or []])

    def _split(self, results: list[CommitResult], fresh: list[bool]) -> list[ObjectCommitResult]:
        out, pos = [], 0
        for count, ok in zip(self.counts, fresh, strict=True):
            if ok:
                out.append(ObjectCommitResult(results[pos : pos + count]))
            else:
                out.append(ObjectCommitResult([], already_committed=True))
            pos += count
        return out
