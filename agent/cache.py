"""LRU block cache for object bytes, with one shared in-flight load per block.

Objects are immutable, so a block ``(key, index)`` never goes stale. Reads are
aligned to ``block_size`` so that neighbouring fetches of the same object share
a GET; concurrent misses on one block wait for the same load (request
coalescing). Capacity is in bytes. The objects the agent uploads are put in as
they are written (:meth:`BlockCache.put_object`, from the produce pipeline).

Read-ahead (:mod:`agent.fetch.readahead`) loads blocks through
:meth:`BlockCache.prefetch`: such a block is *watched* until a read first uses
it (a hit, or a read joining its load) or it leaves the cache unread; either is
reported to ``on_watched`` (``"used"`` / ``"wasted"``), which is how the
read-ahead window learns. Read-ahead blocks live in the same LRU, so they count
against the same capacity.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

Loader = Callable[[str, int, int], Awaitable[bytes]]  # (key, start, end) -> bytes


@dataclass(slots=True)
class CacheStats:
    hits: int = 0
    misses: int = 0
    loads: int = 0
    bytes_loaded: int = 0
    evictions: int = 0

    @property
    def hit_ratio(self) -> float:
        total = self.hits + self.misses
        return self.hits / total if total else 0.0


class BlockCache:
    def __init__(self, loader: Loader, *, capacity_bytes: int, block_size: int) -> None:
        self._loader = loader
        self._capacity = capacity_bytes
        self.block_size = block_size
        self._blocks: OrderedDict[tuple[str, int], bytes] = OrderedDict()
        self._size = 0
        self._inflight: dict[tuple[str, int], asyncio.Future[bytes]] = {}
        self.stats = CacheStats()
        # Read-ahead blocks not yet read (agent.fetch.readahead); reported once each.
        self.watched: set[tuple[str, int]] = set()
        self.on_watched: Callable[[tuple[str, int], str], None] | None = None

    @property
    def capacity(self) -> int:
        return self._capacity

    async def read(
        self, key: str, start: int, end: int, object_size: int | None = None, *, use: bool = True
    ) -> bytes:
        """Bytes ``[start, end)`` of object ``key``.

        ``object_size`` (when known) bounds the last block's GET so we never ask
        for bytes past the end of the object. ``use=False`` (a read served to a
        peer) leaves watched read-ahead blocks watched: they were loaded for this
        agent's own readers, and count as used (their bytes no longer held ahead)
        when one of those reads them.
        """
        if end <= start:
            return b""
        bs = self.block_size
        first, last = start // bs, (end - 1) // bs
        if first == last:
            block = await self._block(key, first, object_size, use)
            return block[start - first * bs : end - first * bs]
        blocks = await asyncio.gather(
            *(self._block(key, i, object_size, use) for i in range(first, last + 1))
        )
        joined = b"".join(blocks)
        off = first * bs
        return joined[start - off : end - off]

    async def blocks(self, wanted: Sequence[tuple[str, int]]) -> list[bytes | BaseException]:
        """Whole blocks ``(key, index)``, in order: hits straight from the cache (no
        coroutine each), misses loaded concurrently; a failed load is returned as
        its exception, in that block's place."""
        out: list[Any] = []  # bytes, an exception, or None until loaded
        misses: list[int] = []
        cached = self._blocks
        for k in wanted:
            data = cached.get(k)
            if data is not None:
                cached.move_to_end(k)
                self.stats.hits += 1
                if self.watched and k in self.watched:
                    self._report(k, "used")
            else:
                misses.append(len(out))
            out.append(data)
        if misses:
            loaded = await asyncio.gather(
                *(self._block(wanted[i][0], wanted[i][1], None) for i in misses),
                return_exceptions=True,
            )
            for i, got in zip(misses, loaded, strict=True):
                out[i] = got
        return out

    def put_object(self, key: str, data: bytes) -> None:
        """Cache the whole object ``key`` this agent has just written (write-through):
        its blocks are exactly what a read of it would load, so consumers reading at
        the tail of this agent's writes never GET back what it PUT."""
        bs = self.block_size
        for i in range(0, len(data), bs):
            self._insert((key, i // bs), data[i : i + bs])

    async def read_through(self, key: str, start: int, end: int) -> bytes:
        """Bytes ``[start, end)`` in one load that bypasses the blocks: for callers that
        cache what they make of the bytes instead (Parquet row groups, decoded once)."""
        data = await self._loader(key, start, end)
        self.stats.loads += 1
        self.stats.bytes_loaded += len(data)
        return data

    def has(self, key: str, index: int) -> bool:
        """Whether block ``(key, index)`` is cached or being loaded (no LRU touch)."""
        k = (key, index)
        return k in self._blocks or k in self._inflight

    async def prefetch(self, key: str, index: int) -> int:
        """Load block ``(key, index)`` ahead of any read and watch it (see the module
        docstring); the bytes loaded, 0 when it was cached or in flight already.
        A failed load raises and is not watched."""
        k = (key, index)
        if k in self._blocks or k in self._inflight:
            return 0
        self.watched.add(k)
        try:
            data = await self._load(k, None)
        except BaseException:
            self.watched.discard(k)
            raise
        return len(data)

    def unwatch(self, k: tuple[str, int]) -> bool:
        """Stop watching ``k`` without a report (read-ahead gave it up); whether it was watched."""
        if k in self.watched:
            self.watched.discard(k)
            return True
        return False

    def _report(self, k: tuple[str, int], outcome: str) -> None:
        self.watched.discard(k)
        if self.on_watched is not None:
            self.on_watched(k, outcome)

    async def _block(
        self, key: str, index: int, object_size: int | None, use: bool = True
    ) -> bytes:
        k = (key, index)
        data = self._blocks.get(k)
        if data is not None:
            self._blocks.move_to_end(k)
            self.stats.hits += 1
            if use and self.watched and k in self.watched:
                self._report(k, "used")
            return data
        fut = self._inflight.get(k)
        if fut is not None:
            self.stats.hits += 1
            if use and self.watched and k in self.watched:
                self._report(k, "used")  # a read joined a read-ahead load
            return await asyncio.shield(fut)
        self.stats.misses += 1
        return await self._load(k, object_size)

    async def _load(self, k: tuple[str, int], object_size: int | None) -> bytes:
        key, index = k
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        self._inflight[k] = fut
        try:
            start = index * self.block_size
            end = start + self.block_size
            if object_size is not None:
                end = min(end, object_size)
            data = await self._loader(key, start, end)
            self.stats.loads += 1
            self.stats.bytes_loaded += len(data)
            self._insert(k, data)
            fut.set_result(data)
            return data
        except BaseException as e:
            fut.set_exception(e)
            # The exception is delivered to concurrent waiters; avoid "never retrieved".
            fut.exception()
            raise
        finally:
            self._inflight.pop(k, None)

    def _insert(self, k: tuple[str, int], data: bytes) -> None:
        # A block already here (a load finishing after put_object, or the reverse)
        # is the same bytes: counted once.
        if len(data) > self._capacity or k in self._blocks:
            return
        self._blocks[k] = data
        self._size += len(data)
        while self._size > self._capacity:
            old_k, old = self._blocks.popitem(last=False)
            self._size -= len(old)
            self.stats.evictions += 1
            if self.watched and old_k in self.watched:
                self._report(old_k, "wasted")
