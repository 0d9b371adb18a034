"""Step 7 of a Fetch: each partition's batches from its fetch offset on (the metastore's index).

Where it sits: called by :mod:`agent.fetch.plan` for the wants that
:mod:`agent.fetch.width` did not settle; before the plan's read_committed cut
and byte budget. :func:`lookup` asks ``Metastore.find_batches`` for each
partition (in one ``find_batches_many`` call from ``LOOKUP_MANY_MIN``
partitions on) through :class:`Lookups`, the reader's short-lived lookup cache:

- an answer is cached for ``metadata_cache_ms`` when it holds batches, and
  concurrent identical lookups share one query;
- an answer "nothing past the high watermark" or an error is never reused, so a
  long-poll that re-checks after registering for commit wake-ups always sees
  the metastore's current state, and a cached answer is at most
  ``metadata_cache_ms`` behind (its high watermark may be slightly low; its
  batches stay valid because objects are immutable and the compactor deletes
  replaced objects only after a grace period, :mod:`agent.fetch.leases`).

A lookup that fails answers KAFKA_STORAGE_ERROR for its partitions (retriable).
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Sequence
from typing import TYPE_CHECKING

from agent.fetch.model import PartitionFetch, Want
from kafka_protocol.errors import ErrorCode
from metastore.types import BatchLocation, FindResult, MetastoreError
from metastore.types import ErrorCode as MetaError

if TYPE_CHECKING:
    from agent.clock import Clock
    from agent.fetch.leases import FetchLeases
    from agent.fetch.tail_index import TailIndex
    from metastore import Metastore

log = logging.getLogger(__name__)

# find_batches answers kept at most this many entries (oldest evicted first).
_MAX_CACHED_LOOKUPS = 10_000

# This many partitions left to look up: one metastore call for all of them
# (lookup). A Fetch reaching one worker of several names only that worker's
# partitions (4 of a consumer's 8 with two workers): one lookup each cost a
# connection, BEGIN and COMMIT apiece, 2.3x the agent CPU of one worker at 5 MB/s.
LOOKUP_MANY_MIN = 2


def limit(w: Want, max_bytes: int) -> int:
    """The bytes a lookup of ``w`` may return: its partition's limit within the
    request's, and at least 1 (the first batch is always sent)."""
    return max(1, min(w.max_bytes, max_bytes))


async def lookup(reader: Lookups, wants: list[Want], max_bytes: int, fresh: bool) -> list[PartitionFetch]:
    """Each want's batches (or its error), in order; one metastore call for all of
    them from ``LOOKUP_MANY_MIN`` wants on."""
    if len(wants) >= LOOKUP_MANY_MIN:
        return await _lookup_many(reader, wants, max_bytes, fresh)
    return list(await asyncio.gather(*(_lookup_one(reader, w, limit(w, max_bytes), fresh) for w in wants)))


def _found(res: FindResult) -> PartitionFetch:
    if res.error != MetaError.NONE:
        return PartitionFetch(int(res.error))
    return PartitionFetch(ErrorCode.NONE, res.log_start_offset, res.high_watermark, list(res.batches))


async def _lookup_one(reader: Lookups, w: Want, limit: int, fresh: bool) -> PartitionFetch:
    if w.topic_id is None:
        return PartitionFetch(w.error)
    try:
        res = await reader.find(w.topic_id, w.partition, w.fetch_offset, limit, fresh=fresh)
    except MetastoreError as e:
        log.warning("fetch: batch lookup of %s/%d failed: %s", w.topic_id, w.partition, e)
        return PartitionFetch(ErrorCode.KAFKA_STORAGE_ERROR)
    return _found(res)


async def _lookup_many(reader: Lookups, wants: list[Want], max_bytes: int, fresh: bool) -> list[PartitionFetch]:
    keys = [(w.topic_id, w.partition, w.fetch_offset, limit(w, max_bytes)) for w in wants if w.topic_id is not None]
    try:
        found = iter(await reader.find_many(keys, fresh=fresh))
    except MetastoreError as e:
        log.warning("fetch: batch lookup of %d partitions failed: %s", len(keys), e)
        return [PartitionFetch(w.error or ErrorCode.KAFKA_STORAGE_ERROR) for w in wants]
    return [PartitionFetch(w.error) if w.topic_id is None else _found(next(found)) for w in wants]


