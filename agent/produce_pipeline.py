"""The produce pipeline: batcher -> uploader -> committer.

Validated record batches from every connection go into ONE open segment for
all partitions. The segment is sealed when it reaches ``flush_bytes``, when it
is older than ``flush_interval_ms``, or, once ``flush_min_interval_ms`` have
passed since the previous seal, as soon as waiting longer cannot bring more
data: every connection with requests in it is blocked at its learned in-flight
limit, or no produce request has arrived for a while (adaptive sealing,
:mod:`agent.autobatch`). The reason is counted in
``floe_segment_seals_total{reason}``. Sealed segments are uploaded concurrently (bounded) with create-only
PUTs, then committed to the metastore strictly in seal order (upload
concurrently, commit in order): the committer takes the next segment and every
following one whose upload has already finished, and commits them as one group
(``Metastore.commit_objects``, one transaction, each touched partition row
updated once per group). Only then does each waiting
produce request get its base offsets: nothing is acknowledged before the object
is durable and the commit has returned.

With a metastore that sequences commits in call order (``ordered_commits``,
:mod:`metastore.commit_order`) up to ``max_commits_in_flight`` groups (2) are
committing at once: the next group's round trips and COPY overlap this one's,
its offsets still come after this one's. Groups are acknowledged strictly in
seal order. A failed group is retried only while no later group can have been
sequenced after it; otherwise its requests get a retriable error (the clients
retry, and an idempotent producer's later batches get OUT_OF_ORDER_SEQUENCE_NUMBER
from the metastore, as a Kafka broker would answer them).

A byte budget bounds the memory held by produce requests waiting here; a
request over the budget waits (back-pressure) instead of growing the heap.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from agent.autobatch import ProduceFlow, SealPolicy
from agent.clock import Clock, SystemClock
from agent.metrics import METRICS
from kafka_protocol.errors import ErrorCode as KafkaErrorCode
from metastore.commit_order import CommitOrder, CommitTurn
from metastore.types import BatchToCommit, CommitResult, MetastoreError, ObjectToCommit
from metastore.unavailable import metastore_unavailable
from objectstore.base import ObjectStore
from objectstore.errors import ObjectStoreError
from objectstore.segment import BatchMeta, SegmentBuilder

log = logging.getLogger(__name__)

# Agent-level outcomes (not the metastore's): the wire codes from the one error table.
KAFKA_STORAGE_ERROR = KafkaErrorCode.KAFKA_STORAGE_ERROR
REQUEST_TIMED_OUT = KafkaErrorCode.REQUEST_TIMED_OUT
_FINISH_IN_THREAD = 1 << 20


@dataclass(slots=True)
class ProduceItem:
    topic_id: uuid.UUID
    partition: int
    batch: bytes | memoryview
    meta: BatchMeta
    is_transactional: bool = False


@dataclass(slots=True)
class _Waiter:
    future: asyncio.Future[list[CommitResult]]
    first: int
    count: int
    nbytes: int
    flow: ProduceFlow | None = None


@dataclass(slots=True)
class _Segment:
    builder: SegmentBuilder
    opened_at: float
    waiters: list[_Waiter] = field(default_factory=list)
    partitions: set[tuple[uuid.UUID, int]] = field(default_factory=set)
    nbytes: int = 0
    key: str = ""
    upload: asyncio.Task[tuple[int, list[BatchToCommit]]] | None = None


def _error_results(code: KafkaErrorCode, n: int) -> list[CommitResult]:
    # CommitResult.error is typed with the metastore's subset of Kafka's codes; these
    # agent-level failures are outside that subset but share the numbering.
    return [CommitResult(code, -1, -1, -1)] * n  # type: ignore[arg-type]


class ByteBudget:
    """Bytes of produce data admitted but not yet acknowledged.

    Waiters are served first come, first served; with room and nobody waiting,
    :meth:`try_acquire` admits without a coroutine (the common case)."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.used = 0
        self._waiters: deque[tuple[int, asyncio.Future[None]]] = deque()

    def _fits(self, n: int) -> bool:
        # An oversized request is admitted alone so it cannot wait forever.
        return self.used == 0 or self.used + n <= self.capacity

    def try_acquire(self, n: int) -> bool:
        if not self._waiters and self._fits(n):
            self.used += n
            return True
        return False

    async def acquire(self, n: int) -> None:
        if self.try_acquire(n):
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append((n, fut))
        try:
            await fut
        except asyncio.CancelledError:
            if fut.done() and not fut.cancelled():
                self.release_nowait(n)  # granted as we were cancelled: give it back
            else:
                with contextlib.suppress(ValueError):
                    self._waiters.remove((n, fut))
                self._wake()
            raise

    def release_nowait(self, n: int) -> None:
        self.used -= n
        self._wake()

    def _wake(self) -> None:
        while self._waiters:
            n, fut = self._waiters[0]
            if fut.done():
                self._waiters.popleft()
                continue
            if not self._fits(n):
                return
            self._waiters.popleft()
            self.used += n
            fut.set_result(None)

    async def release(self, n: int) -> None:
        self.release_nowait(n)


