"""The fetch planner and reader (agent/fetch.py) without a server: GET counting,
one load per block, block-cache hits, header patching, lookup caching."""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import replace

import pytest

from agent.cache import BlockCache
from agent.clock import ManualClock
from agent.fetch.plan import select_batches
from agent.fetch.read import BatchReadError
from agent.fetch.reader import FetchReader
from kafka_protocol.messages._runtime import ZERO_COPY_THRESHOLD, BufferParts
from kafka_protocol.records import RecordBatchBuilder, RecordBatchView, iter_batches
from metastore.types import BatchLocation, ErrorCode, FindResult

TOPIC = uuid.uuid4()


def _batch(n: int, tag: str) -> bytes:
    b = RecordBatchBuilder()
    for i in range(n):
        b.append(f"{tag}-k{i}".encode(), f"{tag}-v{i}".encode(), [("h", tag.encode())], timestamp_ms=1000 + i)
    return b.build()


class CountingStore:
    """Objects in memory; counts ranged GETs."""

    def __init__(self) -> None:
        self.objects: dict[str, bytes] = {}
        self.gets: list[tuple[str, int, int]] = []

    async def get(self, key: str, start: int, end: int) -> bytes:
        self.gets.append((key, start, end))
        await asyncio.sleep(0)  # let concurrent readers pile up on the in-flight load
        return self.objects[key][start:end]


def _object(store: CountingStore, key: str, batches: list[bytes], first_offset: int, pad: int = 8) -> list[BatchLocation]:
    """Lay ``batches`` out in one object after a ``pad``-byte header; return their locations."""
    data = bytearray(b"H" * pad)
    locs = []
    offset = first_offset
    for raw in batches:
        view = RecordBatchView(raw)
        locs.append(
            BatchLocation(key, len(data), len(raw), offset, offset + view.last_offset_delta,
                          view.records_count, view.max_timestamp, -1)
        )
        offset += view.last_offset_delta + 1
        data += raw
    store.objects[key] = bytes(data)
    return locs


def _reader(store: CountingStore, meta: object = None, *, block: int = 1 << 20, ttl_ms: int = 100,
            clock: ManualClock | None = None) -> FetchReader:
    cache = BlockCache(store.get, capacity_bytes=64 << 20, block_size=block)
    return FetchReader(meta, cache, clock or ManualClock(), lookup_ttl_ms=ttl_ms)  # type: ignore[arg-type]


async def test_adjacent_batches_one_get_then_cache_hit():
    store = CountingStore()
    locs = _object(store, "obj-1", [_batch(3, "a"), _batch(5, "b"), _batch(2, "c")], first_offset=100)
    reader = _reader(store)

    data = await reader.read(locs)
    assert len(store.gets) == 1, store.gets
    views = list(iter_batches(data, validate=True))  # CRC still valid after patching
    assert [v.base_offset for v in views] == [100, 103, 108]
    assert all(v.partition_leader_epoch == 0 for v in views)
    offsets = [r.offset for v in views for r in v.records()]
    assert offsets == list(range(100, 110))
    assert [r.key for r in views[1].records()] == [f"b-k{i}".encode() for i in range(5)]

    again = await reader.read(locs[1:])
    assert len(store.gets) == 1, "second read should be served from the block cache"
    assert [v.base_offset for v in iter_batches(again)] == [103, 108]


async def test_batches_of_two_objects_in_offset_order():
    store = CountingStore()
    a = _object(store, "obj-a", [_batch(2, "a"), _batch(2, "b")], first_offset=0)
    b = _object(store, "obj-b", [_batch(4, "c")], first_offset=4, pad=100)
    reader = _reader(store)
    data = await reader.read(a + b)
    assert sorted(k for k, _, _ in store.gets) == ["obj-a", "obj-b"]
    assert [v.base_offset for v in iter_batches(data, validate=True)] == [0, 2, 4]


def test_select_batches_budget_and_first_batch_rule():
    locs = [BatchLocation("x", i * 100, 100, i, i, 1, 0, 0) for i in range(5)]
    assert len(select_batches(locs, 250, min_one=True)) == 2
    assert len(select_batches(locs, 50, min_one=True)) == 1  # first batch always whole
    assert select_batches(locs, 50, min_one=False) == []
    assert select_batches([], 100, min_one=True) == []


