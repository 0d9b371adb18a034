"""The block cache takes the objects this agent writes (write-through): a consumer at
the tail of the agent's own writes is served without a GET of what it just PUT."""

from __future__ import annotations

import asyncio

from agent.cache import BlockCache
from kafka_protocol.records import iter_batches
from tests.agent.test_fetch_protocol import fetch, make_topic, produce_batch


def test_put_object_caches_every_block_as_a_read_would_load_it():
    loads: list[tuple[str, int, int]] = []
    obj = bytes(range(10))

    async def loader(key: str, start: int, end: int) -> bytes:
        loads.append((key, start, end))
        return obj[start:end]

    async def run() -> None:
        cache = BlockCache(loader, capacity_bytes=64, block_size=4)
        cache.put_object("k", obj)
        assert await cache.read("k", 3, 9) == obj[3:9]
        assert await cache.read("k", 8, 10, object_size=10) == obj[8:]
        assert [b for b in await cache.blocks([("k", 0), ("k", 2)])] == [obj[:4], obj[8:]]
        assert loads == []
        # Put again (or loaded meanwhile): counted once, so nothing is evicted.
        tight = BlockCache(loader, capacity_bytes=10, block_size=4)
        tight.put_object("k", obj)
        tight.put_object("k", obj)
        assert await tight.read("k", 0, 10, object_size=10) == obj
        assert tight.stats.evictions == 0 and loads == []
        # A load in flight when the object is put: the block is still counted once.
        gate = asyncio.Event()

        async def slow(key: str, start: int, end: int) -> bytes:
            await gate.wait()
            return obj[start:end]

        racing = BlockCache(slow, capacity_bytes=10, block_size=4)
        pending = asyncio.ensure_future(racing.read("k", 0, 4, object_size=10))
        await asyncio.sleep(0)
        racing.put_object("k", obj)
        gate.set()
        assert await pending == obj[:4]
        assert await racing.read("k", 0, 10, object_size=10) == obj
        assert racing.stats.evictions == 0
        # Over the capacity: not cached, read from the store as before.
        small = BlockCache(loader, capacity_bytes=3, block_size=4)
        small.put_object("k", obj)
        assert await small.read("k", 0, 2) == obj[:2]
        assert loads == [("k", 0, 4)]

    asyncio.run(run())


def test_a_fetch_of_what_the_agent_just_wrote_makes_no_get(floe_agent):
    make_topic(floe_agent, "wt", partitions=2)
    produce_batch(floe_agent, "wt", 0, 3, tag="a")
    produce_batch(floe_agent, "wt", 1, 2, tag="b")
    stats = floe_agent.broker.cache.stats
    loads = stats.loads
    resp = fetch(floe_agent, [("wt", 0, 0), ("wt", 1, 0)])
    got = {
        p.partition_index: [r.key for v in iter_batches(bytes(p.records), validate=True) for r in v.records()]
        for p in resp.responses[0].partitions
    }
    assert got == {0: [b"a0", b"a1", b"a2"], 1: [b"b0", b"b1"]}
    assert stats.loads == loads
