"""The journal tier's quorum of buckets: durable at 2 of 3, never on fewer, a stalled
bucket neither slows the writes nor holds unbounded memory, a missing copy is read
from another bucket, and the journal routes only ``journal/`` keys to the quorum."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest

from objectstore import ObjectNotFound, TransientError
from objectstore.base import ObjectInfo
from objectstore.journal import JournaledStore, parse_journal_urls
from objectstore.memory import MemoryStore
from objectstore.quorum import QuorumStore


class Gated(MemoryStore):
    """A memory bucket whose calls can be stalled (they wait on ``gate``) or made to fail."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = asyncio.Event()
        self.gate.set()
        self.fail = False
        self.puts_started = 0

    async def put(self, key: str, data: bytes | memoryview) -> None:
        self.puts_started += 1
        await self.gate.wait()
        if self.fail:
            raise TransientError("bucket down", key=key)
        await super().put(key, data)

    async def get(self, key: str, start: int | None = None, end: int | None = None) -> bytes:
        await self.gate.wait()
        if self.fail:
            raise TransientError("bucket down", key=key)
        return await super().get(key, start, end)

    async def delete_many(self, keys: Sequence[str]) -> None:
        if self.fail:
            raise TransientError("bucket down")
        await super().delete_many(keys)


def buckets(n: int = 3) -> list[Gated]:
    return [Gated() for _ in range(n)]


async def copies(bs: list[Gated], key: str) -> int:
    n = 0
    for b in bs:
        try:
            await MemoryStore.head(b, key)
            n += 1
        except ObjectNotFound:
            pass
    return n


async def test_a_put_returns_at_the_quorum_while_one_bucket_is_stalled() -> None:
    bs = buckets()
    caught_up = asyncio.Event()

    def seen(i: int, outcome: str, _s: float) -> None:
        if (i, outcome) == (2, "ok"):
            caught_up.set()

    q = QuorumStore(bs, 2, on_put=seen)
    bs[2].gate.clear()  # stalled: never answers
    await q.put("journal/a", b"x" * 100)
    assert await copies(bs, "journal/a") == 2
    # read back from the two buckets that have it, whichever is asked first
    assert await q.get("journal/a", 10, 20) == b"x" * 10
    # the stalled bucket catches up when it answers again
    bs[2].gate.set()
    await asyncio.wait_for(caught_up.wait(), 5)
    assert await copies(bs, "journal/a") == 3
    await q.close()


async def test_never_acknowledged_on_fewer_copies_than_the_quorum() -> None:
    bs = buckets()
    q = QuorumStore(bs, 2, quorum_timeout_s=0.05)
    bs[1].fail = bs[2].fail = True  # two buckets down: fails at once
    with pytest.raises(TransientError, match="quorum lost"):
        await q.put("journal/b", b"y")
    bs[1].fail = bs[2].fail = False
    bs[1].gate.clear()
    bs[2].gate.clear()  # two buckets stalled: fails at the quorum deadline
    with pytest.raises(TransientError, match="not reached"):
        await q.put("journal/c", b"z")
    assert await copies(bs, "journal/c") == 1
    await q.close()  # the stragglers are cancelled, no warning


async def test_a_stalled_bucket_holds_at_most_max_pending_puts() -> None:
    bs = buckets()
    outcomes: list[str] = []
    q = QuorumStore(bs, 2, max_pending=4, on_put=lambda i, o, _s: outcomes.append(o) if i == 0 else None)
    bs[0].gate.clear()
    for i in range(10):
        await q.put(f"journal/{i}", b"d")
    assert bs[0].puts_started == 4  # the rest skipped it
    assert outcomes.count("skipped") == 6
    await q.close()


async def test_a_missing_copy_is_read_from_another_bucket_and_a_slow_one_is_hedged() -> None:
    bs = buckets()
    q = QuorumStore(bs, 2, hedge_after_s=0.01)
    await q.put("journal/m", b"payload")
    for b in bs[:2]:
        await MemoryStore.delete_many(b, ["journal/m"])
    assert await q.get("journal/m") == b"payload"  # only the third bucket has it
    await q.put("journal/h", b"hedged")
    for b in bs:
        b.gate.clear()
    bs[1].gate.set()  # only one bucket answers: the read is hedged to it
    assert await asyncio.wait_for(q.get("journal/h"), 5) == b"hedged"
    for b in bs:
        b.gate.set()
    with pytest.raises(ObjectNotFound):
        await q.get("journal/none")
    await q.close()


async def test_deletes_and_listing_span_the_buckets() -> None:
    bs = buckets()
    q = QuorumStore(bs, 2)
    bs[0].gate.clear()
    await q.put("journal/1", b"a")
    bs[0].gate.set()
    await q.put("journal/2", b"b")
    keys = [i.key async for i in q.list("journal/")]
    assert keys == ["journal/1", "journal/2"]
    bs[2].fail = True  # one bucket down: the delete still succeeds, the GC lists it later
    await q.delete_many(["journal/1"])
    assert await copies(bs, "journal/1") == 1
    await q.close()


async def test_a_delete_waits_for_a_straggling_copy_so_the_key_stays_gone() -> None:
    """A copy still being written after the quorum answered would land after the delete
    and bring the key back (a consolidated journal object resurrected)."""
    bs = buckets()
    q = QuorumStore(bs, 2)
    bs[2].gate.clear()  # the third copy straggles
    await q.put("journal/z", b"z" * 10)
    deleting = asyncio.ensure_future(q.delete_many(["journal/z"]))
    await asyncio.sleep(0)
    assert not deleting.done()  # it waits for the straggler ...
    bs[2].gate.set()  # ... which lands, and is then deleted with the others
    await asyncio.wait_for(deleting, 5)
    assert await copies(bs, "journal/z") == 0
    assert [i.key async for i in q.list("journal/")] == []
    await q.close()


async def test_the_journaled_store_routes_journal_keys_to_the_quorum() -> None:
    standard = MemoryStore()
    bs = buckets()
    store = JournaledStore(standard, QuorumStore(bs, 2))
    await store.put("journal/x", b"j")
    await store.put("segments/y", b"s")
    assert await copies(bs, "journal/x") == 3
    assert [i.key async for i in standard.list()] == ["segments/y"]
    assert [i.key async for i in store.list()] == ["journal/x", "segments/y"]
    assert [i.key async for i in store.list("segments/")] == ["segments/y"]
    info: ObjectInfo = await store.head("journal/x")
    assert info.size == 1
    await store.delete_many(["journal/x", "segments/y"])
    assert [i.key async for i in store.list()] == []
    assert await store.presign_get("journal/x", 60) is None
    await store.close()


def test_journal_urls_parse() -> None:
    assert parse_journal_urls("") == []
    assert parse_journal_urls(" file:///a , file:///b,") == ["file:///a", "file:///b"]
    with pytest.raises(ValueError):
        QuorumStore([MemoryStore()], 2)
