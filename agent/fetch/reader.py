"""The read side's per-agent state: lookup cache, block cache, Parquet rebuilds, leases, views.

Where it sits: one :class:`FetchReader` per agent (``broker.fetch_reader``, built
by :func:`make_reader` on first use), handed to every step of a Fetch that
touches storage: :mod:`agent.fetch.width` (watermark views, tail index),
:mod:`agent.fetch.lookup` (:class:`~agent.fetch.lookup.Lookups`, the cached
``find_batches``) and :mod:`agent.fetch.read`
(:class:`~agent.fetch.read.BatchReads`, block cache -> patched bytes), and
:mod:`agent.fetch.readahead` after it. ListOffsets
by time and share groups read batches through it too.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from agent.cache import BlockCache
from agent.clock import Clock
from agent.fetch.leases import FetchLeases
from agent.fetch.lookup import Lookups
from agent.fetch.parquet import ParquetFetcher
from agent.fetch.read import READ_SLOTS, BatchReads
from agent.fetch.readahead import ReadAhead
from agent.fetch.watermark_views import WatermarkViews

if TYPE_CHECKING:
    from agent.config import AgentConfig
    from agent.fetch.tail_index import TailIndex
    from agent.notify import CommitNotifier
    from metastore import Metastore

__all__ = ["FetchReader", "make_reader"]


class FetchReader(Lookups, BatchReads):
    """Batch lookups (briefly cached, :class:`~agent.fetch.lookup.Lookups`) and batch
    reads (through the block cache, :class:`~agent.fetch.read.BatchReads`)."""

    def __init__(self, meta: Metastore, cache: BlockCache, clock: Clock, *, lookup_ttl_ms: int) -> None:
        self.meta = meta
        self.cache = cache
        self.clock = clock
        self._init_lookups(lookup_ttl_ms)
        # Batches moved into Parquet: rebuilt vectorised, row groups cached (agent.fetch.parquet).
        self.parquet = ParquetFetcher(cache, self._describe_object)
        self.leases: FetchLeases | None = None  # read leases for fetches in flight
        self.tail: TailIndex | None = None  # this agent's own latest commits (agent.fetch.tail_index)
        self.views: WatermarkViews | None = None  # topic watermarks shared between commits
        self.read_slots = asyncio.Semaphore(READ_SLOTS)  # Fetches reading at once (agent.fetch.read)
        self.readahead: ReadAhead | None = None  # ahead of readers behind the tail (agent.fetch.readahead)


def make_reader(
    meta: Metastore,
    cache: BlockCache,
    clock: Clock,
    config: AgentConfig,
    tail: TailIndex,
    notifier: CommitNotifier,
) -> FetchReader:
    """An agent's reader, with its read leases, tail index and watermark views."""
    r = FetchReader(meta, cache, clock, lookup_ttl_ms=config.metadata_cache_ms)
    r.leases = FetchLeases(meta, config.agent_id)
    r.tail = tail
    r.views = WatermarkViews(meta, clock, lambda: notifier.generation, ttl_ms=config.metadata_cache_ms)
    if config.readahead:
        r.readahead = ReadAhead(
            r,
            cache,
            clock,
            max_bytes=config.readahead_max_bytes,
            concurrency=config.readahead_concurrency,
            expiry_s=config.readahead_expiry_ms / 1000,
        )
    return r
