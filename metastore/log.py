"""The log: commit an object (the sequencer), find batches, list offsets, delete records.

This is the generic SQLAlchemy implementation, used as-is on SQLite. A commit
is a group commit (``commit_objects``; ``commit_object`` is a group of one):
one ``BEGIN IMMEDIATE`` transaction loads the touched partitions and producer
state once for the whole group, runs ``sequencer.plan_commit`` over the
objects' batches in order and writes the outcome back with executemany.
``PostgresMetastore`` overrides the commit (migration 0005,
``metastore.pg_group``) and ``find_batches`` with raw asyncpg.

Object bookkeeping choice: an object whose batches all failed (or were all
duplicates) is still registered, directly in state ``deleting``; the GC deletes
it after the grace period. Registered objects belong to the metastore, so the
agent never deletes an object itself (``object_key_registered`` tells it whether
an ambiguous commit went through).
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

from sqlalchemy import bindparam, case, delete, func, insert, or_, select, tuple_, update
from sqlalchemy.ext.asyncio import AsyncConnection

from metastore import runs
from metastore import schema as s
from metastore.base import SqlBase, chunks
from metastore.sequencer import (
    PartitionState,
    ProducerBatch,
    ProducerKey,
    fresh_objects,
    group_outcome,
    object_spans,
    plan_commit,
)
from metastore.sqlite_commit import sqlite_commit
from metastore.sqlite_log import sqlite_find
from metastore.types import (
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    MAX_TIMESTAMP,
    BatchToCommit,
    CommitResult,
    DeleteRecordsResult,
    ErrorCode,
    FindResult,
    ListOffsetsResult,
    ObjectAlreadyCommittedError,
    ObjectCommitResult,
    ObjectToCommit,
)

DEFAULT_MAX_BATCHES = 1000  # cap on batches per find_batches answer
_CHUNK = 2000  # tuples per IN (...) list: SQLite allows 32766 bound variables


class LogMixin(SqlBase):
    async def commit_object(
        self, key: str, size: int, agent_id: str, batches: Sequence[BatchToCommit]
    ) -> list[CommitResult]:
        """One object: a group of one (raises if its key is already committed)."""
        (res,) = await self.commit_objects([ObjectToCommit(key, size, agent_id, batches)])
        if res.already_committed:
            raise ObjectAlreadyCommittedError(f"object {key!r} is already committed")
        return res.results

    async def commit_objects(self, objects: Sequence[ObjectToCommit]) -> list[ObjectCommitResult]:
        """Group commit: sequence ``objects`` in order, in one transaction, each
        touched partition row read and written once for the whole group (SQLite: one
        call on the writer's thread, metastore.sqlite_commit)."""
        now = self.now_ms()
        if self.dialect == "sqlite":
            done: list[ObjectCommitResult] = await self._write_raw(
                sqlite_commit, list(objects), now
            )
            return done
        p = s.partitions.c
        async with self._write() as conn:
            keys = [o.key for o in objects]
            registered: set[str] = set()
            for chunk in chunks(sorted(set(keys)), _CHUNK):
                rows = await conn.execute(select(s.objects.c.key).where(s.objects.c.key.in_(chunk)))
                registered.update(row.key for row in rows)
            fresh = fresh_objects(keys, registered)
            batches = [b for o, ok in zip(objects, fresh, strict=True) if ok for b in o.batches]
            wanted = sorted({(b.topic_id, b.partition) for b in batches})
            producer_keys = sorted(
                {(b.topic_id, b.partition, b.producer_id) for b in batches if b.producer_id >= 0}
            )
            states: dict[tuple[uuid.UUID, int], PartitionState] = {}
            for chunk in chunks(wanted, _CHUNK):
                rows = await conn.execute(
                    select(p.topic_id, p.partition, p.log_start_offset, p.high_watermark)
                    .where(tuple_(p.topic_id, p.partition).in_(chunk))
                    .order_by(p.topic_id, p.partition)
                    .with_for_update()
                )
                for row in rows:
                    states[(row.topic_id, row.partition)] = PartitionState(
                        row.log_start_offset, row.high_watermark
                    )
            producers = await self._load_producers(conn, producer_keys)
            plan = plan_commit(batches, states, producers, now)
            spans = object_spans(objects, fresh, plan.accepted)
            object_ids = [
                None
                if sp is None
                else await self._insert_object(conn, o.key, o.size, o.agent_id, now, sp.live)
                for o, sp in zip(objects, spans, strict=True)
            ]
            out, batch_rows = group_outcome(spans, object_ids, batches, plan, _batch_row, now)
            if batch_rows:
                await conn.execute(insert(s.batches), batch_rows)
                await conn.execute(
                    update(s.partitions)
                    .where(p.topic_id == bindparam("t"), p.partition == bindparam("p"))
                    .values(high_watermark=bindparam("hwm"), bytes=p.bytes + bindparam("added")),
                    [
                        {"t": tp[0], "p": tp[1], "hwm": st.high_watermark, "added": st.added_bytes}
                        for tp, st in states.items()
                        if st.changed
                    ],
                )
            await self._store_producers(conn, plan.touched_producers, producers)
        return out

    async def _insert_object(
        self, conn: AsyncConnection, key: str, size: int, agent_id: str, now: int, live: bool
    ) -> int:
        result = await conn.execute(
            insert(s.objects)
            .values(
                key=key,
                agent_id=agent_id,
                size=size,
                state="live" if live else "deleting",
                created_at=now,
                deleting_since=None if live else now,
            )
            .returning(s.objects.c.id)
        )
        return int(result.scalar_one())

    async def _load_producers(
        self, conn: AsyncConnection, keys: Sequence[ProducerKey]
    ) -> dict[ProducerKey, list[ProducerBatch]]:
        pb = s.producer_batches.c
        producers: dict[ProducerKey, list[ProducerBatch]] = {}
        for chunk in chunks(keys, _CHUNK):
            rows = await conn.execute(
                select(
                    pb.topic_id,
                    pb.partition,
                    pb.producer_id,
                    pb.producer_epoch,
                    pb.base_sequence,
                    pb.last_sequence,
                    pb.base_offset,
                    pb.last_offset,
                    pb.append_time,
                )
                .where(tuple_(pb.topic_id, pb.partition, pb.producer_id).in_(chunk))
                .order_by(pb.base_offset)
            )
            for row in rows:
                producers.setdefault((row.topic_id, row.partition, row.producer_id), []).append(
                    ProducerBatch(
                        row.producer_epoch,
                        row.base_sequence,
                        row.last_sequence,
                        row.base_offset,
                        row.last_offset,
                        row.append_time,
                    )
                )
        return producers

    async def _store_producers(
        self,
        conn: AsyncConnection,
        touched: set[ProducerKey],
        producers: dict[ProducerKey, list[ProducerBatch]],
    ) -> None:
        if not touched:
            return
        pb = s.producer_batches.c
        keys = sorted(touched)
        for chunk in chunks(keys, _CHUNK):
            await conn.execute(
                delete(s.producer_batches).where(
                    tuple_(pb.topic_id, pb.partition, pb.producer_id).in_(chunk)
                )
            )
        rows = [
            {
                "topic_id": k[0],
                "partition": k[1],
                "producer_id": k[2],
                "producer_epoch": e.producer_epoch,
                "base_sequence": e.base_sequence,
                "last_sequence": e.last_sequence,
                "base_offset": e.base_offset,
                "last_offset": e.last_offset,
                "append_time": e.append_time,
            }
            for k in keys
            for e in producers[k]
        ]
        await conn.execute(insert(s.producer_batches), rows)

    async def find_batches(
        self,
        topic_id: uuid.UUID,
        partition: int,
        offset: int,
        max_bytes: int,
        max_batches: int = DEFAULT_MAX_BATCHES,
    ) -> FindResult:
        """The batch containing ``offset`` and the following ones while their total size
        stays within ``max_bytes`` (the first batch always comes back whole)."""
        if self.dialect == "sqlite":
            # The raw sqlite3 path even for one partition (a Fetch naming one
            # partition; more go through find_batches_many): SQLAlchemy's query
            # building cost ~5x more.
            (res,) = await sqlite_find(self._read_raw, [(topic_id, partition, offset, max_bytes)], max_batches)
            return res
        async with self._read() as conn:
            return await self._find_batches(
                conn, topic_id, partition, offset, max_bytes, max_batches
            )

    async def find_batches_many(
        self,
        wants: Sequence[tuple[uuid.UUID, int, int, int]],
        max_batches: int = DEFAULT_MAX_BATCHES,
    ) -> list[FindResult]:
        """``find_batches`` of each ``(topic_id, partition, offset, max_bytes)``, in
        order, in one read (a Fetch naming many partitions)."""
        if self.dialect == "sqlite":
            return await sqlite_find(self._read_raw, wants, max_batches)
        async with self._read() as conn:
            return [await self._find_batches(conn, t, p, o, m, max_batches) for t, p, o, m in wants]

    async def _find_batches(
        self,
        conn: AsyncConnection,
        topic_id: uuid.UUID,
        partition: int,
        offset: int,
        max_bytes: int,
        max_batches: int,
    ) -> FindResult:
        state = await self._partition(conn, topic_id, partition)
        if state is None:
            return FindResult(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, -1, -1)
        lso, hwm = state
        if offset < lso or offset > hwm:
            return FindResult(ErrorCode.OFFSET_OUT_OF_RANGE, lso, hwm)
        if offset == hwm:
            return FindResult(ErrorCode.NONE, lso, hwm)
        b = s.batches.c
        inner = (
            select(
                s.objects.c.key,
                b.byte_pos,
                b.byte_len,
                b.base_offset,
                b.last_offset,
                b.record_count,
                b.max_timestamp,
                b.append_time,
                b.entries,
            )
            .join(s.objects, s.objects.c.id == b.object_id)
            .where(b.topic_id == topic_id, b.partition == partition, b.last_offset >= offset)
            .order_by(b.last_offset)
            .limit(max(1, max_batches))
            .subquery()
        )
        by = inner.c.last_offset
        ordered = select(
            inner,
            func.sum(inner.c.byte_len).over(order_by=by).label("cum"),
            func.row_number().over(order_by=by).label("rn"),
            case(
                (func.first_value(inner.c.entries.is_not(None)).over(order_by=by),
                 func.first_value(inner.c.byte_len).over(order_by=by)),
                else_=0,
            ).label("lead_len"),
        ).subquery()  # fmt: skip
        # The rows up to the one that crosses max_bytes, counting a leading run's
        # bytes as none (some lie before ``offset``); runs.expand trims exactly.
        w = ordered.c
        rows = list(
            await conn.execute(
                select(*(w[c.name] for c in inner.c))
                .where(or_(w.rn == 1, w.cum - w.byte_len - w.lead_len < max_bytes))
                .order_by(w.last_offset)
            )
        )
        keys = await runs.object_keys(conn, runs.run_object_ids(r.entries for r in rows))
        found = runs.expand(rows, keys, offset, max_bytes, max_batches)
        return FindResult(ErrorCode.NONE, lso, hwm, found)

    async def _partition(
        self, conn: AsyncConnection, topic_id: uuid.UUID, partition: int, lock: bool = False
    ) -> tuple[int, int] | None:
        p = s.partitions.c
        query = select(p.log_start_offset, p.high_watermark).where(
            p.topic_id == topic_id, p.partition == partition
        )
        if lock:
            query = query.with_for_update()
        row = (await conn.execute(query)).first()
        return (row.log_start_offset, row.high_watermark) if row is not None else None

    async def list_offsets(
        self, topic_id: uuid.UUID, partition: int, timestamp: int, *, from_offset: int = 0
    ) -> ListOffsetsResult:
        """-2 earliest, -1 latest, -3 the batch with the largest timestamp (its last
        offset), else the first batch whose max timestamp is >= ``timestamp`` (its
        base offset). Batch granularity: the index has one entry per batch.
        ``from_offset`` (-3 and timestamps) leaves out batches starting below it:
        the agent looks past a batch straddling the log start offset with it."""
        async with self._read() as conn:
            state = await self._partition(conn, topic_id, partition)
            if state is None:
                return ListOffsetsResult(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
            lso, hwm = state
            if timestamp == EARLIEST_TIMESTAMP:
                return ListOffsetsResult(ErrorCode.NONE, lso, -1)
            if timestamp == LATEST_TIMESTAMP:
                return ListOffsetsResult(ErrorCode.NONE, hwm, -1)
            config = (
                await conn.execute(select(s.topics.c.config).where(s.topics.c.id == topic_id))
            ).scalar_one()
            b = s.batches.c
            append = (config or {}).get("message.timestamp.type") == "LogAppendTime"
            ts = b.append_time if append else b.max_timestamp
            # A run row may hold batches the bounds leave out (below the log start,
            # or starting below from_offset): it is a candidate if it reaches past
            # them, and runs.pick_* look inside. Only the first run in offset order
            # can straddle, so two rows always decide.
            since = max(lso, from_offset)
            plain = b.entries.is_(None) & (b.last_offset >= lso)
            if from_offset > 0:
                plain = plain & (b.base_offset >= from_offset)
            live = (
                (b.topic_id == topic_id)
                & (b.partition == partition)
                & or_(plain, b.entries.is_not(None) & (b.last_offset >= since))
            )
            cols = (b.base_offset, b.last_offset, ts.label("ts"), b.entries)
            if timestamp == MAX_TIMESTAMP:
                rows = await conn.execute(
                    select(*cols).where(live).order_by(ts.desc(), b.last_offset).limit(2)
                )
                row = runs.pick_max(list(rows), lso, from_offset, append)
            elif timestamp >= 0:
                rows = await conn.execute(
                    select(*cols).where(live, ts >= timestamp).order_by(b.last_offset).limit(2)
                )
                row = runs.pick_first(list(rows), lso, from_offset, append, timestamp)
            else:
                return ListOffsetsResult(ErrorCode.NONE)
        if row is None:
            return ListOffsetsResult(ErrorCode.NONE)
        offset, found_ts = row
        # A batch straddling the log start offset: answer the first offset still readable.
        return ListOffsetsResult(ErrorCode.NONE, max(offset, lso), found_ts)

    async def delete_records(
        self, topic_id: uuid.UUID, partition: int, before_offset: int
    ) -> DeleteRecordsResult:
        """Advance the log start offset to ``before_offset`` (-1: the high watermark)."""
        async with self._write() as conn:
            state = await self._partition(conn, topic_id, partition, lock=True)
            if state is None:
                return DeleteRecordsResult(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
            lso, hwm = state
            target = hwm if before_offset == -1 else before_offset
            if target < 0 or target > hwm:
                return DeleteRecordsResult(ErrorCode.OFFSET_OUT_OF_RANGE)
            if target > lso:
                p = s.partitions.c
                await conn.execute(
                    update(s.partitions)
                    .where(p.topic_id == topic_id, p.partition == partition)
                    .values(log_start_offset=target)
                )
                lso = target
        return DeleteRecordsResult(ErrorCode.NONE, lso)


def _batch_row(batch: BatchToCommit, base: int, object_id: int, now: int) -> dict[str, Any]:
    return {
        "topic_id": batch.topic_id,
        "partition": batch.partition,
        "last_offset": base + batch.last_offset_delta,
        "base_offset": base,
        "object_id": object_id,
        "byte_pos": batch.byte_pos,
        "byte_len": batch.byte_len,
        "record_count": batch.record_count,
        "base_timestamp": batch.base_timestamp,
        "max_timestamp": batch.max_timestamp,
        "append_time": now,
        "producer_id": batch.producer_id,
        "producer_epoch": batch.producer_epoch,
        "base_sequence": batch.base_sequence,
        "is_transactional": batch.is_transactional,
    }
