"""The fetch planner and reader: batch lookup -> byte ranges -> block cache -> patched bytes.

A Fetch asks for many partitions, each from an offset and up to a byte limit.
For each partition the :class:`FetchReader`

1. looks up the batches from the offset on (``Metastore.find_batches``; the
   answer is cached for ``metadata_cache_ms`` when it holds batches, and
   concurrent identical lookups share one query),
2. chooses the batches that fit the partition's and the response's byte budget
   (:func:`select_batches`, Kafka's rules: the whole batch holding the fetch
   offset comes first, and the first non-empty partition of a response always
   gets at least one whole batch, however large),
3. reads every cache block the response's batches touch once, through the
   agent's :class:`~agent.cache.BlockCache` (LRU blocks, one in-flight GET per
   block; hits without a coroutine), for all its partitions together
   (:meth:`FetchReader.read_many`),
4. copies the batches into one buffer in offset order and patches each batch's
   ``baseOffset`` (the metastore's offset; producers' batches are stored with
   base offset 0) and ``partitionLeaderEpoch`` (0: there are no elections).
   Both fields lie outside the CRC, so nothing is re-encoded. Steps 3 and 4
   are :class:`agent.fetch_read.BatchReads`, which the reader extends.

Only lookups that found batches are cached: an answer "nothing past the high
watermark" or an error is never reused, so a long-poll that re-checks after
registering for commit wake-ups always sees the metastore's current state, and a
cached answer is at most ``metadata_cache_ms`` behind (its high watermark may be
slightly low; its batches stay valid because objects are immutable and the
compactor deletes replaced objects only after a grace period).
"""

from __future__ import annotations

import asyncio
import logging
import uuid
import weakref
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from agent.cache import BlockCache
from agent.clock import Clock
from agent.fetch_leases import FetchLeases
from agent.fetch_plan import BatchReadError, assemble, select_batches
from agent.fetch_read import BatchReads
from agent.parquet_fetch import ParquetFetcher
from agent.watermark_views import WatermarkViews
from metastore.types import BatchLocation, ErrorCode, FindResult

if TYPE_CHECKING:
    from agent.broker import Broker
    from agent.tail_index import TailIndex
    from metastore import Metastore

log = logging.getLogger(__name__)

__all__ = ["BatchReadError", "FetchReader", "PartitionFetch", "assemble", "reader_for", "select_batches"]

# find_batches answers kept at most this many entries (oldest evicted first).
_MAX_CACHED_LOOKUPS = 10_000


@dataclass(slots=True)
class PartitionFetch:
    """What one partition contributes to a Fetch response."""

    error: int
    log_start_offset: int = -1
    high_watermark: int = -1
    batches: list[BatchLocation] = field(default_factory=list)
    records: bytes = b""
    # read_committed only: the last stable offset (-1: the high watermark) and the
    # aborted transactions from the fetch offset on, as (producer id, first offset,
    # marker offset).
    last_stable_offset: int = -1
    aborted: list[tuple[int, int, int]] = field(default_factory=list)
    # read_committed: every batch is below the high watermark of a read that saw
    # the topic free of transaction state (no stable_offsets needed).
    stable: bool = False

    @property
    def lso(self) -> int:
        return self.high_watermark if self.last_stable_offset < 0 else self.last_stable_offset

    @property
    def nbytes(self) -> int:
        return sum(b.byte_len for b in self.batches)


class FetchReader(BatchReads):
    """Batch lookups (briefly cached) and batch reads (through the block cache,
    :class:`agent.fetch_read.BatchReads`)."""

    def __init__(self, meta: Metastore, cache: BlockCache, clock: Clock, *, lookup_ttl_ms: int) -> None:
        self.meta = meta
        self.cache = cache
        self.clock = clock
        self._ttl = lookup_ttl_ms / 1000.0
        self._lookups: dict[tuple[uuid.UUID, int, int, int], tuple[float, FindResult]] = {}
        self._inflight: dict[tuple[uuid.UUID, int, int, int], asyncio.Future[FindResult]] = {}
        self.lookups = 0  # metastore queries made (tests, metrics)
        # Batches moved into Parquet: rebuilt vectorised, row groups cached (agent/parquet_fetch.py).
        self.parquet = ParquetFetcher(cache, self._describe_object)
        self.leases: FetchLeases | None = None  # read leases for fetches in flight
        self.tail: TailIndex | None = None  # this agent's own latest commits (agent.tail_index)
        self.views: WatermarkViews | None = None  # topic watermarks shared between commits

    # -- lookups --------------------------------------------------------------------

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
        if res.error == ErrorCode.NONE and res.batches and self._ttl > 0:
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
                if res.error == ErrorCode.NONE and res.batches and self._ttl > 0:
                    if len(self._lookups) >= _MAX_CACHED_LOOKUPS:
                        self._expire()
                    self._lookups[wants[i]] = (now, res)
        return [r for r in out if r is not None]

    def find_tail(
        self, topic_id: uuid.UUID, partition: int, offset: int, max_bytes: int, log_start: int
    ) -> list[BatchLocation] | None:
        """The batches from ``offset`` on out of this agent's own latest commits
        (:meth:`agent.tail_index.TailIndex.find`: ``log_start`` as current as the
        watermark views, :mod:`agent.watermark_views`), or
        None when they do not hold it; no metastore query."""
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


_READERS: weakref.WeakKeyDictionary[Broker, FetchReader] = weakref.WeakKeyDictionary()


def reader_for(broker: Broker) -> FetchReader:
    """The broker's :class:`FetchReader` (created on first use)."""
    r = _READERS.get(broker)
    if r is None:
        r = FetchReader(broker.meta, broker.cache, broker.clock, lookup_ttl_ms=broker.config.metadata_cache_ms)
        r.leases = FetchLeases(broker.meta, broker.config.agent_id)
        r.tail = broker.tail
        notifier = broker.notifier
        r.views = WatermarkViews(
            broker.meta, broker.clock, lambda: notifier.generation, ttl_ms=broker.config.metadata_cache_ms
        )
        _READERS[broker] = r
    return r
