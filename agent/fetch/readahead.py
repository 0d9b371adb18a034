"""Read-ahead: the next blocks of a sequential reader's partition, loaded before it asks.

Where it sits: after step 8 of a Fetch (:mod:`agent.fetch.read`),
:func:`agent.fetch.plan.fetch_once` hands every look's answer to :meth:`ReadAhead.after_read`
(no await: the Fetch is not held up). One :class:`ReadAhead` per agent
(``FetchReader.readahead``), shared by every connection and consumer group, so two groups
reading the same backlog load each block once (the block cache's one in-flight load per block
does the rest).

How (the tiered-storage seed: AIMD read-ahead, shared by all groups, large reads split into
concurrent ranged requests):

- A partition read that stopped short of its high watermark is a reader behind the tail. Each
  partition keeps a few *streams* (one per reader position, so two groups at different offsets
  do not reset each other) and one *window*: how many bytes of the partition's batches to keep
  looked up and loaded ahead of a stream. When less than half the window is ahead, the batches
  after what was looked up are found through the reader's cached ``find_batches_many`` (one
  metastore call for every partition of the answer) and their cache blocks loaded with
  :meth:`agent.cache.BlockCache.prefetch`: ranged GETs of one block each, at most
  ``concurrency`` at once per agent. The partitions' batches take turns (the nearest first), and
  a stream is ahead only up to the first batch whose blocks the memory bound below held back: a
  later look-up loads them.
- The window starts at one block, grows by one block each time a block it loaded is read or its
  reader catches up with it (additive increase), and halves when one leaves the cache unread or
  is still unread ``expiry_s`` after it was loaded (multiplicative decrease).
- Memory: read-ahead blocks live in the block cache (its capacity bounds them); the bytes loaded
  and not yet read, in flight included, stay within ``max_bytes`` for the whole agent (at most
  half the cache, so read-ahead cannot evict its own blocks before they are read).
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections import OrderedDict, deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from agent.metrics import METRICS
from metastore.types import BatchLocation, FindResult, MetastoreError
from metastore.types import ErrorCode as MetaError
from objectstore.errors import ObjectStoreError

if TYPE_CHECKING:
    from agent.cache import BlockCache
    from agent.clock import Clock
    from agent.fetch.model import PartitionFetch, Want

log = logging.getLogger(__name__)

__all__ = ["ReadAhead"]

MAX_STREAMS = 4  # reader positions tracked per partition (groups reading it at once)
MAX_PARTITIONS = 4096  # partitions tracked per agent (least recently read dropped)

Block = tuple[str, int]
PKey = tuple[uuid.UUID, int]


class _Finder(Protocol):
    async def find_many(
        self, wants: Sequence[tuple[uuid.UUID, int, int, int]], *, fresh: bool = False
    ) -> list[FindResult]: ...


@dataclass(slots=True)
class _Stream:
    """One reader's position in a partition and what was looked up ahead of it."""

    fetched: int  # the offset its last Fetch asked for
    next_offset: int  # where its next Fetch is expected
    ahead_offset: int  # looked up (and loaded) up to here, exclusive
    chunks: deque[tuple[int, int]] = field(default_factory=deque)  # (end offset, bytes) ahead
    busy: bool = False  # a lookup for it is in flight

    def bytes_ahead(self) -> int:
        while self.chunks and self.chunks[0][0] <= self.next_offset:
            self.chunks.popleft()
        return sum(n for _, n in self.chunks)


@dataclass(slots=True)
class _Partition:
    window: int
    streams: list[_Stream] = field(default_factory=list)


@dataclass(slots=True)
class _Pending:
    """A block read-ahead loaded (or is loading) that no read has used yet."""

    at: float
    nbytes: int  # the block size until it has loaded
    parts: set[PKey]
    loaded: bool = False


