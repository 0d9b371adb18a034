"""The transaction coordinator (KIP-98): one per agent, serving the transactional ids
it owns on the ring (like groups; FindCoordinator key type 1).

Where it sits: the txn handlers (InitProducerId with a transactional id,
AddPartitionsToTxn, AddOffsetsToTxn, EndTxn) call it; it keeps no state of its
own beyond a lock per transactional id: every state change is a metastore
transaction (``metastore/txn.py``) committed before the response, so the next
ring owner takes over from the metastore alone.

Ending a transaction: ``txn_prepare_end`` (Ongoing -> PrepareCommit/Abort),
then one marker per partition through the produce pipeline (an object and a
metastore commit like any produce), then ``txn_complete`` with the markers'
offsets (the last stable offsets move, aborted ranges and transactional offsets
land). A coordinator dying anywhere in between leaves the transaction prepared;
whoever owns the id next finishes it (on the next request for it, or from the
periodic check after ``recovery_ms``), writing the markers again: a second
marker of the same outcome changes nothing for readers.

The periodic check also aborts transactions older than their timeout, with the
epoch bumped (the producer is fenced and recovers through KIP-360, as in Kafka).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import AsyncIterator, Callable, Sequence
from typing import TYPE_CHECKING

from agent.clock import Clock
from agent.produce import ProduceItem
from agent.tasks import cancel_and_wait
from agent.txn.markers import marker_batch
from metastore.types import (
    TXN_ONGOING,
    TXN_PREPARE_ABORT,
    TXN_PREPARE_COMMIT,
    ErrorCode,
    MetastoreError,
    TxnRecord,
    TxnResult,
)
from metastore.unavailable import metastore_unavailable

if TYPE_CHECKING:
    from agent.produce import ProducePipeline
    from metastore import Metastore

log = logging.getLogger(__name__)

PREPARED = (TXN_PREPARE_COMMIT, TXN_PREPARE_ABORT)


class TxnCoordinator:
    def __init__(
        self,
        meta: Metastore,
        pipeline: ProducePipeline,
        clock: Clock,
        *,
        owns: Callable[[str], bool] = lambda _tid: True,
        on_complete: Callable[[list[tuple[uuid.UUID, int]]], None] | None = None,
        check_interval_ms: int = 1000,
        recovery_ms: int = 5000,
    ) -> None:
        self.meta = meta
        self.pipeline = pipeline
        self.clock = clock
        self.owns = owns
        self._on_complete = on_complete
        self._check_s = check_interval_ms / 1000
        self._recovery_ms = recovery_ms
        self._locks: dict[str, asyncio.Lock] = {}
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._check_loop(), name="floe-txn-check")

    async def close(self) -> None:
        task, self._task = self._task, None
        await cancel_and_wait(task)

    @contextlib.asynccontextmanager
    async def _locked(self, tid: str) -> AsyncIterator[None]:
        lock = self._locks.setdefault(tid, asyncio.Lock())
        try:
            async with lock:
                yield
        finally:
            if not lock.locked() and not lock._waiters:
                self._locks.pop(tid, None)

    # -- the client's requests --------------------------------------------------------

    async def init_producer_id(
        self, tid: str, timeout_ms: int, producer_id: int = -1, producer_epoch: int = -1
    ) -> TxnResult:
        """A new epoch for ``tid``; an open transaction is aborted (or a prepared
        one finished) first."""
        async with self._locked(tid):
            for _attempt in range(4):
                res = await self.meta.txn_init(tid, timeout_ms, producer_id, producer_epoch)
                if res.error != ErrorCode.CONCURRENT_TRANSACTIONS or res.txn is None:
                    return res
                rec = res.txn
                if rec.state == TXN_ONGOING:
                    prep = await self.meta.txn_prepare_end(
                        tid, rec.producer_id, rec.producer_epoch, False, bump_epoch=True
                    )
                    if prep.error or prep.txn is None:
                        continue  # raced with another coordinator: look again
                    rec = prep.txn
                if not await self._finish(rec):
                    return TxnResult(ErrorCode.CONCURRENT_TRANSACTIONS)
            return TxnResult(ErrorCode.CONCURRENT_TRANSACTIONS)

    async def add_partitions(
        self, tid: str, producer_id: int, producer_epoch: int, partitions: Sequence[tuple[uuid.UUID, int]]
    ) -> TxnResult:
        async with self._locked(tid):
            return await self.meta.txn_add_partitions(tid, producer_id, producer_epoch, partitions)

    async def add_group(self, tid: str, producer_id: int, producer_epoch: int, group_id: str) -> TxnResult:
        async with self._locked(tid):
            return await self.meta.txn_add_group(tid, producer_id, producer_epoch, group_id)

    async def end_txn(
        self, tid: str, producer_id: int, producer_epoch: int, commit: bool, *, bump_epoch: bool = False
    ) -> TxnResult:
        """Prepare, write the markers, complete; answers after the transaction is
        complete (so the producer's next transaction never meets this one)."""
        async with self._locked(tid):
            res = await self.meta.txn_prepare_end(
                tid, producer_id, producer_epoch, commit, bump_epoch=bump_epoch
            )
            if res.error or res.txn is None:
                return res
            if res.txn.state in PREPARED and not await self._finish(res.txn):
                return TxnResult(ErrorCode.CONCURRENT_TRANSACTIONS, res.txn)  # retriable: finished on retry
            return TxnResult(ErrorCode.NONE, await self.meta.txn_get(tid) or res.txn)

    # -- markers ----------------------------------------------------------------------

    async def _finish(self, rec: TxnRecord) -> bool:
        """Write the markers of the prepared ``rec`` and complete it. False when the
        markers could not be written (the transaction stays prepared)."""
        commit = rec.state == TXN_PREPARE_COMMIT
        now = self.clock.now_ms()
        items: list[ProduceItem] = []
        nbytes = 0
        for part in rec.partitions:
            data, meta = marker_batch(rec.producer_id, rec.producer_epoch, commit, now)
            items.append(ProduceItem(part.topic_id, part.partition, data, meta, True))
            nbytes += len(data)
        markers: list[tuple[uuid.UUID, int, int]] = []
        if items:
            await self.pipeline.reserve(nbytes)
            results = await self.pipeline.append(items, nbytes)
            for part, r in zip(rec.partitions, results, strict=True):
                if r.error:
                    log.warning(
                        "marker of %r on %s/%d failed: %s", rec.transactional_id, part.topic_id, part.partition, r.error
                    )
                    return False
                markers.append((part.topic_id, part.partition, r.base_offset))
        done = await self.meta.txn_complete(rec.transactional_id, rec.producer_id, rec.producer_epoch, markers)
        if done.error:
            log.info("completing %r: %s", rec.transactional_id, done.error.name)
            return done.error is not ErrorCode.INVALID_TXN_STATE
        if self._on_complete is not None and markers:
            self._on_complete([(t, p) for t, p, _ in markers])
        return True

    # -- timeouts and recovery --------------------------------------------------------

    async def check(self) -> int:
        """Abort timed-out transactions and finish abandoned prepared ones among the
        ids this agent owns; returns how many it acted on."""
        now = self.clock.now_ms()
        acted = 0
        for rec in await self.meta.txn_list((TXN_ONGOING, *PREPARED)):
            tid = rec.transactional_id
            if not self.owns(tid):
                continue
            if rec.state == TXN_ONGOING and 0 <= rec.started_at_ms and now - rec.started_at_ms > rec.timeout_ms:
                log.info("transaction %r timed out after %d ms: aborting", tid, rec.timeout_ms)
                await self.end_txn(tid, rec.producer_id, rec.producer_epoch, False, bump_epoch=True)
                acted += 1
            elif rec.state in PREPARED and now - rec.updated_at_ms > self._recovery_ms:
                lock = self._locks.get(tid)
                if lock is not None and lock.locked():
                    continue  # being finished here right now
                log.info("finishing abandoned transaction %r (%s)", tid, rec.state)
                async with self._locked(tid):
                    fresh = await self.meta.txn_get(tid)
                    if fresh is not None and fresh.state in PREPARED:
                        await self._finish(fresh)
                acted += 1
        return acted

    async def _check_loop(self) -> None:
        while True:
            await asyncio.sleep(self._check_s)
            try:
                await self.check()
            except MetastoreError as e:
                log.warning("transaction check failed: %s", e)
            except Exception as e:
                if metastore_unavailable(e):  # Postgres down: one line, retried next round
                    log.warning("transaction check failed, metastore unavailable: %s: %s", type(e).__name__, e)
                else:
                    log.exception("transaction check failed")
