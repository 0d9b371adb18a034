"""AIMD read-ahead (agent/fetch/readahead.py) without a server: a catch-up reader
is served from the cache after its first Fetch, the window grows on use and halves
on waste, two groups cost the GETs of one, and memory stays within its bound."""

from __future__ import annotations

import asyncio
import uuid

from agent.cache import BlockCache
from agent.clock import ManualClock
from agent.fetch.model import Want
from agent.fetch.plan import fetch_once
from agent.fetch.readahead import ReadAhead
from agent.fetch.reader import FetchReader
from kafka_protocol.records import RecordBatchBuilder, iter_batches
from metastore.types import BatchLocation, ErrorCode, FindResult

TOPIC = uuid.uuid4()
BLOCK = 16 << 10


class SlowStore:
    """Objects in memory; counts ranged GETs, each answered after a few loop turns
    (a slow store, without wall-clock sleeps); ``gate`` holds every GET while clear."""

    def __init__(self) -> None:
        self.objects: dict[str, bytes] = {}
        self.gets: list[tuple[str, int, int]] = []
        self.inflight = 0
        self.max_inflight = 0
        self.gate = asyncio.Event()
        self.gate.set()

    async def get(self, key: str, start: int, end: int) -> bytes:
        self.gets.append((key, start, end))
        self.inflight += 1
        self.max_inflight = max(self.max_inflight, self.inflight)
        try:
            await self.gate.wait()
            for _ in range(5):
                await asyncio.sleep(0)
            return self.objects[key][start:end]
        finally:
            self.inflight -= 1


class Backlog:
    """A metastore's batch index over ``partitions`` partitions written into shared
    objects (each object holds a run of every partition, as the produce path writes)."""

    def __init__(
        self, store: SlowStore, partitions: int, objects: int, batches_per_run: int
    ) -> None:
        self.index: dict[int, list[BatchLocation]] = {p: [] for p in range(partitions)}
        raw = RecordBatchBuilder()
        for i in range(10):
            raw.append(b"k%d" % i, b"v" * 300)
        batch = raw.build()
        offsets = dict.fromkeys(range(partitions), 0)
        for o in range(objects):
            key, data = f"obj-{o:03d}", bytearray()
            for p in range(partitions):
                for _ in range(batches_per_run):
                    loc = BatchLocation(
                        key, len(data), len(batch), offsets[p], offsets[p] + 9, 10, 0, -1
                    )
                    self.index[p].append(loc)
                    offsets[p] += 10
                    data += batch
            store.objects[key] = bytes(data)
        self.hw = offsets

    def _find(self, p: int, offset: int, max_bytes: int) -> FindResult:
        out: list[BatchLocation] = []
        for b in self.index[p]:
            if b.last_offset >= offset and (
                not out or sum(x.byte_len for x in out) + b.byte_len <= max_bytes
            ):
                out.append(b)
        return FindResult(ErrorCode.NONE, 0, self.hw[p], out)

    async def find_batches(self, topic_id, partition, offset, max_bytes, max_batches=1000):
        return self._find(partition, offset, max_bytes)

    async def find_batches_many(self, wants):
        return [self._find(p, off, mb) for _, p, off, mb in wants]


def _reader(
    store: SlowStore,
    meta: Backlog,
    *,
    cache_bytes: int = 64 << 20,
    max_bytes: int = 8 << 20,
    clock: ManualClock | None = None,
    concurrency: int = 8,
) -> FetchReader:
    clock = clock or ManualClock()
    cache = BlockCache(store.get, capacity_bytes=cache_bytes, block_size=BLOCK)
    r = FetchReader(meta, cache, clock, lookup_ttl_ms=0)  # type: ignore[arg-type]
    r.readahead = ReadAhead(
        r, cache, clock, max_bytes=max_bytes, concurrency=concurrency, expiry_s=30
    )
    return r