class Lookups:
    """Batch lookups, briefly cached; the reader (:class:`agent.fetch.reader.FetchReader`)
    sets ``meta``, ``clock`` and calls :meth:`_init_lookups`."""

    meta: Metastore
    clock: Clock
    leases: FetchLeases | None
    tail: TailIndex | None

    def _init_lookups(self, ttl_ms: int) -> None:
        self._ttl = ttl_ms / 1000.0
        self._lookups: dict[tuple[uuid.UUID, int, int, int], tuple[float, FindResult]] = {}
        self._inflight: dict[tuple[uuid.UUID, int, int, int], asyncio.Future[FindResult]] = {}
        self.lookups = 0  # metastore queries made (tests, metrics)

    async def find(
        self, topic_id: uuid.UUID, partition: int, offset: int, max_bytes: int, *, fresh: bool = False
    ) -> FindResult:
        """``find_batches``, served from the short-lived cache unless ``fresh``."""
        key = (topic_id, partition, offset, max_bytes)
        if not fresh and self._ttl > 0:
            hit = self._lookups.get(key)
            if hit is not None:
                if self.clock.monotonic() - hit[0] < self._ttl:
                    return hit[1]
                del self._lookups[key]
        fut = self._inflight.get(key)
        if fut is not None and not fresh:
            return await asyncio.shield(fut)
        fut = asyncio.get_running_loop().create_future()
        if not fresh:
            self._inflight[key] = fut
        try:
            self.lookups += 1
            res = await self.meta.find_batches(topic_id, partition, offset, max_bytes)
            fut.set_result(res)
        except asyncio.CancelledError:
            fut.cancel()
            raise
        except BaseException as e:
            fut.set_exception(e)
            fut.exception()  # delivered to concurrent waiters; avoid "never retrieved"
            raise
        finally:
            if self._inflight.get(key) is fut:
                del self._inflight[key]
        if self.leases is not None and res.batches:
            self.leases.seen(b.object_key for b in res.batches)
        if res.error == MetaError.NONE and res.batches and self._ttl > 0:
            if len(self._lookups) >= _MAX_CACHED_LOOKUPS:
                self._expire()
            self._lookups[key] = (self.clock.monotonic(), res)
        return res

    async def find_many(
        self, wants: Sequence[tuple[uuid.UUID, int, int, int]], *, fresh: bool = False
    ) -> list[FindResult]:
        """:meth:`find` of each ``(topic_id, partition, offset, max_bytes)``; the
        lookups not served from the cache go to the metastore in one call."""
        out: list[FindResult | None] = [None] * len(wants)
        todo: list[int] = []
        now = self.clock.monotonic()
        for i, key in enumerate(wants):
            hit = None if fresh or self._ttl <= 0 else self._lookups.get(key)
            if hit is not None and now - hit[0] < self._ttl:
                out[i] = hit[1]
            else:
                todo.append(i)
        if todo:
            self.lookups += len(todo)
            found = await self.meta.find_batches_many([wants[i] for i in todo])
            now = self.clock.monotonic()
            for i, res in zip(todo, found, strict=True):
                out[i] = res
                if self.leases is not None and res.batches:
                    self.leases.seen(b.object_key for b in res.batches)
                if res.error == MetaError.NONE and res.batches and self._ttl > 0:
                    if len(self._lookups) >= _MAX_CACHED_LOOKUPS:
                        self._expire()
                    self._lookups[wants[i]] = (now, res)
        return [r for r in out if r is not None]

    def find_tail(
        self, topic_id: uuid.UUID, partition: int, offset: int, max_bytes: int, log_start: int
    ) -> list[BatchLocation] | None:
        """The batches from ``offset`` on out of this agent's own latest commits
        (:meth:`agent.fetch.tail_index.TailIndex.find`: ``log_start`` as current as
        the watermark views, :mod:`agent.fetch.watermark_views`), or None when they
        do not hold it; no metastore query."""
        tail = self.tail
        if tail is None or not tail.enabled:
            return None
        found = tail.find(topic_id, partition, offset, max_bytes, log_start)
        if found is not None and self.leases is not None:
            self.leases.seen(b.object_key for b in found)
        return found

    def _expire(self) -> None:
        now = self.clock.monotonic()
        for k in [k for k, (t, _) in self._lookups.items() if now - t >= self._ttl]:
            del self._lookups[k]
        while len(self._lookups) >= _MAX_CACHED_LOOKUPS:
            del self._lookups[next(iter(self._lookups))]

    def forget(self, topic_id: uuid.UUID, partition: int, *, tail: bool = True) -> None:
        """Drop cached lookups of one partition (after a read failed, say), and
        unless ``tail`` is False what the tail index knows of it."""
        if tail and self.tail is not None:
            self.tail.forget(topic_id, partition)
        for k in [k for k in self._lookups if k[0] == topic_id and k[1] == partition]:
            del self._lookups[k]
