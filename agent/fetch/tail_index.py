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
from operator import itemgetter
from typing import TYPE_CHECKING

from metastore.log import DEFAULT_MAX_BATCHES
from metastore.types import BatchLocation

if TYPE_CHECKING:
    from agent.clock import Clock
    from metastore import BatchToCommit, CommitResult

# One batch of a chain: (base offset, when it was acknowledged, then the object key,
# the batch and its result as the commit gave them). Its BatchLocation is built when
# a Fetch is first answered from it (find), then kept in their place: at 1,000
# partitions a commit carries ~1 record per batch, and the frozen dataclass's
# construction was paid per KiB produced, for batches most often never read from here.
_Entry = tuple[int, float, "str | BatchLocation", "BatchToCommit | None", "CommitResult | None"]
_BASE, _TIME = itemgetter(0), itemgetter(1)


def _location(ents: list[_Entry], j: int) -> BatchLocation:
    """``ents[j]``'s location, built once."""
    base, t, loc, b, r = ents[j]
    if isinstance(loc, BatchLocation):
        return loc
    assert b is not None and r is not None
    loc = BatchLocation(
        loc, b.byte_pos, b.byte_len, base, base + b.last_offset_delta, b.record_count, b.max_timestamp,
        r.log_append_time_ms,
    )  # fmt: skip
    ents[j] = (base, t, loc, None, None)
    return loc


class _Chain:
    """One partition's batches at consecutive offsets, oldest first."""

    __slots__ = ("end", "ents")

    def __init__(self) -> None:
        self.ents: list[_Entry] = []
        self.end = -1  # the offset after the last batch

    def trim(self, oldest: float, keep: int) -> int:
        """Drop the batches acknowledged at or before ``oldest`` and all but the last
        ``keep``; how many were dropped."""
        ents = self.ents
        cut = bisect_right(ents, oldest, max(len(ents) - keep, 0), key=_TIME)
        if cut > 0:
            del ents[:cut]
        return cut


class TailIndex:
    """Per partition, the batches of this agent's latest commits (see the module)."""

    def __init__(self, clock: Clock, *, ttl_ms: int, max_batches: int = 200_000, per_partition: int = 256) -> None:
        self._clock = clock
        self._ttl = ttl_ms / 1000.0
        self._max = max_batches
        self._per_partition = per_partition
        # Keyed by the topic id's int (a plain slot; UUID.__hash__ is Python code, paid per batch).
        self._chains: dict[tuple[int, int], _Chain] = {}
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
        # A chain is trimmed of expired batches once its oldest is half a ttl past
        # expiry, not at every commit: find never serves an expired batch anyway.
        stale = oldest - self._ttl / 2
        keep = self._per_partition
        chains = self._chains
        added = 0
        for b, r in zip(batches, results, strict=False):
            base = r.base_offset
            if r.error or base < 0:  # (ErrorCode.NONE is 0)
                continue
            pk = (b.topic_id.int, b.partition)
            c = chains.get(pk)
            if c is None:
                c = chains[pk] = _Chain()
            elif base != c.end:
                if base < c.end:
                    continue  # a duplicate: its original is already in the chain, or older
                added -= len(c.ents)  # a gap: another writer committed in between
                c.ents = []
            ents = c.ents
            ents.append((base, now, key, b, r))
            c.end = base + b.last_offset_delta + 1
            added += 1
            if ents[0][1] < stale or len(ents) > keep:
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
        c = self._chains.get((topic_id.int, partition))
        if c is None or offset >= c.end or offset < log_start:
            return None
        ents = c.ents
        # The batch holding ``offset``: the last to start at or before it (no gaps in a chain).
        i = bisect_right(ents, offset, key=_BASE) - 1
        if i < 0 or ents[i][1] < self._clock.monotonic() - self._ttl:
            return None
        self.hits += 1
        out: list[BatchLocation] = []
        total = 0
        for j in range(i, min(len(ents), i + DEFAULT_MAX_BATCHES)):
            loc = _location(ents, j)
            total += loc.byte_len
            if out and total > max_bytes:
                break
            out.append(loc)
        return out

    def forget(self, topic_id: uuid.UUID, partition: int) -> None:
        c = self._chains.pop((topic_id.int, partition), None)
        if c is not None:
            self._size -= len(c.ents)

    def clear(self) -> None:
        self._chains.clear()
        self._size = 0
