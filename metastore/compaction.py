"""Compaction bookkeeping: planner queries, the compare-and-swap of batch rows,
retention, and the key checks of the orphan GC.

Where it sits: the compactor plans from :meth:`list_compaction_objects` /
:meth:`batches_in_objects` / :meth:`partition_batches`, writes new objects, and
then calls :meth:`swap_batches`, which in ONE transaction checks that every
batch row it planned from is still exactly as read (same object, position,
length, offsets), replaces them with the new rows, registers the new objects
and moves input objects no row references any more to ``deleting``. Any
difference (retention, DeleteRecords, a topic deletion or another compactor got
there first) makes the swap change nothing and return ``ok=False``; the new
objects are then registered directly as ``deleting`` so the GC removes them
after the grace period. Offsets never change: replacements keep each batch's
``base_offset``/``last_offset``.

Partition rows are locked in sorted ``(topic_id, partition)`` order, the order
``commit_object`` uses, so swaps and commits cannot deadlock on Postgres; on
SQLite ``BEGIN IMMEDIATE`` serialises writers anyway. All of this is cold-path
SQLAlchemy code shared by both databases.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Sequence
from typing import Any

from sqlalchemy import ColumnElement, and_, delete, func, insert, or_, select, tuple_, update
from sqlalchemy.ext.asyncio import AsyncConnection

from metastore import runs, sqlite_swap
from metastore import schema as s
from metastore.base import SqlBase, chunks
from metastore.types import (
    CompactionObject,
    ErrorCode,
    NewObject,
    ParquetFileInfo,
    PartitionSummary,
    RetentionResult,
    StoredBatch,
    SwapResult,
)

COMPACTOR_AGENT_ID = "compactor"
_CHUNK = 500  # tuples per IN (...) list (SQLite allows 32766 bound variables)


_B = s.batches.c
_O = s.objects.c
_BATCH_COLUMNS = (
    _B.topic_id,
    _B.partition,
    _B.base_offset,
    _B.last_offset,
    _B.object_id,
    _O.key,
    _B.byte_pos,
    _B.byte_len,
    _B.record_count,
    _B.base_timestamp,
    _B.max_timestamp,
    _B.append_time,
    _B.producer_id,
    _B.producer_epoch,
    _B.base_sequence,
    _B.is_transactional,
)


def _stored(r: Any) -> StoredBatch:
    return StoredBatch(
        r.topic_id,
        r.partition,
        r.base_offset,
        r.last_offset,
        r.object_id,
        r.key,
        r.byte_pos,
        r.byte_len,
        r.record_count,
        r.base_timestamp,
        r.max_timestamp,
        r.append_time,
        r.producer_id,
        r.producer_epoch,
        r.base_sequence,
        bool(r.is_transactional),
    )


async def _expanded(
    conn: AsyncConnection, rows: Sequence[Any], objects: set[int] | None = None
) -> list[StoredBatch]:
    """Rows of _BATCH_COLUMNS + entries as batches, run rows unpacked (only the
    batches stored in ``objects``, when given)."""
    keys = await runs.object_keys(conn, runs.run_object_ids(r.entries for r in rows))
    out: list[StoredBatch] = []
    for r in rows:
        if r.entries is None:
            out.append(_stored(r))
        else:
            inner = runs.stored(r.topic_id, r.partition, r.entries, keys, r.append_time)
            out.extend(b for b in inner if objects is None or b.object_id in objects)
    return out


def _row(b: StoredBatch, object_id: int) -> dict[str, Any]:
    return {
        "topic_id": b.topic_id,
        "partition": b.partition,
        "last_offset": b.last_offset,
        "base_offset": b.base_offset,
        "object_id": object_id,
        "byte_pos": b.byte_pos,
        "byte_len": b.byte_len,
        "record_count": b.record_count,
        "base_timestamp": b.base_timestamp,
        "max_timestamp": b.max_timestamp,
        "append_time": b.append_time,
        "producer_id": b.producer_id,
        "producer_epoch": b.producer_epoch,
        "base_sequence": b.base_sequence,
        "is_transactional": b.is_transactional,
    }


def _row_keys(keys: Iterable[tuple[uuid.UUID, int, int]]) -> list[ColumnElement[bool]]:
    """WHERE clauses naming batch rows by key, one partition at a time
    (``topic_id = t AND partition = p AND last_offset IN (...)``): both databases
    walk the primary key for that form, where a row-value ``(t, p, o) IN (...)``
    list of hundreds of tuples was planned as a scan of the whole table (the
    journal's consolidation swaps took 0.1-0.4 s)."""
    by_tp: dict[tuple[uuid.UUID, int], list[int]] = {}
    for t, p, o in keys:
        by_tp.setdefault((t, p), []).append(o)
    out: list[ColumnElement[bool]] = []
    for (t, p), offsets in sorted(by_tp.items()):
        for chunk in chunks(sorted(offsets), _CHUNK):
            out.append(and_(_B.topic_id == t, _B.partition == p, _B.last_offset.in_(chunk)))
    return out


class CompactionMixin(SqlBase):
    # -- planner queries ------------------------------------------------------------

    async def list_compaction_objects(
        self, level: int, *, fmt: str = "segment", limit: int = 10_000
    ) -> list[CompactionObject]:
        """Live objects of ``level`` and format, oldest first."""
        async with self._read() as conn:
            rows = await conn.execute(
                select(_O.id, _O.key, _O.size, _O.level, _O.format, _O.created_at)
                .where(_O.state == "live", _O.level == level, _O.format == fmt)
                .order_by(_O.created_at, _O.id)
                .limit(limit)
            )
            return [
                CompactionObject(r.id, r.key, r.size, r.level, r.format, r.created_at) for r in rows
            ]

    async def batches_in_objects(self, object_ids: Sequence[int]) -> list[StoredBatch]:
        """Every batch stored in these objects, by (topic, partition, offset): their
        own rows, and their batches inside run rows (``metastore.runs``)."""
        out: list[StoredBatch] = []
        wanted = set(object_ids)
        async with self._read() as conn:
            for chunk in chunks(list(object_ids), _CHUNK):
                heads = select(_O.run_head).where(_O.id.in_(chunk), _O.run_head.is_not(None))
                rows = await conn.execute(
                    select(*_BATCH_COLUMNS, _B.entries)
                    .join(s.objects, _O.id == _B.object_id)
                    .where(
                        or_(
                            _B.object_id.in_(chunk) & _B.entries.is_(None),
                            _B.object_id.in_(heads) & _B.entries.is_not(None),
                        )
                    )
                )
                out.extend(await _expanded(conn, list(rows), wanted))
        out.sort(key=lambda b: (b.topic_id, b.partition, b.last_offset))
        return out

    async def batches_in_object_keys(self, keys: Sequence[str]) -> list[StoredBatch]:
        """:meth:`batches_in_objects` of the live objects named by ``keys`` (the
        agent's consolidator knows its journal objects by key)."""
        ids: list[int] = []
        async with self._read() as conn:
            for chunk in chunks(list(keys), _CHUNK):
                ids.extend(
                    (
                        await conn.execute(
                            select(_O.id).where(_O.key.in_(chunk), _O.state == "live")
                        )
                    ).scalars()
                )
        return await self.batches_in_objects(ids) if ids else []

    async def partition_batches(
        self,
        topic_id: uuid.UUID,
        partition: int,
        *,
        min_level: int = 0,
        max_level: int = 1 << 14,
        formats: Sequence[str] = ("segment",),
        limit: int = 100_000,
    ) -> list[StoredBatch]:
        """A partition's batches in objects of the given levels and formats, by offset
        (a run row's batches are all in fresh objects, of its head's level and format)."""
        async with self._read() as conn:
            rows = await conn.execute(
                select(*_BATCH_COLUMNS, _B.entries)
                .join(s.objects, _O.id == _B.object_id)
                .where(
                    _B.topic_id == topic_id,
                    _B.partition == partition,
                    _O.level >= min_level,
                    _O.level <= max_level,
                    _O.format.in_(list(formats)),
                )
                .order_by(_B.last_offset)
                .limit(limit)
            )
            return await _expanded(conn, list(rows))

    async def first_batch_offset(self, topic_id: uuid.UUID, partition: int) -> int | None:
        """Base offset of the partition's lowest batch row (None: no rows)."""
        async with self._read() as conn:
            row = (
                await conn.execute(
                    select(_B.base_offset)
                    .where(_B.topic_id == topic_id, _B.partition == partition)
                    .order_by(_B.last_offset)
                    .limit(1)
                )
            ).first()
            return None if row is None else int(row.base_offset)

    async def partition_summaries(self) -> list[PartitionSummary]:
        """Every partition of every live topic."""
        p = s.partitions.c
        t = s.topics.c
        async with self._read() as conn:
            rows = await conn.execute(
                select(p.topic_id, p.partition, p.log_start_offset, p.high_watermark, p.bytes)
                .join(s.topics, t.id == p.topic_id)
                .where(t.deleted_at.is_(None))
                .order_by(p.topic_id, p.partition)
            )
            return [
                PartitionSummary(
                    r.topic_id, r.partition, r.log_start_offset, r.high_watermark, r.bytes
                )
                for r in rows
            ]

    async def registered_keys(self, keys: Sequence[str]) -> set[str]:
        """Those of ``keys`` that the objects table knows (in any state)."""
        found: set[str] = set()
        async with self._read() as conn:
            for chunk in chunks(list(keys), _CHUNK):
                found.update(
                    (await conn.execute(select(_O.key).where(_O.key.in_(chunk)))).scalars()
                )
        return found

    async def list_parquet_files(
        self, topic_id: uuid.UUID, partition: int
    ) -> list[ParquetFileInfo]:
        """Live Parquet objects of a partition by offset (readers clip to the log start)."""
        pf = s.parquet_files.c
        async with self._read() as conn:
            rows = await conn.execute(
                select(s.parquet_files, _O.key)
                .join(s.objects, _O.id == pf.object_id)
                .where(pf.topic_id == topic_id, pf.partition == partition, _O.state == "live")
                .order_by(pf.base_offset)
            )
            return [
                ParquetFileInfo(
                    r.key,
                    r.topic_id,
                    r.partition,
                    r.base_offset,
                    r.last_offset,
                    r.row_count,
                    r.min_timestamp,
                    r.max_timestamp,
                )
                for r in rows
            ]

    # -- the swap -------------------------------------------------------------------

    async def swap_batches(
        self,
        expected: Sequence[StoredBatch],
        replacements: Sequence[StoredBatch],
        new_objects: Sequence[NewObject],
        parquet_files: Sequence[ParquetFileInfo] = (),
    ) -> SwapResult:
        """Replace ``expected`` rows by ``replacements`` (compare-and-swap, one transaction).

        Replacements name their object by key: one of ``new_objects``, or a live
        object an earlier swap registered (the journal's consolidation swaps one
        new object's rows in several short transactions; a key that is no longer
        live is a conflict). Rows in ``expected`` without a replacement at the same
        ``last_offset`` are removed (e.g. a compacted batch that kept no record).
        """
        now = self.now_ms()
        if not parquet_files and sqlite_swap.is_move(expected, replacements):
            moved = await self._move(expected, replacements, new_objects, now)
            if moved is not None:
                return moved
        by_key = {o.key: o for o in new_objects}
        earlier = sorted({r.object_key for r in replacements} - by_key.keys())
        want = {(b.topic_id, b.partition, b.last_offset): b for b in expected}
        if len(want) != len(expected):
            raise ValueError("duplicate rows in expected")
        tps = sorted(
            {(b.topic_id, b.partition) for b in expected}
            | {(b.topic_id, b.partition) for b in replacements}
        )
        conflict: str | None = None
        deleting: list[str] = []
        async with self._write() as conn:
            # the partitions of the runs this swap turns back into rows are locked
            # too (in the one sorted order), so no retention pass races them
            heads, run_tps = await self._runs_of(conn, {b.object_id for b in expected})
            await self._lock_partitions(conn, sorted(set(tps) | run_tps))
            await self._explode_runs(conn, heads)
            current: dict[tuple[uuid.UUID, int, int], Any] = {}
            for where in _row_keys(want):
                rows = await conn.execute(
                    select(
                        _B.topic_id,
                        _B.partition,
                        _B.last_offset,
                        _B.base_offset,
                        _B.object_id,
                        _B.byte_pos,
                        _B.byte_len,
                    ).where(where)
                )
                for r in rows:
                    current[(r.topic_id, r.partition, r.last_offset)] = r
            for k, b in want.items():
                cur = current.get(k)
                if cur is None:
                    conflict = f"batch {k[0]}/{k[1]}@{k[2]} is gone"
                    break
                if (cur.object_id, cur.base_offset, cur.byte_pos, cur.byte_len) != (
                    b.object_id,
                    b.base_offset,
                    b.byte_pos,
                    b.byte_len,
                ):
                    conflict = f"batch {k[0]}/{k[1]}@{k[2]} changed"
                    break
            ids: dict[str, int] = {}
            if conflict is None and earlier:
                found = await conn.execute(
                    select(_O.key, _O.id).where(_O.key.in_(earlier), _O.state == "live")
                )
                ids.update({r.key: int(r.id) for r in found})
                if len(ids) != len(earlier):
                    conflict = f"object {sorted(set(earlier) - ids.keys())[0]} is not live"
            if conflict is None:
                for o in new_objects:
                    ids[o.key] = await self._insert_compacted_object(conn, o, now, live=True)
                for where in _row_keys(want):
                    await conn.execute(delete(s.batches).where(where))
                if replacements:
                    await conn.execute(
                        insert(s.batches), [_row(b, ids[b.object_key]) for b in replacements]
                    )
                if parquet_files:
                    await conn.execute(
                        insert(s.parquet_files),
                        [
                            {
                                "topic_id": f.topic_id,
                                "partition": f.partition,
                                "object_id": ids[f.object_key],
                                "base_offset": f.base_offset,
                                "last_offset": f.last_offset,
                                "row_count": f.row_count,
                                "min_timestamp": f.min_timestamp,
                                "max_timestamp": f.max_timestamp,
                                "created_at": now,
                            }
                            for f in parquet_files
                        ],
                    )
                delta: dict[tuple[uuid.UUID, int], int] = {}
                for b in expected:
                    delta[(b.topic_id, b.partition)] = (
                        delta.get((b.topic_id, b.partition), 0) - b.byte_len
                    )
                for b in replacements:
                    delta[(b.topic_id, b.partition)] = (
                        delta.get((b.topic_id, b.partition), 0) + b.byte_len
                    )
                await self._add_bytes(conn, delta)
                deleting = await self._retire_unreferenced(
                    conn, sorted({b.object_id for b in expected}), now
                )
        if conflict is not None:
            return await self._conflicted(new_objects, now, conflict)
        return SwapResult(True, None, deleting)

    async def _conflicted(
        self, new_objects: Sequence[NewObject], now: int, message: str
    ) -> SwapResult:
        """A swap that changed nothing: keep its new objects known, in "deleting", so
        the GC removes them after the grace period rather than the orphan sweep much later."""
        async with self._write() as conn:
            for o in new_objects:
                await self._insert_compacted_object(conn, o, now, live=False)
        return SwapResult(False, message)

    async def _move(
        self,
        expected: Sequence[StoredBatch],
        replacements: Sequence[StoredBatch],
        new_objects: Sequence[NewObject],
        now: int,
    ) -> SwapResult | None:
        """A pure move on SQLite in one call on the writer's thread (metastore.sqlite_swap;
        Postgres overrides it, metastore.pg_swap); None when a run row is involved or
        there is no such path (the general path does it)."""
        if self.dialect != "sqlite":
            return None
        try:
            done: SwapResult = await self._write_raw(
                sqlite_swap.sqlite_move,
                expected,
                replacements,
                new_objects,
                COMPACTOR_AGENT_ID,
                now,
            )
            return done
        except sqlite_swap.NotAMove:
            return None
        except sqlite_swap.Conflict as e:
            return await self._conflicted(new_objects, now, str(e))

    async def _runs_of(
        self, conn: AsyncConnection, object_ids: set[int]
    ) -> tuple[list[int], set[tuple[uuid.UUID, int]]]:
        """The heads of the run groups these objects belong to, and the partitions
        their run rows are on."""
        heads: set[int] = set()
        for chunk in chunks(sorted(object_ids), _CHUNK):
            found = await conn.execute(
                select(_O.run_head).where(_O.id.in_(chunk), _O.run_head.is_not(None)).distinct()
            )
            heads.update(found.scalars())
        tps: set[tuple[uuid.UUID, int]] = set()
        for chunk in chunks(sorted(heads), _CHUNK):
            found = await conn.execute(
                select(_B.topic_id, _B.partition)
                .where(_B.object_id.in_(chunk), _B.entries.is_not(None))
                .distinct()
            )
            tps.update((r.topic_id, r.partition) for r in found)
        return sorted(heads), tps

    async def _explode_runs(self, conn: AsyncConnection, heads: Sequence[int]) -> None:
        """Turn every run row of these groups back into one row per batch, and
        forget the groups' heads: a swap replaces rows one batch at a time.
        Offsets, objects and bytes do not change; the caller holds the locks of
        the runs' partitions."""
        for chunk in chunks(list(heads), _CHUNK):
            gone = list(
                await conn.execute(
                    delete(s.batches)
                    .where(_B.object_id.in_(chunk), _B.entries.is_not(None))
                    .returning(_B.topic_id, _B.partition, _B.entries, _B.append_time)
                )
            )
            rows = [
                _row(b, b.object_id)
                for g in gone
                for b in runs.stored(g.topic_id, g.partition, g.entries, {}, g.append_time)
            ]
            for part in chunks(rows, _CHUNK):
                await conn.execute(insert(s.batches), part)
            await conn.execute(
                update(s.objects).where(_O.run_head.in_(chunk)).values(run_head=None)
            )

    async def _lock_partitions(
        self, conn: AsyncConnection, tps: Sequence[tuple[uuid.UUID, int]]
    ) -> None:
        p = s.partitions.c
        for chunk in chunks(list(tps), _CHUNK):
            await conn.execute(
                select(p.topic_id, p.partition)
                .where(tuple_(p.topic_id, p.partition).in_(chunk))
                .order_by(p.topic_id, p.partition)
                .with_for_update()
            )

    async def _add_bytes(
        self, conn: AsyncConnection, delta: dict[tuple[uuid.UUID, int], int]
    ) -> None:
        p = s.partitions.c
        for (topic_id, partition), d in sorted(delta.items()):
            if d:
                await conn.execute(
                    update(s.partitions)
                    .where(p.topic_id == topic_id, p.partition == partition)
                    .values(
                        bytes=func.max(p.bytes + d, 0)
                        if self.dialect == "sqlite"
                        else func.greatest(p.bytes + d, 0)
                    )
                )

    async def _insert_compacted_object(
        self, conn: AsyncConnection, o: NewObject, now: int, *, live: bool
    ) -> int:
        result = await conn.execute(
            insert(s.objects)
            .values(
                key=o.key,
                agent_id=COMPACTOR_AGENT_ID,
                size=o.size,
                state="live" if live else "deleting",
                created_at=now,
                deleting_since=None if live else now,
                level=o.level,
                format=o.format,
            )
            .returning(_O.id)
        )
        return int(result.scalar_one())

    async def _retire_unreferenced(
        self, conn: AsyncConnection, object_ids: Sequence[int], now: int
    ) -> list[str]:
        """Move live objects among ``object_ids`` that no row references to ``deleting``."""
        keys: list[str] = []
        pf = s.parquet_files.c
        for chunk in chunks(list(object_ids), _CHUNK):
            rows: list[Any] = []
            # a run row names its group's head: the group's objects go with it. Two
            # statements, each on an index (an OR of the two was a scan of all objects).
            for named in (_O.id.in_(chunk), _O.run_head.in_(chunk)):
                result = await conn.execute(
                    update(s.objects)
                    .where(named, _O.state == "live", runs.unreferenced())
                    .values(state="deleting", deleting_since=now)
                    .returning(_O.key, _O.id)
                )
                rows.extend(result)
            keys.extend(r.key for r in rows)
            gone = [r.id for r in rows]
            if gone:
                await conn.execute(delete(s.parquet_files).where(pf.object_id.in_(gone)))
        return sorted(keys)

    # -- retention ------------------------------------------------------------------

    async def enforce_retention(
        self,
        topic_id: uuid.UUID,
        partition: int,
        *,
        delete_before_ms: int | None = None,
        use_append_time: bool = False,
        max_bytes: int | None = None,
        max_batches: int = 10_000,
    ) -> RetentionResult:
        """One bounded retention pass over a partition, in one transaction.

        Advances the log start offset past whole batches whose timestamp is below
        ``delete_before_ms`` (retention.ms) and past the oldest batches while the
        partition holds more than ``max_bytes`` (retention.bytes), then removes up
        to ``max_batches`` batch rows below the log start offset (whatever moved
        it: this pass, DeleteRecords) and the aborted-transaction ranges ending
        below it, and retires objects left unreferenced.
        """
        now = self.now_ms()
        p = s.partitions.c
        async with self._write() as conn:
            row = (
                await conn.execute(
                    select(p.log_start_offset, p.high_watermark)
                    .where(p.topic_id == topic_id, p.partition == partition)
                    .with_for_update()
                )
            ).first()
            if row is None:
                return RetentionResult(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
            lso, hwm = int(row.log_start_offset), int(row.high_watermark)
            mine = and_(_B.topic_id == topic_id, _B.partition == partition)
            target = lso
            if delete_before_ms is not None:
                ts = _B.append_time if use_append_time else _B.max_timestamp
                rows = await conn.execute(
                    select(_B.last_offset, ts.label("ts"))
                    .where(mine, _B.last_offset >= lso)
                    .order_by(_B.last_offset)
                    .limit(max_batches)
                )
                for r in rows:
                    if r.ts >= delete_before_ms:
                        break
                    target = max(target, int(r.last_offset) + 1)
            if max_bytes is not None and max_bytes >= 0:
                total = (
                    await conn.execute(
                        select(func.coalesce(func.sum(_B.byte_len), 0)).where(
                            mine, _B.last_offset >= target
                        )
                    )
                ).scalar_one()
                excess = int(total) - max_bytes
                if excess > 0:
                    rows = await conn.execute(
                        select(_B.last_offset, _B.byte_len)
                        .where(mine, _B.last_offset >= target)
                        .order_by(_B.last_offset)
                        .limit(max_batches)
                    )
                    for r in rows:
                        if excess <= 0:
                            break
                        excess -= int(r.byte_len)
                        target = max(target, int(r.last_offset) + 1)
            target = min(target, hwm)
            if target > lso:
                await conn.execute(
                    update(s.partitions)
                    .where(p.topic_id == topic_id, p.partition == partition)
                    .values(log_start_offset=target)
                )
                lso = target
            # Aborted ranges wholly below the log start (marker included) no longer
            # concern any reader: prune them with the data.
            a = s.aborted_txns.c
            await conn.execute(
                delete(s.aborted_txns).where(
                    a.topic_id == topic_id, a.partition == partition, a.last_offset < lso
                )
            )
            doomed = list(
                await conn.execute(
                    select(_B.last_offset, _B.byte_len, _B.object_id)
                    .where(mine, _B.last_offset < lso)
                    .order_by(_B.last_offset)
                    .limit(max_batches)
                )
            )
            removed_bytes = sum(int(r.byte_len) for r in doomed)
            deleting: list[str] = []
            if doomed:
                await conn.execute(
                    delete(s.batches).where(
                        mine, _B.last_offset <= max(int(r.last_offset) for r in doomed)
                    )
                )
                await self._add_bytes(conn, {(topic_id, partition): -removed_bytes})
                deleting = await self._retire_unreferenced(
                    conn, sorted({int(r.object_id) for r in doomed}), now
                )
        return RetentionResult(ErrorCode.NONE, lso, len(doomed), removed_bytes, deleting)