class ProducePipeline:
    def __init__(
        self,
        store: ObjectStore,
        metastore: object,
        *,
        agent_id: str,
        flush_bytes: int,
        flush_interval_ms: int,
        upload_concurrency: int,
        max_buffered_bytes: int,
        clock: Clock | None = None,
        on_commit: Callable[[Iterable[tuple[uuid.UUID, int]]], None] | None = None,
        on_committed: Callable[[str, list[BatchToCommit], list[CommitResult]], None] | None = None,
        on_uploaded: Callable[[str, bytes], None] | None = None,
        key_prefix: str = "segments/",
        commit_attempts: int = 3,
        max_group: int = 64,
        flush_min_interval_ms: int | None = None,
        max_commits_in_flight: int = 2,
    ) -> None:
        self._store = store
        self._meta = metastore
        self._agent_id = agent_id
        self._flush_bytes = flush_bytes
        self._interval = flush_interval_ms / 1000.0
        # Adaptive sealing's lower bound; None (or >= the interval) keeps the fixed
        # interval. Idle means no produce request for a quarter of it.
        min_ms = flush_interval_ms if flush_min_interval_ms is None else min(flush_min_interval_ms, flush_interval_ms)
        self._min_interval = min_ms / 1000.0
        self._adaptive = min_ms < flush_interval_ms
        self._idle_gap = self._min_interval / 4
        self._policy = SealPolicy()
        self._last_seal_at: float | None = None
        self._clock = clock or SystemClock()
        self._on_commit = on_commit
        self._on_committed = on_committed
        self._on_uploaded = on_uploaded  # the block cache (write-through)
        self._prefix = key_prefix
        self._commit_attempts = commit_attempts
        self._max_group = max_group
        # Overlapping commits need the metastore to sequence them in call order.
        ordered = bool(getattr(type(metastore), "ordered_commits", False))  # not through wrappers
        self._max_commits = max(1, max_commits_in_flight) if ordered else 1
        self._order = CommitOrder() if self._max_commits > 1 else None
        self._upload_sem = asyncio.Semaphore(upload_concurrency)
        self.budget = ByteBudget(max_buffered_bytes)
        self._open: _Segment | None = None
        self._sealed: asyncio.Queue[_Segment | None] = asyncio.Queue()
        self._seq = 0
        self._tasks: list[asyncio.Task[None]] = []
        self._inflight = 0
        self._pending: dict[int, float] = {}  # sealed, not yet answered: id(seg) -> sealed at
        self._idle = asyncio.Event()
        self._idle.set()
        self._timer = False  # a precise seal timer per segment (with the real ticker)

    # -- lifecycle ------------------------------------------------------------------

    def start(self, *, ticker: bool = True) -> None:
        loop = asyncio.get_running_loop()
        self._tasks.append(loop.create_task(self._commit_loop(), name="floe-committer"))
        if ticker:
            self._tasks.append(loop.create_task(self._tick_loop(), name="floe-flush-ticker"))
            self._timer = True

    async def close(self) -> None:
        """Flush what is buffered, wait for its commit, stop the background tasks."""
        self.seal("drain")
        await self.drain()
        self._sealed.put_nowait(None)
        for t in self._tasks:
            if t.get_name() == "floe-flush-ticker":
                t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    def oldest_pending_s(self) -> float:
        """How long the oldest sealed segment has waited for upload + commit (0 if none):
        readiness calls the pipeline stalled past a deadline."""
        first = next(iter(self._pending.values()), None)
        return 0.0 if first is None else max(0.0, self._clock.monotonic() - first)

    async def drain(self) -> None:
        """Wait until every sealed segment has been committed (or failed)."""
        await self._idle.wait()

    # -- the batcher ----------------------------------------------------------------

    async def reserve(self, nbytes: int) -> None:
        await self.budget.acquire(nbytes)

    def append(
        self, items: list[ProduceItem], reserved: int, flow: ProduceFlow | None = None
    ) -> asyncio.Future[list[CommitResult]]:
        """Add one request's batches to the open segment (synchronously, so
        requests from one connection keep their order); the future resolves with
        one result per item after the commit. ``flow`` is the sending
        connection's, for adaptive sealing."""
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[list[CommitResult]] = loop.create_future()
        now = self._clock.monotonic()
        seg = self._open
        if seg is None:
            seg = self._open = _Segment(SegmentBuilder(), now)
            if self._timer:
                # Seal at exactly opened_at + interval; the half-interval ticker alone
                # seals anywhere in [interval, 1.5 * interval] and adds to every p99.
                loop.call_later(self._interval, self._seal_if_open, seg)
                if self._adaptive:
                    loop.call_later(max(0.0, self._adaptive_at(seg) - now), self._check_adaptive, seg)
        first = len(seg.builder)
        add = seg.builder.add
        parts = seg.partitions
        for it in items:
            # No copy: the request frame is not reused, finish() copies once.
            add(it.topic_id, it.partition, it.batch, it.meta, copy=False)
            parts.add((it.topic_id, it.partition))
        seg.waiters.append(_Waiter(fut, first, len(items), reserved, flow))
        seg.nbytes += reserved
        self._policy.appended(flow, now)
        if seg.builder.size >= self._flush_bytes:
            self.seal("size")
        elif self._adaptive and self._policy.all_blocked and now >= self._adaptive_at(seg):
            self.seal("blocked")
        return fut

    def _adaptive_at(self, seg: _Segment) -> float:
        """When adaptive sealing may first close ``seg``: the minimum interval after the
        previous seal, or after ``seg`` opened if it is the first. Counting from the last
        seal bounds the PUT and commit rate just as well, and a segment opened while the
        previous one was still committing does not wait a whole minimum again."""
        last = self._last_seal_at
        return (seg.opened_at if last is None else min(last, seg.opened_at)) + self._min_interval

    def _adaptive_reason(self, seg: _Segment, now: float) -> str | None:
        if not self._adaptive or now < self._adaptive_at(seg):
            return None
        if self._policy.all_blocked:
            return "blocked"
        if now - self._policy.last_append >= self._idle_gap:
            return "idle"
        return None

    def tick(self) -> None:
        """Seal the open segment if it is older than the flush interval, or past
        the minimum interval with every waiting connection blocked or the agent idle."""
        seg = self._open
        if seg is None:
            return
        now = self._clock.monotonic()
        if now - seg.opened_at >= self._interval:
            self.seal("interval")
            return
        reason = self._adaptive_reason(seg, now)
        if reason is not None:
            self.seal(reason)

    def _check_adaptive(self, seg: _Segment) -> None:
        """Timer: at the first adaptive moment, then whenever the agent may have gone idle."""
        if self._open is not seg:
            return
        now = self._clock.monotonic()
        reason = self._adaptive_reason(seg, now)
        if reason is not None:
            self.seal(reason)
            return
        nxt = max(self._policy.last_append + self._idle_gap, self._adaptive_at(seg))
        if nxt < seg.opened_at + self._interval:
            asyncio.get_running_loop().call_later(max(0.0, nxt - now), self._check_adaptive, seg)

    def _seal_if_open(self, seg: _Segment) -> None:
        if self._open is seg:
            self.seal("interval")

    async def _tick_loop(self) -> None:
        while True:
            await asyncio.sleep(self._interval / 2)
            self.tick()

    def seal(self, reason: str = "drain") -> None:
        seg = self._open
        if seg is None or len(seg.builder) == 0:
            return
        self._open = None
        self._last_seal_at = self._clock.monotonic()
        self._policy.sealed()
        METRICS.seals.labels(reason).inc()
        self._seq += 1
        seg.key = self._object_key()
        seg.upload = asyncio.get_running_loop().create_task(self._upload(seg))
        self._inflight += 1
        self._pending[id(seg)] = self._clock.monotonic()
        self._idle.clear()
        self._sealed.put_nowait(seg)

    def _object_key(self) -> str:
        # Time-ordered, unique, and spread over prefixes by the random tail.
        ms = time.time_ns() // 1_000_000
        return f"{self._prefix}{ms:013d}-{self._agent_id[:12]}-{self._seq:08d}-{os.urandom(6).hex()}"

    # -- uploader -------------------------------------------------------------------

    async def _upload(self, seg: _Segment) -> tuple[int, list[BatchToCommit]]:
        if seg.builder.size >= _FINISH_IN_THREAD:
            # Laying out a multi-MiB object is a memcpy: keep it off the event loop
            # (bytes.join drops the GIL for large joins).
            data, entries = await asyncio.to_thread(seg.builder.finish)
        else:
            data, entries = seg.builder.finish()
        batches = [
            BatchToCommit(
                e.topic_id, e.partition, e.byte_pos, e.byte_len, e.record_count,
                e.last_offset_delta, e.base_timestamp, e.max_timestamp,
                e.producer_id, e.producer_epoch, e.base_sequence,
                bool(e.attributes & 0x10),
            )
            for e in entries
        ]
        async with self._upload_sem:
            t0 = time.perf_counter()
            await self._store.put(seg.key, data)
            METRICS.put_seconds.observe(time.perf_counter() - t0)
        METRICS.puts.inc()
        METRICS.put_bytes.inc(len(data))
        if self._on_uploaded is not None:
            self._on_uploaded(seg.key, data)
        return len(data), batches

    # -- committer ------------------------------------------------------------------

    async def _commit_loop(self) -> None:
        acks: asyncio.Queue[tuple[list[_Segment], asyncio.Task[list[list[CommitResult]]]] | None]
        acks = asyncio.Queue()
        slots = asyncio.Semaphore(self._max_commits)
        acker = asyncio.get_running_loop().create_task(self._ack_loop(acks, slots))
        carry: list[_Segment | None] = []
        try:
            while True:
                first = carry.pop() if carry else await self._sealed.get()
                if first is None:
                    return
                group = [first]
                assert first.upload is not None
                await asyncio.wait([first.upload])
                await slots.acquire()  # released by the acker once the group is answered
                # Group commit: the following segments whose uploads are done join it.
                while len(group) < self._max_group:
                    try:
                        nxt = self._sealed.get_nowait()
                    except asyncio.QueueEmpty:
                        break
                    if nxt is None or nxt.upload is None or not nxt.upload.done():
                        carry.append(nxt)  # committed next, still in seal order
                        break
                    group.append(nxt)
                # The turn is taken here, synchronously: commits are sequenced in seal order.
                turn = self._order.next() if self._order is not None else None
                task = asyncio.get_running_loop().create_task(self._commit_group(group, turn))
                acks.put_nowait((group, task))
        finally:
            acks.put_nowait(None)
            await acker

    async def _commit_group(self, group: list[_Segment], turn: CommitTurn | None) -> list[list[CommitResult]]:
        try:
            return await self._finish_group(group, turn)
        except Exception as e:  # never let one group kill the committer
            if metastore_unavailable(e):  # Postgres down: one line, the clients retry
                log.warning("segments %s not committed, metastore unavailable: %s: %s",
                            [seg.key for seg in group], type(e).__name__, e)  # fmt: skip
            else:
                log.exception("segments %s failed", [seg.key for seg in group])
            return [_error_results(KAFKA_STORAGE_ERROR, len(seg.builder)) for seg in group]
        finally:
            if turn is not None:
                # given up or done: the next group may be sequenced, after the previous one
                await turn.wait()
                turn.done()

    async def _ack_loop(
        self,
        acks: asyncio.Queue[tuple[list[_Segment], asyncio.Task[list[list[CommitResult]]]] | None],
        slots: asyncio.Semaphore,
    ) -> None:
        """Answers the groups strictly in seal order."""
        while (item := await acks.get()) is not None:
            group, task = item
            outcomes = await task
            released = self._policy.released
            for seg, results in zip(group, outcomes, strict=True):
                if self._on_committed is not None:
                    self._committed(seg, results)
                for w in seg.waiters:
                    if w.flow is not None:
                        released(w.flow)
                    if not w.future.done():
                        w.future.set_result(results[w.first : w.first + w.count])
                self.budget.release_nowait(seg.nbytes)
                if self._on_commit is not None:
                    self._on_commit(seg.partitions)
                self._inflight -= 1
                self._pending.pop(id(seg), None)
            if self._inflight == 0:
                self._idle.set()
            slots.release()

    def _committed(self, seg: _Segment, results: list[CommitResult]) -> None:
        """Tell ``on_committed`` (the tail index) where the segment's batches went."""
        up = seg.upload
        if up is None or not up.done() or up.cancelled() or up.exception() is not None:
            return
        assert self._on_committed is not None
        try:
            self._on_committed(seg.key, up.result()[1], results)
        except Exception:  # an index is never worth an answer
            log.exception("on_committed failed for %s", seg.key)

    async def _finish_group(self, group: list[_Segment], turn: CommitTurn | None) -> list[list[CommitResult]]:
        """Commit the uploaded segments of ``group`` together; per segment its results."""
        out: dict[int, list[CommitResult]] = {}
        pending: list[tuple[int, ObjectToCommit]] = []
        for i, seg in enumerate(group):
            assert seg.upload is not None
            try:
                size, batches = seg.upload.result()
            except ObjectStoreError as e:
                log.warning("upload of %s failed: %s", seg.key, e)
                METRICS.upload_failures.inc()
                out[i] = _error_results(KAFKA_STORAGE_ERROR, len(seg.builder))
                continue
            except Exception:
                log.exception("segment %s failed", seg.key)
                out[i] = _error_results(KAFKA_STORAGE_ERROR, len(seg.builder))
                continue
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
                    out[i] = _error_results(REQUEST_TIMED_OUT, len(o.batches))
                else:
                    out[i] = list(res.results)
            pending = []
        for i, o in pending:
            log.error("commit of %s failed: %s", o.key, last_error)
            METRICS.commit_failures.inc()
            out[i] = _error_results(KAFKA_STORAGE_ERROR, len(o.batches))
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
                out[i] = _error_results(REQUEST_TIMED_OUT, len(o.batches))
            else:
                still.append((i, o))
        return still
