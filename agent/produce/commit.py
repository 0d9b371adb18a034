"""Step 4 of a produce: commit uploaded segments to the metastore, in seal order, in groups.

Where it sits: after :mod:`agent.produce.upload`, before :mod:`agent.produce.ack`.
The committer takes the next sealed segment and every following one whose upload
has already finished, and commits them as one group
(``Metastore.commit_objects``, one transaction, each touched partition row
updated once per group), which assigns every batch its offsets. With a metastore
that sequences commits in call order (``ordered_commits``,
:mod:`metastore.commit_order`) up to ``max_commits_in_flight`` groups (2) are
committing at once: the next group's round trips overlap this one's, its offsets
still come after this one's. A failed group is retried only while no later group
can have been sequenced after it; otherwise its requests get a retriable error
(the clients retry, and an idempotent producer's later batches get
OUT_OF_ORDER_SEQUENCE_NUMBER from the metastore, as a Kafka broker would answer
them). After an ambiguous failure the metastore is asked whether the object key
was registered before anything is retried. A segment aborted for a stalled
upload (:mod:`agent.produce.abort`) is skipped: its commit never starts; the
batches of requests withdrawn because their connection closed
(:mod:`agent.produce.withdraw`) are left out of their segment's commit.
"""

from __future__ import annotations

import asyncio
import logging
import time

from agent.metrics import METRICS
from agent.produce.ack import Acker
from agent.produce.segment import (
    KAFKA_STORAGE_ERROR,
    REQUEST_TIMED_OUT,
    Segment,
    error_results,
)
from agent.produce.withdraw import kept, spread
from metastore.commit_order import CommitTurn
from metastore.types import CommitResult, MetastoreError, ObjectToCommit
from metastore.unavailable import metastore_unavailable
from objectstore.errors import ObjectStoreError

log = logging.getLogger(__name__)