class ReadAhead:
    """AIMD read-ahead of an agent's partitions into its block cache."""

    def __init__(
        self,
        finder: _Finder,
        cache: BlockCache,
        clock: Clock,
        *,
        max_bytes: int,
        concurrency: int = 8,
        expiry_s: float = 30.0,
    ) -> None:
        self._finder = finder
        self._cache = cache
        self._clock = clock
        self.block = cache.block_size
        self.max_bytes = max(self.block, min(max_bytes, cache.capacity // 2))
        self._expiry = expiry_s
        self._slots = asyncio.Semaphore(concurrency)
        self._parts: OrderedDict[PKey, _Partition] = OrderedDict()
        self._pending: OrderedDict[Block, _Pending] = OrderedDict()
        self.held = 0  # bytes loaded (or loading) ahead and not yet read
        self._total = 0  # the partitions' windows summed (the gauge)
        self._early: set[Block] = set()  # used while loading
        self._tasks: set[asyncio.Task[None]] = set()
        cache.on_watched = self._watched

    def window(self, topic_id: uuid.UUID, partition: int) -> int:
        p = self._parts.get((topic_id, partition))
        return p.window if p is not None else self.block

    def after_read(self, wants: Sequence[Want], found: Sequence[PartitionFetch]) -> None:
        """Note where each partition's reader got to; look up and load ahead of those
        behind their high watermark (in the background)."""
        self._expire()
        todo: list[tuple[PKey, _Stream, int]] = []
        for w, pf in zip(wants, found, strict=True):
            if pf.error or not pf.batches or w.topic_id is None:
                continue
            key = (w.topic_id, w.partition)
            part = self._parts.get(key)
            if part is None:
                part = self._parts[key] = _Partition(self.block)
                self._total += self.block
                if len(self._parts) > MAX_PARTITIONS:
                    self._total -= self._parts.popitem(last=False)[1].window
            else:
                self._parts.move_to_end(key)
            nxt = pf.batches[-1].last_offset + 1
            s = self._stream(part, w.fetch_offset, nxt)
            if pf.high_watermark <= nxt or s.busy:
                continue  # at the tail: nothing to read ahead
            looked_ahead = bool(s.chunks)
            if s.ahead_offset < nxt:
                s.ahead_offset, s.chunks = nxt, deque()
            ahead = s.bytes_ahead()
            if looked_ahead and not ahead:
                # The reader caught up with what was looked up for it: too small a window.
                self._resize(key, lambda w: min(self.max_bytes, w + self.block))
            if ahead * 2 <= part.window:
                s.busy = True
                todo.append((key, s, part.window - ahead))
        if todo:
            task = asyncio.get_running_loop().create_task(self._ahead(todo))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        METRICS.readahead_window.set(self._total)

    def _stream(self, part: _Partition, fetched: int, nxt: int) -> _Stream:
        for i, s in enumerate(part.streams):
            # Its next Fetch, or the same one again (a long-poll looking twice).
            if s.next_offset == fetched or s.fetched == fetched:
                s.fetched, s.next_offset = fetched, nxt
                part.streams.insert(0, part.streams.pop(i))
                return s
        s = _Stream(fetched, nxt, nxt)
        part.streams.insert(0, s)
        del part.streams[MAX_STREAMS:]
        return s

    async def _ahead(self, todo: list[tuple[PKey, _Stream, int]]) -> None:
        try:
            found = await self._finder.find_many(
                [(k[0], k[1], s.ahead_offset, want) for k, s, want in todo]
            )
        except MetastoreError as e:
            log.debug("read-ahead lookup failed: %s", e)
            found = []
        finally:
            for _, s, _ in todo:
                s.busy = False
        loads: list[Block] = []
        # The partitions' batches a turn each (the nearest first, so one partition far
        # ahead cannot take the whole bound from the others' next reads), up to the
        # first batch with a block the memory bound holds back: the next look-up
        # starts there (a block skipped here would be a miss).
        runs = [
            (key, s, res.batches)
            for (key, s, _), res in zip(todo, found, strict=False)
            if res.error == MetaError.NONE and res.batches
        ]
        covered = [0] * len(runs)
        held_back = False
        for i in range(max((len(bs) for _, _, bs in runs), default=0)):
            for j, (key, s, bs) in enumerate(runs):
                if i < len(bs):
                    if not self._cover(key, bs[i], loads):
                        held_back = True
                        break
                    s.ahead_offset = bs[i].last_offset + 1
                    covered[j] += bs[i].byte_len
            if held_back:
                break
        for (_, s, _), n in zip(runs, covered, strict=True):
            if n:
                s.chunks.append((s.ahead_offset, n))
        if loads:
            await asyncio.gather(*(self._load(k) for k in loads))

    def _cover(self, key: PKey, b: BatchLocation, loads: list[Block]) -> bool:
        """Have every block of batch ``b`` cached, loading or queued in ``loads``;
        False (nothing more queued) when the bound on bytes held ahead is reached."""
        for i in range(b.byte_pos // self.block, (b.byte_pos + b.byte_len - 1) // self.block + 1):
            k = (b.object_key, i)
            pending = self._pending.get(k)
            if pending is not None:
                pending.parts.add(key)
            elif not self._cache.has(*k):
                if self.held + self.block > self.max_bytes:
                    return False
                self.held += self.block
                self._pending[k] = _Pending(self._clock.monotonic(), self.block, {key})
                loads.append(k)
        return True

    async def _load(self, k: Block) -> None:
        async with self._slots:
            if k not in self._pending:
                return  # expired while it waited for a slot
            try:
                n = await self._cache.prefetch(*k)
            except (ObjectStoreError, OSError) as e:
                log.debug("read-ahead of %s block %d failed: %s", k[0], k[1], e)
                n = 0
        METRICS.readahead_bytes.inc(n)
        p = self._pending.get(k)
        if p is None:  # already read (or expired) while it loaded
            if k in self._early:
                self._early.discard(k)
                METRICS.readahead_used_bytes.inc(n)
            return
        if n == 0:  # failed, or a read loaded it first: nothing of ours to watch
            self._drop(k)
        else:
            self.held += n - p.nbytes
            p.nbytes, p.loaded = n, True

    def _watched(self, k: Block, outcome: str) -> None:
        """The cache says a read-ahead block was read ("used") or left unread ("wasted")."""
        p = self._drop(k)
        if p is None:
            return
        if outcome == "used":
            if p.loaded:
                METRICS.readahead_used_bytes.inc(p.nbytes)
            else:
                self._early.add(k)  # a read joined its load: counted when it has loaded
            for key in p.parts:
                self._resize(key, lambda w: min(self.max_bytes, w + self.block))
        else:
            self._waste(p)

    def _waste(self, p: _Pending) -> None:
        METRICS.readahead_wasted_bytes.inc(p.nbytes)
        for key in p.parts:
            self._resize(key, lambda w: max(self.block, w // 2))

    def _resize(self, key: PKey, f: Callable[[int], int]) -> None:
        part = self._parts.get(key)
        if part is not None:
            new = f(part.window)
            self._total += new - part.window
            part.window = new

    def _drop(self, k: Block) -> _Pending | None:
        p = self._pending.pop(k, None)
        if p is not None:
            self.held -= p.nbytes
            self._cache.unwatch(k)
        return p

    def _expire(self) -> None:
        """Read-ahead blocks still unread ``expiry_s`` after they were loaded count as waste."""
        limit = self._clock.monotonic() - self._expiry
        while self._pending:
            k, p = next(iter(self._pending.items()))
            if p.at > limit:
                break
            self._drop(k)
            self._waste(p)

    async def drain(self) -> None:
        """Wait until the lookups and loads started so far have ended (tests, shutdown)."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    async def close(self) -> None:
        for t in list(self._tasks):
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
