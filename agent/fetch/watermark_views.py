"""Watermark views: one topic watermark read shared by the Fetches planned between two commits.

Where it sits: the width step of a Fetch (:func:`agent.fetch.width.caught_up`)
reads a topic's log start offsets, high watermarks and transaction state
(``Metastore.topic_offsets``) for every Fetch naming many of its partitions.
librdkafka has no fetch sessions, so each of its consumers names all of its
partitions in every Fetch, and every commit to the topic wakes all of them at
once: at 1,000 partitions two consumers read the same 1,000 rows right after
each other, each wake-up.

A view is the answer of one read, kept while it is current: no commit has been
notified to this agent since the read began (:attr:`CommitNotifier.generation`:
this agent's commits, other agents' through ``agent.cluster``, finished
transactions and DeleteRecords all notify), and it is younger than
``metadata_cache_ms``, the bound the lookup cache already keeps for what no
notification announces (another agent's DeleteRecords, retention). Concurrent
reads of a topic share one query. A view never claims more than the metastore
held when it was read, so a reader of it sees the topic as of that moment; a
commit after it is notified, and the next plan reads again.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING

from agent.metrics import METRICS

if TYPE_CHECKING:
    from agent.clock import Clock
    from metastore import Metastore
    from metastore.types import TopicOffsets

# Views kept at most (the oldest dropped first); a Fetch names few topics.
_MAX_VIEWS = 1_000
_READ = METRICS.watermark_reads.labels("read")
_SHARED = METRICS.watermark_reads.labels("shared")


class WatermarkViews:
    """``topic_offsets`` per topic, shared until a commit is notified or ``ttl_ms`` passes."""

    def __init__(self, meta: Metastore, clock: Clock, generation: Callable[[], int], *, ttl_ms: int) -> None:
        self._meta = meta
        self._clock = clock
        self._generation = generation
        self._ttl = ttl_ms / 1000.0
        # topic id -> (generation when the read began, when it began, the answer)
        self._views: dict[uuid.UUID, tuple[int, float, TopicOffsets]] = {}
        self._reads: dict[uuid.UUID, tuple[int, asyncio.Task[TopicOffsets]]] = {}
        self.reads = 0  # metastore queries made (tests, metrics)

    async def topic_offsets(self, topic_id: uuid.UUID) -> TopicOffsets:
        """The topic's offsets as of a read begun after the last notified commit."""
        if self._ttl <= 0:
            self.reads += 1
            _READ.inc()
            return await self._meta.topic_offsets(topic_id)
        gen, now = self._generation(), self._clock.monotonic()
        view = self._views.get(topic_id)
        if view is not None and view[0] == gen and now - view[1] < self._ttl:
            _SHARED.inc()
            return view[2]
        pending = self._reads.get(topic_id)
        if pending is not None and pending[0] == gen:
            _SHARED.inc()
        else:
            self.reads += 1
            _READ.inc()
            task = asyncio.ensure_future(self._meta.topic_offsets(topic_id))
            pending = self._reads[topic_id] = (gen, task)
            task.add_done_callback(lambda t: self._done(topic_id, gen, now, t))
        # shield: a cancelled Fetch leaves the read to the others waiting on it.
        return await asyncio.shield(pending[1])

    def _done(self, topic_id: uuid.UUID, gen: int, began: float, task: asyncio.Task[TopicOffsets]) -> None:
        if self._reads.get(topic_id, (0, None))[1] is task:
            del self._reads[topic_id]
        # (Asking for the exception also marks an error nobody awaits as retrieved.)
        if task.cancelled() or task.exception() is not None or self._generation() != gen:
            return  # failed, or a commit was notified during the read: it may not hold that commit
        if len(self._views) >= _MAX_VIEWS and topic_id not in self._views:
            del self._views[next(iter(self._views))]
        self._views[topic_id] = (gen, began, task.result())