async def _consume(
    r: FetchReader, meta: Backlog, parts: list[int], *, per_fetch: int, drain: bool, on_fetch=None
) -> dict[int, list[int]]:
    """A consumer reading ``parts`` from offset 0 to the end; the offsets it got."""
    pos = dict.fromkeys(parts, 0)
    got: dict[int, list[int]] = {p: [] for p in parts}
    while any(pos[p] < meta.hw[p] for p in parts):
        wants = [Want(0, p, pos[p], per_fetch, TOPIC) for p in parts if pos[p] < meta.hw[p]]
        found = await fetch_once(r, wants, 1 << 30)
        if on_fetch is not None:
            on_fetch()
        for w, pf in zip(wants, found, strict=True):
            assert pf.error == 0
            for v in iter_batches(bytes(pf.records), validate=True):
                got[w.partition].extend(range(v.base_offset, v.base_offset + v.records_count))
            pos[w.partition] = got[w.partition][-1] + 1
        if drain:
            assert r.readahead is not None
            await r.readahead.drain()
    return got


async def test_catch_up_reader_is_served_from_cache_after_its_first_fetch():
    store = SlowStore()
    meta = Backlog(store, partitions=2, objects=20, batches_per_run=8)
    r = _reader(store, meta)
    misses: list[int] = []
    got = await _consume(
        r,
        meta,
        [0, 1],
        per_fetch=BLOCK,
        drain=True,
        on_fetch=lambda: misses.append(r.cache.stats.misses),
    )
    assert got == {p: list(range(meta.hw[p])) for p in (0, 1)}  # every record, in order
    assert len(misses) > 10
    assert misses[1:] == [misses[0]] * (len(misses) - 1), (
        "after the first Fetch, every block was read ahead"
    )
    blocks = {(k, s // BLOCK) for k, s, _ in store.gets}
    assert len(blocks) == len(store.gets), "no block was read twice"
    assert r.readahead is not None and r.readahead.window(TOPIC, 0) > 4 * BLOCK  # grew with use


async def test_blocks_held_back_by_the_memory_bound_are_loaded_later():
    """Interleaved partitions want far more blocks ahead than the agent-wide bound
    lets load at once: what it held back is looked up and loaded on a later Fetch
    (never skipped), the partitions' nearest batches first (none starves the
    others), so after the first Fetch the reader finds every block in the cache."""
    store = SlowStore()
    meta = Backlog(store, partitions=6, objects=24, batches_per_run=4)
    r = _reader(store, meta, max_bytes=8 * BLOCK)
    misses: list[int] = []
    got = await _consume(
        r, meta, list(range(6)), per_fetch=BLOCK // 2, drain=True,
        on_fetch=lambda: misses.append(r.cache.stats.misses),
    )  # fmt: skip
    assert got == {p: list(range(meta.hw[p])) for p in range(6)}
    assert len(misses) > 20 and misses[-1] == misses[0], "after the first Fetch, all read ahead"
    assert r.readahead is not None and r.readahead.window(TOPIC, 0) > 4 * BLOCK  # it grew


async def test_a_read_served_to_a_peer_does_not_use_a_read_ahead_block():
    """A ring peer reading a block this agent loaded ahead for its own reader leaves
    it held ahead (so read-ahead stays paced by that reader and cannot run ahead
    into evicting what it has not read); the reader's own read then uses it."""
    store = SlowStore()
    meta = Backlog(store, partitions=2, objects=8, batches_per_run=8)
    r = _reader(store, meta)
    ra = r.readahead
    assert ra is not None
    await fetch_once(r, [Want(0, p, 0, BLOCK, TOPIC) for p in (0, 1)], 1 << 30)
    await ra.drain()
    watched = sorted(r.cache.watched)
    assert watched and ra.held > 0
    held = ra.held
    key, index = watched[0]
    await r.cache.read(key, index * BLOCK, index * BLOCK + 10, use=False)
    assert (key, index) in r.cache.watched and ra.held == held
    await r.cache.blocks([(key, index)])
    assert (key, index) not in r.cache.watched and ra.held < held


async def test_window_grows_on_use_and_halves_on_waste():
    store = SlowStore()
    meta = Backlog(store, partitions=1, objects=40, batches_per_run=8)
    clock = ManualClock()
    r = _reader(store, meta, clock=clock)
    ra = r.readahead
    assert ra is not None
    assert ra.window(TOPIC, 0) == BLOCK
    windows: list[int] = []
    pos = 0
    for _ in range(6):
        (pf,) = await fetch_once(r, [Want(0, 0, pos, BLOCK, TOPIC)], 1 << 30)
        pos = pf.batches[-1].last_offset + 1
        await ra.drain()
        windows.append(ra.window(TOPIC, 0))
    assert windows == sorted(windows) and windows[-1] >= windows[0] + 3 * BLOCK, windows
    # The reader goes away; what was read ahead for it expires unread: the window halves.
    before, held = windows[-1], ra.held
    assert held > 0
    clock.advance(31)
    ra.after_read([], [])
    assert ra.held == 0
    assert BLOCK <= ra.window(TOPIC, 0) <= before // 2


async def test_eviction_of_unread_read_ahead_halves_the_window():
    store = SlowStore()
    meta = Backlog(store, partitions=1, objects=40, batches_per_run=8)
    r = _reader(store, meta, cache_bytes=64 * BLOCK)
    ra = r.readahead
    assert ra is not None
    pos = 0
    for _ in range(5):
        (pf,) = await fetch_once(r, [Want(0, 0, pos, BLOCK, TOPIC)], 1 << 30)
        pos = pf.batches[-1].last_offset + 1
        await ra.drain()
    grown = ra.window(TOPIC, 0)
    # Another reader floods the cache with other objects: the read-ahead blocks leave unread.
    for i in range(r.cache.capacity // BLOCK + 1):
        store.objects[f"other-{i}"] = b"x" * BLOCK
        await r.cache.read(f"other-{i}", 0, BLOCK)
    assert ra.held == 0
    assert ra.window(TOPIC, 0) < grown


async def test_two_groups_cost_about_the_gets_of_one():
    async def run(groups: int) -> int:
        store = SlowStore()
        meta = Backlog(store, partitions=4, objects=24, batches_per_run=6)
        r = _reader(store, meta)
        results = await asyncio.gather(
            *(_consume(r, meta, [0, 1, 2, 3], per_fetch=BLOCK, drain=False) for _ in range(groups))
        )
        for got in results:
            assert got == {p: list(range(meta.hw[p])) for p in range(4)}
        assert r.readahead is not None
        await r.readahead.drain()
        assert r.cache.stats.misses < len(store.gets) / 2, "most blocks were read ahead"
        return len(store.gets)

    one, two = await run(1), await run(2)
    assert two <= 1.2 * one, (one, two)


async def test_read_ahead_memory_and_concurrency_stay_bounded():
    """Partitions behind the tail each want a window ahead: the agent-wide bound
    holds them back, and at most ``concurrency`` read-ahead GETs are in flight."""
    store = SlowStore()
    meta = Backlog(store, partitions=7, objects=30, batches_per_run=8)
    r = _reader(store, meta, cache_bytes=64 * BLOCK, max_bytes=3 * BLOCK, concurrency=2)
    ra = r.readahead
    assert ra is not None
    parts = list(range(7))
    found = await fetch_once(r, [Want(0, p, 0, BLOCK, TOPIC) for p in parts], 1 << 30)
    store.gate.clear()  # read-ahead GETs stay in flight
    for _ in range(100):
        await asyncio.sleep(0)
    assert 0 < store.inflight <= 2
    assert ra.held <= 3 * BLOCK
    store.gate.set()
    await ra.drain()
    held: list[int] = []
    pos = {p: pf.batches[-1].last_offset + 1 for p, pf in zip(parts, found, strict=True)}
    while any(pos[p] < meta.hw[p] for p in parts):
        wants = [Want(0, p, pos[p], BLOCK, TOPIC) for p in parts if pos[p] < meta.hw[p]]
        for w, pf in zip(wants, await fetch_once(r, wants, 1 << 30), strict=True):
            pos[w.partition] = pf.batches[-1].last_offset + 1
        held.append(ra.held)
        assert r.cache._size <= r.cache.capacity
    await ra.drain()
    assert max(held) <= 3 * BLOCK