async def test_concurrent_reads_share_one_get():
    store = CountingStore()
    locs = _object(store, "obj", [_batch(10, "a")], first_offset=0)
    reader = _reader(store)
    results = await asyncio.gather(*(reader.read(locs) for _ in range(8)))
    assert len(set(results)) == 1
    assert len(store.gets) == 1


async def test_read_spanning_blocks():
    store = CountingStore()
    locs = _object(store, "obj", [_batch(50, "a"), _batch(50, "b")], first_offset=0)
    reader = _reader(store, block=256)
    data = await reader.read(locs)
    assert [v.base_offset for v in iter_batches(data, validate=True)] == [0, 50]
    assert len(store.gets) == -(-len(store.objects["obj"]) // 256)  # whole blocks only


async def test_batch_header_across_a_block_boundary():
    """Wherever a block boundary falls (in the patched baseOffset or leader epoch, at
    the magic byte, inside the records), the batch comes out byte for byte as stored
    but for those two fields."""
    raw = [_batch(2, "a"), _batch(3, "b")]
    for pad in range(0, 40):
        store = CountingStore()
        locs = _object(store, "obj", raw, first_offset=7, pad=pad)
        data = await _reader(store, block=32).read(locs)
        views = list(iter_batches(data, validate=True))
        assert [v.base_offset for v in views] == [7, 9]
        assert all(v.partition_leader_epoch == 0 for v in views)
        assert data[16 : len(raw[0])] == raw[0][16:] and data[len(raw[0]) + 16 :] == raw[1][16:]


async def test_fetch_records_are_views_into_the_blocks_unless_they_pin_too_much():
    """A Fetch's records point into the cached blocks (nothing copied but the patched
    headers) when the blocks they keep alive are not much more than the bytes sent;
    a small read out of a large block is copied out instead."""
    store = CountingStore()
    locs = _object(store, "seg", [_batch(200, "a"), _batch(200, "b")], first_offset=0)
    size = len(store.objects["seg"])
    reader = _reader(store, block=1 << 20)  # one block holds the whole object
    (whole,) = await reader.read_records([locs])
    assert isinstance(whole, BufferParts) and len(whole) >= ZERO_COPY_THRESHOLD
    assert whole == (await reader.read_many([locs]))[0]
    assert [v.base_offset for v in iter_batches(bytes(whole), validate=True)] == [0, 200]
    block = (await reader.cache.blocks([("seg", 0)]))[0]
    assert len(block) == size  # type: ignore[arg-type]
    assert all(p.obj is block for p in whole.parts if isinstance(p, memoryview))

    big = _object(store, "big", [_batch(200, "c")], first_offset=0, pad=50_000)
    (part,) = await reader.read_records([big])  # ~9 KiB out of a ~60 KiB block: copied
    assert isinstance(part, bytes) and part == (await reader.read_many([big]))[0]


async def test_wrong_location_is_detected():
    store = CountingStore()
    locs = _object(store, "obj", [_batch(3, "a")], first_offset=0)
    bad = BatchLocation("obj", locs[0].byte_pos + 1, locs[0].byte_len, 0, 2, 3, 0, 0)
    with pytest.raises(BatchReadError):
        await _reader(store).read([bad])


class FakeMeta:
    def __init__(self, result: FindResult) -> None:
        self.result = result
        self.calls = 0

    async def find_batches(self, topic_id, partition, offset, max_bytes, max_batches=1000):
        self.calls += 1
        await asyncio.sleep(0)
        return self.result


async def test_lookup_cache_ttl_and_coalescing():
    loc = BatchLocation("obj", 0, 100, 0, 9, 10, 0, 0)
    meta = FakeMeta(FindResult(ErrorCode.NONE, 0, 10, [loc]))
    clock = ManualClock()
    reader = _reader(CountingStore(), meta, ttl_ms=100, clock=clock)

    results = await asyncio.gather(*(reader.find(TOPIC, 0, 0, 1000) for _ in range(5)))
    assert meta.calls == 1 and all(r.batches == [loc] for r in results)
    await reader.find(TOPIC, 0, 0, 1000)
    assert meta.calls == 1  # cached
    await reader.find(TOPIC, 0, 0, 1000, fresh=True)
    assert meta.calls == 2  # long-poll re-checks bypass the cache
    clock.advance(0.2)
    await reader.find(TOPIC, 0, 0, 1000)
    assert meta.calls == 3  # expired


async def test_empty_and_error_lookups_are_not_cached():
    meta = FakeMeta(FindResult(ErrorCode.NONE, 0, 10, []))  # at the high watermark
    reader = _reader(CountingStore(), meta)
    await reader.find(TOPIC, 0, 10, 1000)
    await reader.find(TOPIC, 0, 10, 1000)
    assert meta.calls == 2
    meta.result = FindResult(ErrorCode.OFFSET_OUT_OF_RANGE, 0, 10)
    await reader.find(TOPIC, 0, 11, 1000)
    await reader.find(TOPIC, 0, 11, 1000)
    assert meta.calls == 4


async def test_missing_object_is_a_retriable_partition_error():
    from agent.fetch.model import Want
    from agent.fetch.plan import fetch_once
    from objectstore.errors import ObjectNotFound

    store = CountingStore()
    locs = _object(store, "gone", [_batch(3, "a")], first_offset=0)
    del store.objects["gone"]

    async def get(key: str, start: int, end: int) -> bytes:
        if key not in store.objects:
            raise ObjectNotFound(f"no such object: {key}", key=key)
        return store.objects[key][start:end]

    meta = FakeMeta(FindResult(ErrorCode.NONE, 0, 3, locs))
    reader = FetchReader(meta, BlockCache(get, capacity_bytes=1 << 20, block_size=1 << 16), ManualClock(),  # type: ignore[arg-type]
                         lookup_ttl_ms=1000)
    want = Want(0, 0, 0, 1 << 20, TOPIC)
    (res,) = await fetch_once(reader, [want], 1 << 20)
    assert res.error == 56 and res.records == b""  # KAFKA_STORAGE_ERROR: clients retry
    await fetch_once(reader, [want], 1 << 20)
    assert meta.calls == 2, "the cached lookup pointing at the missing object was dropped"


async def test_read_many_one_get_for_partitions_side_by_side():
    """A segment holds many partitions' batches side by side: one Fetch response's
    partitions are read with one GET and each gets exactly its own batches."""
    store = CountingStore()
    raw = [_batch(2, "p0"), _batch(3, "p1"), _batch(1, "p2")]
    locs = _object(store, "seg", raw, first_offset=0)
    # each batch is its own partition's, at that partition's offsets
    parts = [[replace(locs[0], base_offset=10, last_offset=11)], [replace(locs[1], base_offset=40, last_offset=42)],
             [replace(locs[2], base_offset=7, last_offset=7)]]
    reader = _reader(store)
    got = await reader.read_many(parts)
    assert len(store.gets) == 1
    assert all(isinstance(g, bytes) for g in got)
    expected = [await _reader(store).read(p) for p in parts]
    assert got == expected
    assert [[v.base_offset for v in iter_batches(g, validate=True)] for g in got] == [[10], [40], [7]]  # type: ignore[arg-type]
    assert [r.key for r in RecordBatchView(got[1]).records()] == [b"p1-k0", b"p1-k1", b"p1-k2"]  # type: ignore[arg-type]


async def test_read_many_failure_stays_with_its_partitions():
    """An object that cannot be read fails only the partitions with batches in it;
    a wrong location fails only its own partition."""
    from objectstore.errors import ObjectNotFound

    store = CountingStore()
    good = _object(store, "good", [_batch(2, "a"), _batch(2, "b")], first_offset=0)
    gone = _object(store, "gone", [_batch(2, "c")], first_offset=0)
    del store.objects["gone"]

    async def get(key: str, start: int, end: int) -> bytes:
        if key not in store.objects:
            raise ObjectNotFound(f"no such object: {key}", key=key)
        return store.objects[key][start:end]

    reader = FetchReader(None, BlockCache(get, capacity_bytes=1 << 20, block_size=1 << 16), ManualClock(),  # type: ignore[arg-type]
                         lookup_ttl_ms=0)
    bad = replace(good[1], byte_pos=good[1].byte_pos + 1)
    got = await reader.read_many([[good[0]], gone, [bad], [good[1]], []])
    assert isinstance(got[0], bytes) and [v.base_offset for v in iter_batches(got[0])] == [0]
    assert isinstance(got[1], ObjectNotFound)
    assert isinstance(got[2], BatchReadError)
    assert isinstance(got[3], bytes) and [v.base_offset for v in iter_batches(got[3])] == [2]
    assert got[4] == b""


async def test_read_many_raises_what_is_not_a_read_error():
    store = CountingStore()
    locs = _object(store, "obj", [_batch(1, "a")], first_offset=0)

    async def get(key: str, start: int, end: int) -> bytes:
        raise RuntimeError("bug")

    reader = FetchReader(None, BlockCache(get, capacity_bytes=1 << 20, block_size=1 << 16), ManualClock(),  # type: ignore[arg-type]
                         lookup_ttl_ms=0)
    with pytest.raises(RuntimeError):
        await reader.read_many([locs])


async def test_read_many_interleaved_partitions_and_batches_across_blocks():
    """A consumer dealt every other partition: its batches are not neighbours in the
    segment, yet each block is loaded once, a batch spanning blocks comes out whole,
    and every partition gets exactly what a read of its own batches gives."""
    store = CountingStore()
    raw = [_batch(1 + i % 3, f"p{i}") for i in range(8)]
    locs = _object(store, "seg", raw, first_offset=0)
    size = len(store.objects["seg"])
    block = 200
    assert any(b.byte_pos // block != (b.byte_pos + b.byte_len - 1) // block for b in locs[::2])
    parts = [[loc] for loc in locs[::2]]  # partitions 0, 2, 4, 6
    reader = _reader(store, block=block)
    got = await reader.read_many(parts)
    blocks = {i for loc in locs[::2] for i in range(loc.byte_pos // block, (loc.byte_pos + loc.byte_len - 1) // block + 1)}
    assert sorted(g[1] // block for g in store.gets) == sorted(blocks)  # each needed block once
    assert len(blocks) < -(-size // block)  # and not the whole object
    expected = [await _reader(store, block=block).read(p) for p in parts]
    assert got == expected
    assert [[r.key for r in v.records()] for g in got for v in iter_batches(g, validate=True)] == [  # type: ignore[arg-type]
        [f"p{i}-k{j}".encode() for j in range(1 + i % 3)] for i in range(0, 8, 2)
    ]
    before = len(store.gets)
    again = await reader.read_many(parts)
    assert again == got and len(store.gets) == before  # all hits the second time


async def test_concurrent_fetches_share_the_response_budget():
    """Fetches built at the same time reserve what they plan in the agent's budget before
    reading, so together they take the responses' share of it plus one batch each
    (KIP-74), not each the whole budget; a reservation released gives its bytes back."""
    from agent.fetch.model import Want
    from agent.fetch.plan import RESPONSE_SHARE, Reservation, fetch_once
    from agent.security.limits import ResponseBudget

    store = CountingStore()
    raw = [_batch(40, f"b{i}") for i in range(20)]  # 20 batches of ~1 KiB
    locs = _object(store, "seg", raw, first_offset=0)
    size = sum(b.byte_len for b in locs)
    one = max(b.byte_len for b in locs)
    meta = FakeMeta(FindResult(ErrorCode.NONE, 0, locs[-1].last_offset + 1, locs))
    reader = _reader(store, meta, ttl_ms=0)
    budget = ResponseBudget(size // 4)
    reservations = [Reservation(budget) for _ in range(8)]
    answers = await asyncio.gather(
        *(fetch_once(reader, [Want(0, 0, 0, 2**31 - 1, TOPIC)], 2**31 - 1, reservation=r) for r in reservations)
    )
    sent = [len(a[0].records) for a in answers]
    assert sent[0] > one, "the first Fetch gets what the budget holds"
    share = int(budget.capacity * RESPONSE_SHARE)
    assert sum(sent) <= share + len(sent) * one, sent
    assert all(s >= 1 for s in sent), "each still gets a whole batch (KIP-74)"
    assert budget.used == sum(r.held for r in reservations) == sum(sent)
    for r in reservations:
        r.release()
    assert budget.used == 0
    (alone,) = await fetch_once(reader, [Want(0, 0, 0, 2**31 - 1, TOPIC)], 2**31 - 1, reservation=Reservation(budget))
    assert len(alone.records) > share - one  # the whole share again, in whole batches
