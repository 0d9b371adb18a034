"""The tail index: where this agent's own latest commits put each partition's batches.

Where it sits: the produce pipeline tells it, at each acknowledgement, which
batches a commit placed at which offsets in which object
(:meth:`TailIndex.committed`); the width step of a Fetch (:mod:`agent.fetch.width`) asks it first for partitions a
consumer reads at the tail (:meth:`TailIndex.find`), before the metastore's batch
lookup. A consumer of 1,000 partitions fed by this agent then costs one
watermark query per topic per Fetch, not a batch lookup of every partition with
new data (issue 18: the lookups and the unpacking of run rows were a third of
the agent's CPU at 1,000 partitions).

What it knows, per partition: one *chain*, the batches of its own commits whose
offsets follow each other without a gap. A batch whose base offset is the
chain's next offset extends it; a later one (another agent, or a transaction
marker, committed in between) starts a new chain; an earlier one (a duplicate
answered with its original's offset) is ignored. So an offset inside a chain
names exactly the batch the log holds there: batches are immutable once
committed. What the chain does not know is the log start and the high
watermark, which other agents and retention move; the caller passes both, read
from the metastore since the last commit notified to this agent and at most
``metadata_cache_ms`` ago (:mod:`agent.fetch.watermark_views`), and the index answers only offsets in
``[log_start, chain end)``. Entries older than ``ttl_ms`` are not served (the
compactor deletes replaced objects only after its grace period, minutes by
default). A duplicate that starts a chain is served from this agent's copy of
the batch: the same bytes (an idempotent retry resends its batch), in an object
the metastore keeps at least for the grace period.
"""

from __future__ import annotations

import uuid
from bisect import bisect_right
from collections.abc import Sequence
from typing import TYPE_CHECKING

from metastore.log import DEFAULT_MAX_BATCHES
from metastore.runs import trim
from metastore.types import BatchLocation

if TYPE_CHECKING:
    from agent.clock import Clock
    from metastore import BatchToCommit, CommitResult

class _Chain:
    """One partition's batches at consecutive offsets, oldest first."""

    __slots__ = ("end", "lasts", "locs", "times")

    def __init__(self) -> None:
        self.locs: list[BatchLocation] = []
        self.lasts: list[int] = []  # last offsets, for bisect
        self.times: list[float] = []  # when each was acknowledged (monotonic)
        self.end = -1  # the offset after the last batch

    def trim(self, oldest: float, keep: int) -> int:
        """Drop the batches acknowledged before ``oldest`` and all but the last
        ``keep``; how many were dropped."""
        cut = bisect_right(self.times, oldest)
        cut = max(cut, len(self.locs) - keep)
        if cut > 0:
            del self.locs[:cut], self.lasts[:cut], self.times[:cut]
        return cut


class TailIndex:
    """Per partition, the batches of this agent's latest commits (see the module)."""

    def __init__(self, clock: Clock, *, ttl_ms: int, max_batches: int = 200_000, per_partition: int = 256) -> None:
        self._clock = clock
        self._ttl = ttl_ms / 1000.0
        self._max = max_batches
        self._per_partition = per_partition
        self._chains: dict[tuple[uuid.UUID, int], _Chain] = {}
        self._size = 0
        self.hits = 0  # answers served (tests, metrics)

    @property
    def enabled(self) -> bool:
        return self._ttl > 0

    def committed(self, key: str, batches: Sequence[BatchToCommit], results: Sequence[CommitResult]) -> None:
        """Record one acknowledged object's batches (``results`` in the same order)."""
        if self._ttl <= 0 or not batches or len(batches) != len(results):
            return  # (an object committed before, by an earlier attempt: no results)
        now = self._clock.monotonic()
        oldest = now - self._ttl
        keep = self._per_partition
        chains = self._chains
        added = 0
        for b, r in zip(batches, results, strict=False):
            base = r.base_offset
            if r.error or base < 0:  # (ErrorCode.NONE is 0)
                continue
            pk = (b.topic_id, b.partition)
            c = chains.get(pk)
            if c is None:
                c = chains[pk] = _Chain()
            if base < c.end:
                continue  # a duplicate: its original is already in the chain, or older
            if base > c.end:  # a gap: another writer committed in between
                added -= len(c.locs)
                c.locs, c.lasts, c.times = [], [], []
            last = base + b.last_offset_delta
            c.locs.append(BatchLocation(
                key, b.byte_pos, b.byte_len, base, last, b.record_count, b.max_timestamp, r.log_append_time_ms,
            ))  # fmt: skip
            c.lasts.append(last)
            c.times.append(now)
            c.end = last + 1
            added += 1
            if c.times[0] < oldest or len(c.times) > keep:
                added -= c.trim(oldest, keep)
        self._size += added
        if self._size > self._max:
            self.clear()

    def find(
        self, topic_id: uuid.UUID, partition: int, offset: int, max_bytes: int, log_start: int
    ) -> list[BatchLocation] | None:
        """The batches from the one holding ``offset`` on, while they fit in
        ``max_bytes`` (the first always), as the metastore's lookup answers (``runs.trim``); None
        when the chain does not hold ``offset`` (or it lies below ``log_start``)."""
        c = self._chains.get((topic_id, partition))
        if c is None or not c.locs or offset >= c.end or offset < log_start:
            return None
        i = bisect_right(c.lasts, offset - 1)  # the first batch whose last offset >= offset
        if i >= len(c.locs) or c.locs[i].base_offset > offset:
            return None
        if c.times[i] < self._clock.monotonic() - self._ttl:
            return None
        self.hits += 1
        return trim(c.locs[i : i + DEFAULT_MAX_BATCHES], max_bytes, DEFAULT_MAX_BATCHES)

    def forget(self, topic_id: uuid.UUID, partition: int) -> None:
        c = self._chains.pop((topic_id, partition), None)
        if c is not None:
            self._size -= len(c.locs)

    def clear(self) -> None:
        self._chains.clear()
        self._size = 0
