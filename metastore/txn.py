"""Transactions (KIP-98): the coordinator's state machine and what read_committed
readers need, one metastore transaction per state change.

Where it sits: the agent's transaction coordinator (``agent/txn``) calls these;
the fetch path asks ``stable_offsets``; the produce handler ``txn_verify``.

State of a transactional id lives on its ``producers`` row (migration 0006):
``Empty -> Ongoing`` (AddPartitionsToTxn / AddOffsetsToTxn) ``-> PrepareCommit |
PrepareAbort`` (EndTxn, a timeout, a re-init) ``-> CompleteCommit |
CompleteAbort`` (after the markers are in the log). Every change locks the row
and compares producer id, epoch and state first, so two agents racing for one
transactional id (a ring change) serialise here and the loser gets an error
value (PRODUCER_FENCED, CONCURRENT_TRANSACTIONS, INVALID_TXN_STATE), never a
half-applied change.

The last stable offset of a partition is the first batch, at or after the
``first_offset`` recorded when the partition joined, of every open
transaction's producer there (the high watermark when none). Completing a
transaction removes its ``txn_partitions`` rows and, for an abort, inserts the
aborted ranges in the same database transaction: a reader sees either the open
transaction (the LSO held back) or its outcome, never neither. Readers never
decode records for this.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

from sqlalchemy import delete, func, insert, select, tuple_, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection

from metastore import schema as s
from metastore.base import chunks
from metastore.groups import GroupsMixin
from metastore.registry import MAX_PRODUCER_EPOCH, RegistryMixin
from metastore.sqlite_stable import sqlite_plain_stable_offsets
from metastore.types import (
    TXN_COMPLETE_ABORT,
    TXN_COMPLETE_COMMIT,
    TXN_EMPTY,
    TXN_ONGOING,
    TXN_PREPARE_ABORT,
    TXN_PREPARE_COMMIT,
    ErrorCode,
    GroupOffset,
    MetastoreError,
    ProducerState,
    StableOffsets,
    TxnPartition,
    TxnRecord,
    TxnResult,
)

OPEN_STATES = (TXN_ONGOING, TXN_PREPARE_COMMIT, TXN_PREPARE_ABORT)
_ENDED = (TXN_EMPTY, TXN_COMPLETE_COMMIT, TXN_COMPLETE_ABORT)
_CHUNK = 1000

PartitionRef = tuple[uuid.UUID, int]


def _fenced(row: Any, producer_id: int, producer_epoch: int) -> ErrorCode | None:
    if row is None or row.producer_id != producer_id:
        return ErrorCode.INVALID_PRODUCER_ID_MAPPING
    if row.producer_epoch != producer_epoch:
        return ErrorCode.PRODUCER_FENCED
    return None


class TxnMixin(RegistryMixin, GroupsMixin):
    # -- reading the state ----------------------------------------------------------

    async def _txn_row(self, conn: AsyncConnection, tid: str, lock: bool = True) -> Any:
        query = select(s.producers).where(s.producers.c.transactional_id == tid)
        if lock:
            query = query.with_for_update()
        return (await conn.execute(query)).first()

    async def _txn_record(self, conn: AsyncConnection, row: Any) -> TxnRecord:
        tp, tg = s.txn_partitions.c, s.txn_groups.c
        tid = row.transactional_id
        parts = await conn.execute(
            select(tp.topic_id, tp.partition, tp.first_offset)
            .where(tp.transactional_id == tid)
            .order_by(tp.topic_id, tp.partition)
        )
        groups = await conn.execute(
            select(tg.group_id).where(tg.transactional_id == tid).order_by(tg.group_id)
        )
        return TxnRecord(
            tid,
            row.producer_id,
            row.producer_epoch,
            row.last_producer_id,
            row.last_producer_epoch,
            row.transaction_timeout_ms,
            row.state,
            row.txn_started_at,
            row.updated_at,
            [TxnPartition(r.topic_id, r.partition, r.first_offset) for r in parts],
            list(groups.scalars()),
        )

    async def txn_get(self, transactional_id: str) -> TxnRecord | None:
        async with self._read() as conn:
            row = await self._txn_row(conn, transactional_id, lock=False)
            return None if row is None else await self._txn_record(conn, row)

    async def txn_list(
        self, states: Sequence[str] = (), producer_ids: Sequence[int] = ()
    ) -> list[TxnRecord]:
        """Transactional ids (in ``states`` / with ``producer_ids`` when given), by id."""
        p = s.producers.c
        query = select(s.producers).order_by(p.transactional_id)
        if states:
            query = query.where(p.state.in_(list(states)))
        if producer_ids:
            query = query.where(p.producer_id.in_(list(producer_ids)))
        async with self._read() as conn:
            rows = list(await conn.execute(query))
            return [await self._txn_record(conn, r) for r in rows]

    # -- InitProducerId ---------------------------------------------------------------

    async def txn_init(
        self,
        transactional_id: str,
        timeout_ms: int,
        producer_id: int = -1,
        producer_epoch: int = -1,
    ) -> TxnResult:
        """Bump the epoch of ``transactional_id`` (fencing older instances), creating
        it with a new producer id at epoch 0. CONCURRENT_TRANSACTIONS (and the
        record) while a transaction is open: the coordinator ends it first. With
        ``producer_id``/``producer_epoch`` (KIP-360) they must be the current ones
        (or the ones before the last bump: a retry, answered with the current)."""
        for _attempt in range(3):
            try:
                return await self._txn_init(transactional_id, timeout_ms, producer_id, producer_epoch)
            except MetastoreError as e:
                if not isinstance(e.__cause__, IntegrityError):  # a concurrent first init
                    raise
        raise MetastoreError(f"could not initialise transactional id {transactional_id!r}")

    async def _txn_init(self, tid: str, timeout_ms: int, pid: int, epoch: int) -> TxnResult:
        now = self.now_ms()
        async with self._write() as conn:
            row = await self._txn_row(conn, tid)
            if row is None:
                if pid != -1:
                    return TxnResult(ErrorCode.INVALID_PRODUCER_ID_MAPPING)
                new_pid = await self._allocate_producer_id(conn)
                await conn.execute(
                    insert(s.producers).values(
                        transactional_id=tid,
                        producer_id=new_pid,
                        producer_epoch=0,
                        transaction_timeout_ms=timeout_ms,
                        updated_at=now,
                        state=TXN_EMPTY,
                        last_producer_id=-1,
                        last_producer_epoch=-1,
                        txn_started_at=-1,
                    )
                )
                return TxnResult(ErrorCode.NONE, await self._txn_record(conn, await self._txn_row(conn, tid)))
            if row.state in OPEN_STATES:
                return TxnResult(ErrorCode.CONCURRENT_TRANSACTIONS, await self._txn_record(conn, row))
            if pid != -1:
                if (pid, epoch) == (row.last_producer_id, row.last_producer_epoch):
                    return TxnResult(ErrorCode.NONE, await self._txn_record(conn, row))
                if pid != row.producer_id:
                    return TxnResult(ErrorCode.INVALID_PRODUCER_ID_MAPPING)
                if epoch != row.producer_epoch:
                    return TxnResult(ErrorCode.PRODUCER_FENCED)
            values = await self._bumped(conn, row)
            await conn.execute(
                update(s.producers)
                .where(s.producers.c.transactional_id == tid)
                .values(
                    **values,
                    transaction_timeout_ms=timeout_ms,
                    updated_at=now,
                    state=TXN_EMPTY,
                    txn_started_at=-1,
                )
            )
            return TxnResult(ErrorCode.NONE, await self._txn_record(conn, await self._txn_row(conn, tid)))

    async def _bumped(self, conn: AsyncConnection, row: Any) -> dict[str, int]:
        """The epoch bump of ``row`` (a new producer id once the epoch is exhausted)."""
        values = {"last_producer_id": row.producer_id, "last_producer_epoch": row.producer_epoch}
        if row.producer_epoch + 1 >= MAX_PRODUCER_EPOCH:
            return values | {"producer_id": await self._allocate_producer_id(conn), "producer_epoch": 0}
        return values | {"producer_id": row.producer_id, "producer_epoch": row.producer_epoch + 1}

    # -- joining a transaction --------------------------------------------------------

    async def txn_add_partitions(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partitions: Sequence[PartitionRef],
    ) -> TxnResult:
        """Add ``partitions`` to the transaction (it becomes Ongoing). Unknown
        partitions: UNKNOWN_TOPIC_OR_PARTITION with ``unknown`` and nothing added."""
        now = self.now_ms()
        wanted = sorted(set(partitions), key=lambda k: (str(k[0]), k[1]))
        async with self._write() as conn:
            row = await self._txn_row(conn, transactional_id)
            error = await self._joinable(row, producer_id, producer_epoch)
            if error is not None:
                return TxnResult(error)
            p = s.partitions.c
            hwms: dict[PartitionRef, int] = {}
            for chunk in chunks(wanted, _CHUNK):
                rows = await conn.execute(
                    select(p.topic_id, p.partition, p.high_watermark).where(
                        tuple_(p.topic_id, p.partition).in_(chunk)
                    )
                )
                hwms.update({(r.topic_id, r.partition): r.high_watermark for r in rows})
            unknown = [k for k in wanted if k not in hwms]
            if unknown:
                return TxnResult(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, unknown=unknown)
            tp = s.txn_partitions.c
            have = {
                (r.topic_id, r.partition)
                for r in await conn.execute(
                    select(tp.topic_id, tp.partition).where(tp.transactional_id == transactional_id)
                )
            }
            fresh = [
                {
                    "transactional_id": transactional_id,
                    "topic_id": k[0],
                    "partition": k[1],
                    "producer_id": producer_id,
                    "first_offset": hwms[k],
                }
                for k in wanted
                if k not in have
            ]
            if fresh:
                await conn.execute(insert(s.txn_partitions), fresh)
            await self._begin(conn, row, now)
            return TxnResult(ErrorCode.NONE, await self._txn_record(conn, await self._txn_row(conn, transactional_id)))

    async def txn_add_group(
        self, transactional_id: str, producer_id: int, producer_epoch: int, group_id: str
    ) -> TxnResult:
        """Add ``group_id``'s offsets to the transaction (AddOffsetsToTxn)."""
        now = self.now_ms()
        async with self._write() as conn:
            row = await self._txn_row(conn, transactional_id)
            error = await self._joinable(row, producer_id, producer_epoch)
            if error is not None:
                return TxnResult(error)
            tg = s.txn_groups.c
            found = await conn.execute(
                select(tg.group_id).where(
                    tg.transactional_id == transactional_id, tg.group_id == group_id
                )
            )
            if found.first() is None:
                await conn.execute(
                    insert(s.txn_groups).values(transactional_id=transactional_id, group_id=group_id)
                )
            await self._begin(conn, row, now)
            return TxnResult(ErrorCode.NONE, await self._txn_record(conn, await self._txn_row(conn, transactional_id)))

    async def _joinable(self, row: Any, producer_id: int, producer_epoch: int) -> ErrorCode | None:
        fenced = _fenced(row, producer_id, producer_epoch)
        if fenced is not None:
            return fenced
        if row.state in (TXN_PREPARE_COMMIT, TXN_PREPARE_ABORT):
            return ErrorCode.CONCURRENT_TRANSACTIONS
        return None

    async def _begin(self, conn: AsyncConnection, row: Any, now: int) -> None:
        values: dict[str, Any] = {"updated_at": now}
        if row.state != TXN_ONGOING:
            values |= {"state": TXN_ONGOING, "txn_started_at": now}
        await conn.execute(
            update(s.producers)
            .where(s.producers.c.transactional_id == row.transactional_id)
            .values(**values)
        )

    async def txn_commit_offsets(
        self,
        transactional_id: str,
        group_id: str,
        producer_id: int,
        producer_epoch: int,
        offsets: Sequence[GroupOffset],
    ) -> TxnResult:
        """Offsets committed inside the transaction: pending (invisible to
        ``fetch_offsets``) until it commits, dropped if it aborts."""
        now = self.now_ms()
        async with self._write() as conn:
            row = await self._txn_row(conn, transactional_id)
            fenced = _fenced(row, producer_id, producer_epoch)
            if fenced is not None:
                return TxnResult(fenced)
            tg = s.txn_groups.c
            in_txn = await conn.execute(
                select(tg.group_id).where(
                    tg.transactional_id == transactional_id, tg.group_id == group_id
                )
            )
            if row.state != TXN_ONGOING or in_txn.first() is None:
                return TxnResult(ErrorCode.INVALID_TXN_STATE)
            to = s.txn_offsets.c
            latest = {(o.topic_id, o.partition): o for o in offsets}
            keys = sorted(latest, key=lambda k: (str(k[0]), k[1]))
            for chunk in chunks(keys, _CHUNK):
                await conn.execute(
                    delete(s.txn_offsets).where(
                        to.transactional_id == transactional_id,
                        to.group_id == group_id,
                        tuple_(to.topic_id, to.partition).in_(chunk),
                    )
                )
            if keys:
                await conn.execute(
                    insert(s.txn_offsets),
                    [
                        {
                            "transactional_id": transactional_id,
                            "group_id": group_id,
                            "topic_id": k[0],
                            "partition": k[1],
                            "committed_offset": latest[k].offset,
                            "leader_epoch": latest[k].leader_epoch,
                            "metadata": latest[k].metadata,
                            "commit_time": now,
                        }
                        for k in keys
                    ],
                )
            return TxnResult(ErrorCode.NONE)

    async def txn_pending_offsets(self, group_id: str) -> list[PartitionRef]:
        """Partitions of ``group_id`` with a transactional offset commit waiting
        for its transaction to end (OffsetFetch ``require_stable`` answers
        UNSTABLE_OFFSET_COMMIT for them), by topic id and partition."""
        to = s.txn_offsets.c
        async with self._read() as conn:
            rows = await conn.execute(
                select(to.topic_id, to.partition).where(to.group_id == group_id).distinct()
            )
            found = {(r.topic_id, r.partition) for r in rows}
        return sorted(found, key=lambda k: (str(k[0]), k[1]))

    # -- ending -----------------------------------------------------------------------

    async def txn_prepare_end(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        commit: bool,
        *,
        bump_epoch: bool = False,
    ) -> TxnResult:
        """Ongoing -> PrepareCommit / PrepareAbort (``bump_epoch``: with the epoch
        bumped, fencing the producer: timeouts, re-inits, KIP-890 v5). A retry of
        the same decision (prepared or completed already) answers NONE with the
        record, whose state says what is left to do. An abort with
        ``bump_epoch`` and no transaction open (Empty, CompleteCommit: a
        transaction-v2 client aborting before anything joined) prepares an
        empty abort with the epoch bumped, as Kafka's coordinator does."""
        now = self.now_ms()
        prepare = TXN_PREPARE_COMMIT if commit else TXN_PREPARE_ABORT
        complete = TXN_COMPLETE_COMMIT if commit else TXN_COMPLETE_ABORT
        async with self._write() as conn:
            row = await self._txn_row(conn, transactional_id)
            if row is None:
                return TxnResult(ErrorCode.INVALID_PRODUCER_ID_MAPPING)
            retry = row.state in (prepare, complete)
            if retry and (producer_id, producer_epoch) == (
                row.last_producer_id,
                row.last_producer_epoch,
            ):
                return TxnResult(ErrorCode.NONE, await self._txn_record(conn, row))
            fenced = _fenced(row, producer_id, producer_epoch)
            if fenced is not None:
                return TxnResult(fenced)
            if retry:
                return TxnResult(ErrorCode.NONE, await self._txn_record(conn, row))
            if row.state != TXN_ONGOING and not (bump_epoch and not commit and row.state in _ENDED):
                return TxnResult(ErrorCode.INVALID_TXN_STATE, await self._txn_record(conn, row))
            values: dict[str, Any] = {"state": prepare, "updated_at": now}
            if bump_epoch:
                values |= await self._bumped(conn, row)
            await conn.execute(
                update(s.producers)
                .where(s.producers.c.transactional_id == transactional_id)
                .values(**values)
            )
            return TxnResult(ErrorCode.NONE, await self._txn_record(conn, await self._txn_row(conn, transactional_id)))

    async def txn_complete(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        markers: Sequence[tuple[uuid.UUID, int, int]],
    ) -> TxnResult:
        """PrepareX -> CompleteX once the markers are in the log (``markers``: the
        offset of each partition's marker). Commit: the pending offsets become the
        groups'. Abort: each partition's aborted range is recorded. Either way the
        partitions stop holding the last stable offset back, in this transaction."""
        now = self.now_ms()
        async with self._write() as conn:
            row = await self._txn_row(conn, transactional_id)
            fenced = _fenced(row, producer_id, producer_epoch)
            if fenced is not None:
                return TxnResult(fenced)
            if row.state in (TXN_COMPLETE_COMMIT, TXN_COMPLETE_ABORT):
                return TxnResult(ErrorCode.NONE, await self._txn_record(conn, row))
            if row.state not in (TXN_PREPARE_COMMIT, TXN_PREPARE_ABORT):
                return TxnResult(ErrorCode.INVALID_TXN_STATE, await self._txn_record(conn, row))
            commit = row.state == TXN_PREPARE_COMMIT
            tp = s.txn_partitions.c
            parts = list(
                await conn.execute(
                    select(tp.topic_id, tp.partition, tp.producer_id, tp.first_offset).where(
                        tp.transactional_id == transactional_id
                    )
                )
            )
            marker_at = {(t, p): off for t, p, off in markers}
            if commit:
                await self._publish_offsets(conn, transactional_id, now)
            else:
                aborted = []
                for part in parts:
                    end = marker_at.get((part.topic_id, part.partition))
                    first = await self._first_batch(
                        conn, part.topic_id, part.partition, part.producer_id, part.first_offset
                    )
                    if first is None or (end is not None and first >= end):
                        continue  # nothing of the transaction landed there
                    if end is None:  # no marker offset given: up to the high watermark
                        end = await self._hwm(conn, part.topic_id, part.partition)
                    aborted.append(
                        {
                            "topic_id": part.topic_id,
                            "partition": part.partition,
                            "last_offset": end,
                            "producer_id": part.producer_id,
                            "first_offset": first,
                        }
                    )
                if aborted:
                    await conn.execute(insert(s.aborted_txns), aborted)
            for table in (s.txn_partitions, s.txn_groups, s.txn_offsets):
                await conn.execute(delete(table).where(table.c.transactional_id == transactional_id))
            await conn.execute(
                update(s.producers)
                .where(s.producers.c.transactional_id == transactional_id)
                .values(
                    state=TXN_COMPLETE_COMMIT if commit else TXN_COMPLETE_ABORT,
                    updated_at=now,
                    txn_started_at=-1,
                )
            )
            return TxnResult(ErrorCode.NONE, await self._txn_record(conn, await self._txn_row(conn, transactional_id)))

    async def _publish_offsets(self, conn: AsyncConnection, tid: str, now: int) -> None:
        to = s.txn_offsets.c
        rows = list(
            await conn.execute(
                select(s.txn_offsets)
                .where(to.transactional_id == tid)
                .order_by(to.group_id, to.topic_id, to.partition)
            )
        )
        for group_id in sorted({r.group_id for r in rows}):
            values = [
                {
                    "group_id": group_id,
                    "topic_id": r.topic_id,
                    "partition": r.partition,
                    "committed_offset": r.committed_offset,
                    "leader_epoch": r.leader_epoch,
                    "metadata": r.metadata,
                    "commit_time": r.commit_time,
                    "expire_time": None,
                }
                for r in rows
                if r.group_id == group_id
            ]
            await self._ensure_group_row(conn, group_id, now)
            await self._upsert_group_offsets(conn, values)  # rows come ordered by (topic, partition)

    async def _first_batch(
        self, conn: AsyncConnection, topic_id: uuid.UUID, partition: int, pid: int, start: int
    ) -> int | None:
        b = s.batches.c
        found = await conn.execute(
            select(func.min(b.base_offset)).where(
                b.topic_id == topic_id,
                b.partition == partition,
                b.last_offset >= start,
                b.producer_id == pid,
                b.is_transactional.is_(True),
            )
        )
        first = found.scalar()
        return None if first is None else int(first)

    async def _hwm(self, conn: AsyncConnection, topic_id: uuid.UUID, partition: int) -> int:
        p = s.partitions.c
        found = await conn.execute(
            select(p.high_watermark).where(p.topic_id == topic_id, p.partition == partition)
        )
        return int(found.scalar() or 0)

    # -- readers and writers of the log -----------------------------------------------

    async def stable_offsets(
        self, partitions: Sequence[tuple[uuid.UUID, int, int]]
    ) -> list[StableOffsets]:
        """Per ``(topic_id, partition, fetch_offset)``: the last stable offset and the
        aborted transactions a read_committed reader from ``fetch_offset`` must skip.
        Read in the order high watermark, open transactions, aborted ranges: a
        transaction completing in between is seen complete (see the module doc)."""
        if self.dialect == "sqlite":
            plain = await sqlite_plain_stable_offsets(self._read_raw, partitions)
            if plain is not None:
                return plain
        async with self._read() as conn:
            keys = sorted({(t, p) for t, p, _ in partitions}, key=lambda k: (str(k[0]), k[1]))
            p, tp, a = s.partitions.c, s.txn_partitions.c, s.aborted_txns.c
            out: list[StableOffsets] = []
            hwms: dict[PartitionRef, int] = {}
            open_txns: dict[PartitionRef, list[tuple[int, int]]] = {}
            # Which partitions have any aborted range at all (usually none: then
            # nothing more is read; only those are looked up one by one).
            with_aborted: set[PartitionRef] = set()
            # One statement per chunk: each partition's high watermark, its open
            # transactions (a row each, or one row of NULLs) and whether it has any
            # aborted range (three statements before: a Fetch with data paid each).
            any_aborted = (
                select(a.topic_id)
                .where(a.topic_id == p.topic_id, a.partition == p.partition)
                .exists()
            )
            joined = s.partitions.outerjoin(
                s.txn_partitions, (tp.topic_id == p.topic_id) & (tp.partition == p.partition)
            )
            for chunk in chunks(keys, _CHUNK):
                rows = await conn.execute(
                    select(
                        p.topic_id, p.partition, p.high_watermark, tp.producer_id, tp.first_offset,
                        any_aborted.label("aborted"),
                    )
                    .select_from(joined)
                    .where(tuple_(p.topic_id, p.partition).in_(chunk))
                )
                for r in rows:
                    key = (r.topic_id, r.partition)
                    hwms[key] = r.high_watermark
                    if r.producer_id is not None:
                        open_txns.setdefault(key, []).append((r.producer_id, r.first_offset))
                    if r.aborted:
                        with_aborted.add(key)
            lsos: dict[PartitionRef, int] = {}
            for key, hwm in hwms.items():
                lso = hwm
                for pid, first in open_txns.get(key, ()):
                    found = await self._first_batch(conn, key[0], key[1], pid, first)
                    if found is not None:
                        lso = min(lso, found)
                lsos[key] = lso
            for topic_id, partition, fetch_offset in partitions:
                key = (topic_id, partition)
                if key not in hwms:
                    out.append(StableOffsets(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION))
                    continue
                lso = lsos[key]
                ranges: list[tuple[int, int, int]] = []
                if key in with_aborted:
                    rows = await conn.execute(
                        select(a.producer_id, a.first_offset, a.last_offset)
                        .where(
                            a.topic_id == topic_id,
                            a.partition == partition,
                            a.last_offset >= fetch_offset,
                            a.first_offset < lso,
                        )
                        .order_by(a.first_offset, a.producer_id)
                    )
                    ranges = [(r.producer_id, r.first_offset, r.last_offset) for r in rows]
                out.append(StableOffsets(ErrorCode.NONE, lso, hwms[key], ranges))
        return out

    async def txn_verify(
        self, producer_id: int, producer_epoch: int, partitions: Sequence[PartitionRef]
    ) -> list[ErrorCode]:
        """May this transactional producer write to ``partitions`` now? Per partition:
        NONE, INVALID_PRODUCER_EPOCH (fenced), INVALID_PRODUCER_ID_MAPPING (no
        transactional id has this producer id) or INVALID_TXN_STATE (no open
        transaction holding the partition)."""
        pr, tp = s.producers.c, s.txn_partitions.c
        async with self._read() as conn:
            row = (
                await conn.execute(select(s.producers).where(pr.producer_id == producer_id))
            ).first()
            if row is None:
                return [ErrorCode.INVALID_PRODUCER_ID_MAPPING] * len(partitions)
            if row.producer_epoch != producer_epoch:
                return [ErrorCode.INVALID_PRODUCER_EPOCH] * len(partitions)
            if row.state != TXN_ONGOING:
                return [ErrorCode.INVALID_TXN_STATE] * len(partitions)
            have = {
                (r.topic_id, r.partition)
                for r in await conn.execute(
                    select(tp.topic_id, tp.partition).where(
                        tp.transactional_id == row.transactional_id
                    )
                )
            }
        return [ErrorCode.NONE if k in have else ErrorCode.INVALID_TXN_STATE for k in partitions]

    async def describe_producers(self, topic_id: uuid.UUID, partition: int) -> list[ProducerState]:
        """Producers with idempotent state on the partition, by producer id."""
        pb, tp = s.producer_batches.c, s.txn_partitions.c
        async with self._read() as conn:
            rows = list(
                await conn.execute(
                    select(
                        pb.producer_id,
                        pb.producer_epoch,
                        pb.last_sequence,
                        pb.append_time,
                        pb.base_offset,
                    )
                    .where(pb.topic_id == topic_id, pb.partition == partition)
                    .order_by(pb.producer_id, pb.base_offset)
                )
            )
            open_txns = {
                r.producer_id: r.first_offset
                for r in await conn.execute(
                    select(tp.producer_id, tp.first_offset).where(
                        tp.topic_id == topic_id, tp.partition == partition
                    )
                )
            }
            out: dict[int, ProducerState] = {}
            for r in rows:  # the latest entry of each producer wins
                start = -1
                if r.producer_id in open_txns:
                    found = await self._first_batch(
                        conn, topic_id, partition, r.producer_id, open_txns[r.producer_id]
                    )
                    start = -1 if found is None else found
                out[r.producer_id] = ProducerState(
                    r.producer_id, r.producer_epoch, r.last_sequence, r.append_time, start
                )
        return [out[k] for k in sorted(out)]