class Committer(Acker):
    """The commit loop (which starts the ack loop) and the group commit."""

    async def _commit_loop(self) -> None:
        acks: asyncio.Queue[tuple[list[Segment], asyncio.Task[list[list[CommitResult]]]] | None]
        acks = asyncio.Queue()
        slots = asyncio.Semaphore(self._max_commits)
        acker = asyncio.get_running_loop().create_task(self._ack_loop(acks, slots))
        carry: list[Segment | None] = []
        try:
            while True:
                first = carry.pop() if carry else await self._sealed.get()
                if first is None:
                    return
                if first.aborted:  # answered by the abort; never committed
                    continue
                group = [first]
                assert first.upload is not None
                await asyncio.wait([first.upload])  # an abort cancels it
                await slots.acquire()  # released by the acker once the group is answered
                if first.aborted:  # aborted while it waited
                    slots.release()
                    continue
                # Group commit: the following segments whose uploads are done join it.
                while len(group) < self._max_group:
                    try:
                        nxt = self._sealed.get_nowait()
                    except asyncio.QueueEmpty:
                        break
                    if nxt is None or nxt.aborted or nxt.upload is None or not nxt.upload.done():
                        carry.append(nxt)  # committed next, still in seal order
                        break
                    group.append(nxt)
                # The guard: from here these segments are committing and no longer
                # abortable (agent.produce.abort); nothing between the check and this
                # line yields, so an abort cannot slip in.
                for seg in group:
                    self._abortable.pop(id(seg), None)
                # The turn is taken here, synchronously: commits are sequenced in seal order.
                turn = self._order.next() if self._order is not None else None
                task = asyncio.get_running_loop().create_task(self._commit_group(group, turn))
                acks.put_nowait((group, task))
        finally:
            acks.put_nowait(None)
            await acker

    async def _commit_group(self, group: list[Segment], turn: CommitTurn | None) -> list[list[CommitResult]]:
        try:
            return await self._finish_group(group, turn)
        except Exception as e:  # never let one group kill the committer
            if metastore_unavailable(e):  # Postgres down: one line, the clients retry
                log.warning("segments %s not committed, metastore unavailable: %s: %s",
                            [seg.key for seg in group], type(e).__name__, e)  # fmt: skip
            else:
                log.exception("segments %s failed", [seg.key for seg in group])
            return [error_results(KAFKA_STORAGE_ERROR, len(seg.builder)) for seg in group]
        finally:
            if turn is not None:
                # given up or done: the next group may be sequenced, after the previous one
                await turn.wait()
                turn.done()

    async def _finish_group(self, group: list[Segment], turn: CommitTurn | None) -> list[list[CommitResult]]:
        """Commit the uploaded segments of ``group`` together; per segment its results."""
        out: dict[int, list[CommitResult]] = {}
        pending: list[tuple[int, ObjectToCommit]] = []
        keeps: dict[int, tuple[list[int], int]] = {}  # segment -> (batches committed, of n)
        for i, seg in enumerate(group):
            assert seg.upload is not None
            try:
                size, batches = seg.upload.result()
            except ObjectStoreError as e:
                log.warning("upload of %s failed: %s", seg.key, e)
                METRICS.upload_failures.inc()
                out[i] = error_results(KAFKA_STORAGE_ERROR, len(seg.builder))
                continue
            except Exception:
                log.exception("segment %s failed", seg.key)
                out[i] = error_results(KAFKA_STORAGE_ERROR, len(seg.builder))
                continue
            keep = kept(seg, batches)
            if keep is not None:  # some requests were withdrawn: commit the rest only
                keeps[i] = (keep, len(batches))
                if not keep:
                    out[i] = error_results(KAFKA_STORAGE_ERROR, len(batches))  # (never read)
                    continue
                batches = [batches[k] for k in keep]
            pending.append((i, ObjectToCommit(seg.key, size, self._agent_id, batches)))
        last_error: Exception | None = None
        for _attempt in range(self._commit_attempts):
            if not pending or (turn is not None and turn.is_sequenced):
                # (the metastore marked the turn: a later group may hold offsets after
                # the locks this one had; a retry would be sequenced after it)
                break
            t0 = time.perf_counter()
            try:
                if turn is None:
                    outcome = await self._meta.commit_objects([o for _, o in pending])  # type: ignore[attr-defined]
                else:
                    outcome = await self._meta.commit_objects(  # type: ignore[attr-defined]
                        [o for _, o in pending], turn=turn
                    )
            except MetastoreError as e:
                last_error = e
                # Ambiguous: did the transaction commit before the error reached us?
                pending = await self._unregistered(pending, out)
                continue
            METRICS.commit_seconds.observe(time.perf_counter() - t0)
            METRICS.commits.inc()
            METRICS.committed_objects.inc(len(pending))
            for (i, o), res in zip(pending, outcome, strict=True):
                if res.already_committed:
                    # An earlier, ambiguous attempt did land: the offsets are lost to
                    # us, the client retries (idempotent producers get theirs back).
                    log.warning("commit of %s was ambiguous and did land", o.key)
                    out[i] = error_results(REQUEST_TIMED_OUT, len(o.batches))
                else:
                    out[i] = list(res.results)
            pending = []
        for i, o in pending:
            log.error("commit of %s failed: %s", o.key, last_error)
            METRICS.commit_failures.inc()
            out[i] = error_results(KAFKA_STORAGE_ERROR, len(o.batches))
        for i, (keep, n) in keeps.items():
            if len(out[i]) != n:
                out[i] = spread(out[i], keep, n)
        return [out[i] for i in range(len(group))]

    async def _unregistered(
        self, pending: list[tuple[int, ObjectToCommit]], out: dict[int, list[CommitResult]]
    ) -> list[tuple[int, ObjectToCommit]]:
        """After a failed commit: the objects that did not land (to retry); the ones
        that did get REQUEST_TIMED_OUT (committed, offsets unknown)."""
        still = []
        for i, o in pending:
            try:
                registered = await self._meta.object_key_registered(o.key)  # type: ignore[attr-defined]
            except MetastoreError:
                registered = False
            if registered:
                log.warning("commit of %s was ambiguous and did land", o.key)
                out[i] = error_results(REQUEST_TIMED_OUT, len(o.batches))
            else:
                still.append((i, o))
        return still
