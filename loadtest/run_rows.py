"""PROTOTYPE (benchmark only): one index row per (group, partition) run.

Built since 2026-11-28 (metastore.runs, metastore.pg_runs: the "group commit"
path writes run rows into ``batches``). Kept as the lean reference the product
path is measured against: no producer checks, no optimistic seal, no readers.

Where it sits: a path of ``python -m loadtest.metastore`` ("group (runs)"),
beside the commit path ("group commit"), to measure before building it
what issue 18's way past the batch-row floor would give. Before that a group of G
objects touching P partitions inserts G x P rows into ``batches`` (one per
batch, each a primary-key insert at a scattered position: the floor the
benchmark measures). Here the same group inserts P rows into a table of its
own, ``bench_batch_runs``: one per partition, covering the offsets of every
batch the group put there, with the batches' fields packed in a ``bytea``
(what a reader would unpack to find a batch's object and byte range).

In one transaction, as today's path: the object rows; each touched partition
row updated once (``high_watermark`` += the group's records), which returns
the offsets; the run rows by one binary COPY. Left out, as in the "group
(memory)" prototype: producer checks (plain batches only), the declining and
general paths, and what the readers would need (unpacking, object references
for the GC: a per-object count set at insert costs the commit nothing). One
group at a time on one connection (today's path has two in flight), so the
number is, if anything, low.
"""

from __future__ import annotations

import struct
import time
from collections.abc import Sequence

import asyncpg
import numpy as np

from metastore.engine import asyncpg_dsn
from metastore.pg_group import GroupCommit
from metastore.types import ObjectCommitResult, ObjectToCommit

TABLE = """
CREATE TABLE IF NOT EXISTS bench_batch_runs (
    topic_id uuid NOT NULL,
    partition integer NOT NULL,
    last_offset bigint NOT NULL,
    base_offset bigint NOT NULL,
    entries bytea NOT NULL,
    PRIMARY KEY (topic_id, partition, last_offset)
)
"""
# The object rows of a group, ids in the objects' order (both prototypes use it).
OBJECTS_SQL = (
    "WITH ins AS (INSERT INTO objects (key, agent_id, size, state, created_at) "
    "SELECT k, a, s, 'live', $4 FROM unnest($1::text[], $2::text[], $3::bigint[]) "
    "WITH ORDINALITY AS u(k, a, s, ord) ORDER BY ord RETURNING id) "
    "SELECT array_agg(id ORDER BY id) FROM ins"
)
ADVANCE_SQL = (
    "UPDATE partitions p SET high_watermark = p.high_watermark + u.d "
    "FROM unnest($1::uuid[], $2::integer[], $3::bigint[]) AS u(t, pa, d) "
    "WHERE p.topic_id = u.t AND p.partition = u.pa "
    "RETURNING p.topic_id, p.partition, p.high_watermark - u.d"
)
# A batch inside a run: what a reader needs of it (topic and partition are the row's).
_ENTRY = np.dtype(
    [
        ("last_offset", "<i8"), ("object_id", "<i8"), ("byte_pos", "<i8"), ("byte_len", "<i4"),
        ("record_count", "<i4"), ("base_timestamp", "<i8"), ("max_timestamp", "<i8"),
        ("producer_id", "<i8"), ("producer_epoch", "<i2"), ("base_sequence", "<i4"),
        ("is_transactional", "u1"),
    ]
)  # fmt: skip
_ROW_HEAD = struct.Struct(">hi16siiiqiqi")  # 5 fields: uuid, int4, int8, int8, then the bytea's length
_COPY_HEADER = b"PGCOPY\n\xff\r\n\x00" + struct.pack(">ii", 0, 0)
_COPY_TRAILER = struct.pack(">h", -1)


async def insert_objects(con: asyncpg.Connection, objects: Sequence[ObjectToCommit], now: int) -> list[int]:
    """Register a group's objects (live) and return their ids, in order."""
    ids: list[int] = await con.fetchval(
        OBJECTS_SQL, [o.key for o in objects], [o.agent_id for o in objects], [o.size for o in objects], now
    )
    return ids


def run_rows(group: GroupCommit, object_ids: Sequence[int], hwms: Sequence[int], now: int) -> bytes:
    """The binary COPY of one row per touched partition (``group``'s partition order)."""
    group.copy_rows(object_ids, hwms, now)  # lays out every batch's fields, partition-major
    rows = group._rows
    assert rows is not None
    packed = np.empty(len(rows), dtype=_ENTRY)
    for name in _ENTRY.names or ():
        packed[name] = rows[name]
    buf = packed.tobytes()
    size = _ENTRY.itemsize
    ends = np.cumsum(np.bincount(group.idx, minlength=len(group.t_part))).tolist()
    first_offsets = rows["base_offset"].tolist()
    last_offsets = rows["last_offset"].tolist()
    parts: list[bytes] = [_COPY_HEADER]
    start = 0
    for topic, partition, end in zip(group.t_topic, group.t_part, ends, strict=True):
        entries = buf[start * size : end * size]
        parts.append(
            _ROW_HEAD.pack(
                5, 16, topic.bytes, 4, partition, 8, last_offsets[end - 1], 8, first_offsets[start], len(entries)
            )
        )
        parts.append(entries)
        start = end
    parts.append(_COPY_TRAILER)
    return b"".join(parts)


class RunRowSequencer:
    """Commits groups as run rows (see the module docstring); plain batches only."""

    def __init__(self, url: str) -> None:
        self.dsn = asyncpg_dsn(url)
        self.con: asyncpg.Connection | None = None

    async def start(self) -> RunRowSequencer:
        self.con = await asyncpg.connect(self.dsn, server_settings={"jit": "off"})
        await self.con.execute(TABLE)
        return self

    async def commit_objects(self, objects: Sequence[ObjectToCommit]) -> list[ObjectCommitResult]:
        assert self.con is not None
        group = GroupCommit(objects)
        group.prepare_rows()
        now = int(time.time() * 1000)
        async with self.con.transaction():
            ids = await insert_objects(self.con, objects, now)
            before = {
                (r[0], r[1]): r[2]
                for r in await self.con.fetch(ADVANCE_SQL, group.t_topic, group.t_part, group.t_size.tolist())
            }
            hwms = [before[tp] for tp in zip(group.t_topic, group.t_part, strict=True)]
            rows = run_rows(group, ids, hwms, now)
            await self.con.copy_to_table(
                "bench_batch_runs",
                source=memoryview(rows),
                columns=("topic_id", "partition", "last_offset", "base_offset", "entries"),
                format="binary",
            )
        return group.fast_results(hwms, [0] * len(hwms), now)

    async def close(self) -> None:
        if self.con is not None:
            await self.con.close()


def unpack(entries: bytes) -> np.ndarray:
    """A run row's batches (what a reader would do with ``entries``)."""
    return np.frombuffer(entries, dtype=_ENTRY)
