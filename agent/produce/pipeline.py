"""The produce pipeline: the one object per agent that runs append -> seal -> upload -> commit -> ack.

Where it sits: ``broker.pipeline``; the produce handler, the transaction
coordinator (markers) and the share groups append to it. Its steps are the
mixins it is made of, one module each (:mod:`agent.produce`):
:class:`~agent.produce.append.Batcher` (the one open segment for all
partitions, sealed by size, age or the adaptive rule of
:mod:`agent.produce.autobatch`), :class:`~agent.produce.upload.Uploader`
(create-only PUTs, bounded), :class:`~agent.produce.commit.Committer` (group
commits in seal order, at most ``max_commits_in_flight`` overlapping when the
metastore sequences in call order) and :class:`~agent.produce.ack.Acker`
(answers in seal order). This module sets their shared state up and runs their
background tasks (the committer and the flush ticker). A byte budget
(:mod:`agent.produce.budget`) bounds the memory held by requests waiting here;
:mod:`agent.produce.admission` refuses a request at once (retriable) when it
does not fit or the store is slow, rather than queueing it, and
:mod:`agent.produce.abort` answers the requests of segments stalled past
``produce_abort_ms`` (retriable, never committed).
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable, Iterable

from agent.clock import Clock, SystemClock
from agent.produce.admission import Admission
from agent.produce.append import Batcher
from agent.produce.autobatch import SealPolicy
from agent.produce.budget import ByteBudget
from agent.produce.commit import Committer
from agent.produce.consolidate import Consolidator
from agent.produce.segment import KAFKA_STORAGE_ERROR, REQUEST_TIMED_OUT, ProduceItem, Segment
from metastore.commit_order import CommitOrder
from metastore.types import BatchToCommit, CommitResult
from objectstore.base import ObjectStore

__all__ = ["KAFKA_STORAGE_ERROR", "REQUEST_TIMED_OUT", "ByteBudget", "ProduceItem", "ProducePipeline"]


class ProducePipeline(Batcher, Committer):
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
        consolidator: Consolidator | None = None,
        abort_ms: int = 0,
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
        self.admission: Admission = Admission(self.budget, self._clock, self.oldest_pending_s)
        self._open: Segment | None = None
        self._sealed: asyncio.Queue[Segment | None] = asyncio.Queue()
        self._seq = 0
        self._tasks: list[asyncio.Task[None]] = []
        self._inflight = 0
        self._pending: dict[int, float] = {}  # sealed, not yet answered: id(seg) -> sealed at
        self._idle = asyncio.Event()
        self._idle.set()
        self._timer = False  # a precise seal timer per segment (with the real ticker)
        # With a journal tier (key_prefix journal/): answered journal objects go here.
        self._consolidator = consolidator
        # Stalled segments are aborted after this long (agent.produce.abort); 0: never.
        self._abort_s = max(0, abort_ms) / 1000.0
        self._abortable: dict[int, Segment] = {}

    # -- lifecycle ------------------------------------------------------------------

    def start(self, *, ticker: bool = True) -> None:
        loop = asyncio.get_running_loop()
        self._tasks.append(loop.create_task(self._commit_loop(), name="floe-committer"))
        if self._consolidator is not None:
            self._consolidator.start()
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
        if self._consolidator is not None:
            await self._consolidator.close()

    def oldest_pending_s(self) -> float:
        """How long the oldest sealed segment has waited for upload + commit (0 if none):
        readiness calls the pipeline stalled past a deadline."""
        first = next(iter(self._pending.values()), None)
        return 0.0 if first is None else max(0.0, self._clock.monotonic() - first)

    async def drain(self) -> None:
        """Wait until every sealed segment has been committed (or failed)."""
        await self._idle.wait()
