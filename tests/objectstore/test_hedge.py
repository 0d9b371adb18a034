"""Hedged GET/PUT (objectstore.hedge): a stalled call answers at the deadline, hedges stay
within budget, a PUT race leaves one object, errors pass through, losers are cancelled.

Time is a fake clock whose timers fire only when the test advances it; the
fake store's calls stall on futures the test controls. Nothing sleeps.
"""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Callable
from typing import Any

import pytest

from objectstore import (
    ObjectExists,
    ObjectNotFound,
    PermanentError,
    RetryingStore,
    Throttled,
    TransientError,
    open_object_store,
)
from objectstore.base import StoreBase
from objectstore.hedge import HedgePolicy, HedgingStore, parse_hedge
from objectstore.latency import LatencyStore
from objectstore.memory import MemoryStore

MS = 0.001


class FakeTime:
    """A clock plus an ``asyncio.sleep`` stand-in whose sleeps end when ``advance`` passes them."""

    def __init__(self) -> None:
        self.now = 0.0
        self.timers: list[tuple[float, asyncio.Future[None]]] = []

    def clock(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.timers.append((self.now + seconds, fut))
        await fut

    async def advance(self, seconds: float) -> None:
        self.now += seconds
        for due, fut in list(self.timers):
            if due <= self.now + 1e-12 and not fut.done():
                fut.set_result(None)
        self.timers = [(d, f) for d, f in self.timers if not f.done()]
        await settle()


async def settle(until: Callable[[], bool] = lambda: False) -> None:
    """Let ready tasks run (a bounded number of loop turns, or until ``until()``)."""
    for _ in range(50):
        if until():
            return
        await asyncio.sleep(0)


class Call:
    def __init__(self, n: int, op: str, key: str, stalled: bool) -> None:
        self.n, self.op, self.key = n, op, key
        self.release: asyncio.Future[BaseException | None] = asyncio.get_running_loop().create_future()
        self.stalled = stalled
        self.cancelled = False


class ControlledStore(StoreBase):
    """Memory-backed store whose chosen calls stall until the test releases them.

    ``stall(call)`` decides per call; a stalled PUT writes first (the object
    lands) and then waits for its response. ``latency`` advances the fake clock
    instantly per answered call, so the hedger records that latency."""

    def __init__(self, time: FakeTime, stall: Callable[[Call], bool] = lambda c: False) -> None:
        self.inner = MemoryStore()
        self.time = time
        self.stall = stall
        self.calls: list[Call] = []
        self.latency: Callable[[Call], float] = lambda c: 0.0
        self.errors: dict[int, BaseException] = {}  # call number -> raised at once
        self.land_first = True
        self.cancel_error: BaseException | None = None  # raised instead of CancelledError

    async def _run(self, op: str, key: str, body: Callable[[], Any]) -> Any:
        call = Call(len(self.calls) + 1, op, key, stalled=False)
        call.stalled = self.stall(call)
        self.calls.append(call)
        if call.n in self.errors:
            raise self.errors[call.n]
        if op == "put" and self.land_first:
            result = await body()  # lands before any stall: only the response is slow
        try:
            if call.stalled:
                err = await call.release
                if err is not None:
                    raise err
        except asyncio.CancelledError:
            call.cancelled = True
            if self.cancel_error is not None:
                raise self.cancel_error from None
            raise
        if op == "get" or not self.land_first:
            result = await body()
        self.time.now += self.latency(call)
        return result

    async def put(self, key: str, data: bytes | memoryview) -> None:
        await self._run("put", key, lambda: self.inner.put(key, data))

    async def get(self, key: str, start: int | None = None, end: int | None = None) -> bytes:
        data: bytes = await self._run("get", key, lambda: self.inner.get(key, start, end))
        return data

    async def head(self, key: str) -> Any:
        return await self.inner.head(key)

    async def delete_many(self, keys: Any) -> None:
        await self.inner.delete_many(keys)

    def list(self, prefix: str = "", *, start_after: str | None = None) -> Any:
        return self.inner.list(prefix, start_after=start_after)


def hedger(
    stall: Callable[[Call], bool] = lambda c: False, **policy: Any
) -> tuple[HedgingStore, ControlledStore, FakeTime]:
    t = FakeTime()
    fake = ControlledStore(t, stall)
    kw: dict[str, Any] = {"initial_ms": 100.0, "min_samples": 1000}
    kw.update(policy)
    return HedgingStore(fake, HedgePolicy(**kw), clock=t.clock, sleep=t.sleep), fake, t


async def test_stalled_get_answers_at_the_deadline_and_the_primary_is_cancelled() -> None:
    store, fake, t = hedger(stall=lambda c: c.n == 1)
    await fake.inner.put("k", b"data")
    task = asyncio.ensure_future(store.get("k"))
    await settle(lambda: len(fake.calls) == 1)
    await t.advance(99 * MS)
    assert not task.done() and len(fake.calls) == 1  # not before the deadline
    await t.advance(1 * MS)
    await settle(task.done)
    assert task.result() == b"data"
    assert t.now == pytest.approx(0.1)  # answered at the deadline, not when the stall ends
    assert len(fake.calls) == 2 and fake.calls[0].cancelled
    s = store.stats()
    assert s["calls"] == {"get": 1} and s["hedges"] == {"get": 1} and s["hedges_won"] == {"get": 1}
    assert s["hedges_per_1000"] == 1000


async def test_a_fast_store_is_never_hedged_and_the_deadline_adapts() -> None:
    store, fake, t = hedger(min_samples=20, window=100)
    await fake.inner.put("k", b"x")
    fake.latency = lambda c: (c.n % 100 + 1) * MS  # 1..100 ms
    for _ in range(100):
        assert await store.get("k", 0, 1) == b"x"
    s = store.stats()
    assert s["hedges"] == {} and s["calls"] == {"get": 100}
    assert s["deadline_ms"]["get/small"] == pytest.approx(96, abs=1.5)  # the p95
    assert all(f.cancelled() for _, f in t.timers)  # every deadline timer was cancelled


def test_deadline_floor_ceiling_and_size_classes() -> None:
    store, _, _ = hedger(min_samples=5, floor_ms=10, ceiling_ms=500, large_bytes=1024)
    fast, slow = store.window("get", "small"), store.window("put", "large")
    assert fast.deadline() == pytest.approx(0.1)  # initial_ms before min_samples
    for _ in range(5):
        fast.add(0.001)
        slow.add(5.0)
    assert fast.deadline() == pytest.approx(0.010) and slow.deadline() == pytest.approx(0.5)
    assert store._size_class(1023) == "small" and store._size_class(1024) == "large"
    assert store._size_class(None) == "whole"


async def test_hedges_stay_within_the_budget_when_every_primary_stalls() -> None:
    n = 60
    store, fake, t = hedger(
        stall=lambda c: all(k.key != c.key for k in fake.calls), budget=0.1, burst=1
    )
    for i in range(n):
        await fake.inner.put(f"k{i}", b"v")
    for i in range(n):
        key = f"k{i}"
        task = asyncio.ensure_future(store.get(key))
        await settle(lambda: bool(fake.calls) and fake.calls[-1].key == key)  # noqa: B023
        await t.advance(0.1)
        await settle(task.done)
        if not task.done():  # budget spent: no hedge, the call waits for its primary
            primary = fake.calls[-1]
            assert primary.key == key and primary.stalled
            primary.release.set_result(None)
            await settle(task.done)
        assert task.result() == b"v"
    s = store.stats()
    hedges, denied = s["hedges"]["get"], s["hedges_denied"]["get"]
    assert hedges + denied == n
    assert 0.1 * n - 1 <= hedges <= 1 + 0.1 * n  # burst + budget * calls
    assert len(fake.calls) == n + hedges  # never more than one extra request per hedge


async def test_put_hedge_whose_first_copy_landed_is_one_object_and_a_success() -> None:
    store, fake, t = hedger(stall=lambda c: c.n == 1)
    task = asyncio.ensure_future(store.put("seg", b"payload"))
    await settle(lambda: len(fake.calls) == 1)
    await t.advance(0.1)  # the hedge gets ObjectExists: the primary's copy is there
    await settle(task.done)
    assert task.done() and task.exception() is None
    assert [(o.key, o.size) async for o in fake.inner.list()] == [("seg", 7)]
    assert await fake.inner.get("seg") == b"payload"
    assert fake.calls[0].cancelled
    assert store.stats()["hedges_won"] == {"put": 1}


async def test_put_hedge_into_someone_elses_object_is_a_conflict() -> None:
    store, fake, t = hedger(stall=lambda c: c.n == 1)
    fake.land_first = False  # the primary stalls before reaching the store
    await fake.inner.put("seg", b"theirs!")  # same size, other bytes
    task = asyncio.ensure_future(store.put("seg", b"payload"))
    await settle(lambda: len(fake.calls) == 1)
    await t.advance(0.1)
    await settle(task.done)
    with pytest.raises(ObjectExists):
        task.result()
    assert await fake.inner.get("seg") == b"theirs!" and fake.calls[0].cancelled


@pytest.mark.parametrize("err", [ObjectNotFound("gone", key="k"), PermanentError("denied", key="k")])
async def test_errors_pass_through_unhedged(err: Exception) -> None:
    store, fake, _ = hedger()
    fake.errors[1] = err
    with pytest.raises(type(err)):
        await store.get("k")
    assert len(fake.calls) == 1 and store.stats()["hedges"] == {}


async def test_a_retriable_error_of_one_copy_waits_for_the_other() -> None:
    store, fake, t = hedger(stall=lambda c: True)
    await fake.inner.put("k", b"v")
    task = asyncio.ensure_future(store.get("k"))
    await settle(lambda: len(fake.calls) == 1)
    await t.advance(0.1)
    await settle(lambda: len(fake.calls) == 2)
    fake.calls[1].release.set_result(TransientError("reset", key="k"))  # the hedge fails
    await settle()
    assert not task.done()
    fake.calls[0].release.set_result(None)  # the slow primary still answers
    await settle(task.done)
    assert task.result() == b"v" and store.stats()["hedges_won"] == {}


async def test_both_copies_failing_raises_the_retriable_error_and_throttling_stops_hedges() -> None:
    store, fake, t = hedger(stall=lambda c: True, burst=5)
    fake.land_first = False
    task = asyncio.ensure_future(store.put("k", b"v"))
    await settle(lambda: len(fake.calls) == 1)
    await t.advance(0.1)
    await settle(lambda: len(fake.calls) == 2)
    fake.calls[1].release.set_result(Throttled("SlowDown", key="k"))
    await settle()
    assert not task.done()  # one copy's retriable error waits for the other
    fake.calls[0].release.set_result(TransientError("lost", key="k"))
    await settle(task.done)
    with pytest.raises(Throttled):
        task.result()
    assert store._tokens == 0  # the next slow call is not hedged


async def test_caller_cancellation_cancels_both_copies_cleanly(caplog: pytest.LogCaptureFixture) -> None:
    store, fake, t = hedger(stall=lambda c: True)
    await fake.inner.put("k", b"v")
    task = asyncio.ensure_future(store.get("k"))
    await settle(lambda: len(fake.calls) == 1)
    await t.advance(0.1)
    await settle(lambda: len(fake.calls) == 2)
    task.cancel()
    await settle(task.done)
    assert task.cancelled()
    await settle(lambda: not store._background)
    assert [c.cancelled for c in fake.calls] == [True, True] and not store._background
    # A loser whose client turns cancellation into an error (some HTTP clients do):
    # the error is retrieved, never logged as "exception was never retrieved".
    fake.cancel_error = TransientError("connection closed", key="k")
    task = asyncio.ensure_future(store.get("k"))
    await settle(lambda: len(fake.calls) == 3)
    await t.advance(0.1)
    await settle(lambda: len(fake.calls) == 4)
    fake.calls[3].release.set_result(None)
    await settle(lambda: task.done() and not store._background)
    assert task.result() == b"v" and fake.calls[2].cancelled
    await store.close()
    gc.collect()  # a task holding an unretrieved exception reports it when collected
    await settle()
    assert not [r for r in caplog.records if r.name == "asyncio"]


def test_url_options_select_the_wrapper_under_retries() -> None:
    assert isinstance(open_object_store("memory://"), RetryingStore)
    assert not isinstance(open_object_store("memory://", retry=False), HedgingStore)
    s = open_object_store("memory://x?latency=s3-standard&hedge=on&hedge_initial_ms=50&hedge_budget=0.1")
    assert isinstance(s, RetryingStore) and isinstance(s.inner, HedgingStore)
    assert isinstance(s.inner.inner, LatencyStore)
    assert s.inner.policy.initial_ms == 50 and s.inner.policy.budget == 0.1
    bare = open_object_store("memory://", retry=False, hedge="on", hedge_window=10)
    assert isinstance(bare, HedgingStore) and bare.policy.window == 10
    assert parse_hedge({"hedge": "off", "hedge_floor_ms": "5"}) is None
    with pytest.raises(ValueError, match="unknown hedge option"):
        open_object_store("memory://?hedge=on&hedge_bogus=1")
    with pytest.raises(ValueError, match="invalid hedge policy"):
        parse_hedge({"hedge": "on", "hedge_quantile": "2"})
    with pytest.raises(ValueError, match="on or off"):
        parse_hedge({"hedge": "maybe"})


async def test_real_time_pass_through_keeps_store_semantics() -> None:
    """Real clock and timers over a memory store: data, ranges, create-only, head/list/delete."""
    async with HedgingStore(MemoryStore(), HedgePolicy(initial_ms=10)) as store:
        await store.put("a/1", b"0123456789")
        with pytest.raises(ObjectExists):
            await store.put("a/1", b"other")
        assert await store.get("a/1", 2, 5) == b"234" and await store.get("a/1") == b"0123456789"
        assert (await store.head("a/1")).size == 10
        assert [o.key async for o in store.list("a/")] == ["a/1"]
        await store.delete_many(["a/1"])
        with pytest.raises(ObjectNotFound):
            await store.get("a/1")
        assert store.stats()["calls"] == {"put": 2, "get": 3}
