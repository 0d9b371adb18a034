"""RetryingStore over FaultyStore: backoff, jitter, exhaustion, the lost-response PUT."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from objectstore import (
    ObjectExists,
    ObjectNotFound,
    ObjectStore,
    PermanentError,
    RetryingStore,
    RetryPolicy,
    Throttled,
    TransientError,
    open_object_store,
)
from objectstore.faults import Fault, FaultyStore
from objectstore.local import LocalStore
from objectstore.memory import MemoryStore

POLICY = RetryPolicy(max_attempts=5, base_delay=0.1, max_delay=0.5, multiplier=2.0)


class Sleeps:
    """An injected ``sleep`` that records delays instead of sleeping."""

    def __init__(self) -> None:
        self.delays: list[float] = []

    async def __call__(self, delay: float) -> None:
        self.delays.append(delay)


def make(
    inner: ObjectStore | None = None,
    policy: RetryPolicy = POLICY,
    rnd: float | None = None,
    seed: int = 7,
) -> tuple[RetryingStore, FaultyStore, Sleeps]:
    faulty = FaultyStore(inner or MemoryStore())
    sleeps = Sleeps()
    rand = (lambda: rnd) if rnd is not None else random.Random(seed).random
    return RetryingStore(faulty, policy, sleep=sleeps, random=rand), faulty, sleeps


async def test_throttling_then_success() -> None:
    store, faulty, sleeps = make()
    faulty.inject("put", Fault.THROTTLE, Fault.THROTTLE)
    await store.put("k", b"data")
    assert await store.get("k") == b"data"
    assert faulty.calls["put"] == 3
    assert len(sleeps.delays) == 2
    assert [f for _, _, f in faulty.injected] == [Fault.THROTTLE, Fault.THROTTLE]


async def test_exhaustion_raises_throttled() -> None:
    store, faulty, sleeps = make()
    faulty.inject("get", *[Fault.THROTTLE] * 10)
    await faulty.inner.put("k", b"x")
    with pytest.raises(Throttled):
        await store.get("k")
    assert faulty.calls["get"] == POLICY.max_attempts
    assert len(sleeps.delays) == POLICY.max_attempts - 1


async def test_transient_exhaustion_raises_transient() -> None:
    store, faulty, _ = make()
    faulty.inject("head", *[Fault.TIMEOUT] * 10)
    with pytest.raises(TransientError):
        await store.head("k")


async def test_backoff_grows_to_the_cap() -> None:
    store, faulty, sleeps = make(rnd=1.0)  # jitter at its maximum: the caps themselves
    faulty.inject("get", *[Fault.TIMEOUT] * 4)
    await faulty.inner.put("k", b"x")
    assert await store.get("k") == b"x"
    assert sleeps.delays == pytest.approx([0.1, 0.2, 0.4, 0.5])


async def test_backoff_is_jittered_within_bounds() -> None:
    policy = RetryPolicy(max_attempts=8, base_delay=0.1, max_delay=10.0)
    all_delays: list[float] = []
    for seed in range(20):
        store, faulty, sleeps = make(policy=policy, seed=seed)
        faulty.inject("head", *[Fault.THROTTLE] * 7)
        await faulty.inner.put("k", b"x")
        await store.head("k")
        assert len(sleeps.delays) == 7
        for n, d in enumerate(sleeps.delays, start=1):
            assert 0 <= d <= policy.cap(n)
        all_delays.extend(sleeps.delays)
    assert len(set(all_delays)) == len(all_delays)  # really random, not the cap
    # Full jitter: on average half the cap; the late retries wait longer than the early ones.
    early = [d for i, d in enumerate(all_delays) if i % 7 == 0]
    late = [d for i, d in enumerate(all_delays) if i % 7 == 6]
    assert sum(late) / len(late) > 4 * sum(early) / len(early)


def test_policy_validation() -> None:
    with pytest.raises(ValueError):
        RetryPolicy(max_attempts=0)
    assert RetryPolicy(base_delay=1, max_delay=3).cap(10) == 3


async def test_lost_response_put_is_success() -> None:
    store, faulty, sleeps = make()
    faulty.inject("put", Fault.LOST_RESPONSE)
    data = b"segment bytes" * 1000
    await store.put("seg", data)  # attempt 1 stored it, attempt 2 got ObjectExists
    assert faulty.calls["put"] == 2
    assert await faulty.inner.get("seg") == data
    assert len(sleeps.delays) == 1


async def test_lost_response_put_without_etag_compares_bytes(tmp_path: Path) -> None:
    store, faulty, _ = make(LocalStore(tmp_path))
    faulty.inject("put", Fault.LOST_RESPONSE)
    await store.put("seg", memoryview(b"abc" * 100))
    assert faulty.calls["get"] == 1  # no ETag on the file store: compared by content
    assert await store.get("seg") == b"abc" * 100


async def test_lost_response_put_then_genuine_conflict() -> None:
    store, faulty, _ = make()
    await faulty.inner.put("seg", b"someone else's bytes")
    faulty.inject("put", Fault.TIMEOUT)  # never reached the store
    with pytest.raises(ObjectExists):
        await store.put("seg", b"our bytes, same len!")
    assert await faulty.inner.get("seg") == b"someone else's bytes"


async def test_first_attempt_conflict_is_not_retried() -> None:
    store, faulty, sleeps = make()
    await store.put("k", b"a")
    with pytest.raises(ObjectExists):
        await store.put("k", b"a")  # same bytes, but no earlier attempt: a real conflict
    assert faulty.calls["put"] == 2
    assert sleeps.delays == []


async def test_not_found_and_permanent_are_not_retried() -> None:
    store, faulty, sleeps = make()
    with pytest.raises(ObjectNotFound):
        await store.get("missing")
    faulty.inject("put", Fault.ERROR)
    with pytest.raises(PermanentError):
        await store.put("k", b"x")
    assert faulty.calls["get"] == 1
    assert faulty.calls["put"] == 1
    assert sleeps.delays == []


async def test_list_resumes_after_broken_stream() -> None:
    store, faulty, sleeps = make()
    keys = [f"k{i:02d}" for i in range(10)]
    for k in keys:
        await faulty.inner.put(k, b"")
    faulty.inject("list", Fault.LOST_RESPONSE, Fault.THROTTLE, Fault.LOST_RESPONSE)
    assert [i.key async for i in store.list()] == keys
    assert faulty.calls["list"] == 4
    assert len(sleeps.delays) == 3


async def test_delete_many_retried() -> None:
    store, faulty, _ = make()
    await faulty.inner.put("a", b"")
    faulty.inject("delete_many", Fault.LOST_RESPONSE)
    await store.delete_many(["a"])
    assert [i async for i in store.list()] == []


async def test_on_retry_hook() -> None:
    seen: list[tuple[str, int, type, float]] = []
    faulty = FaultyStore(MemoryStore(), script={"put": [Fault.THROTTLE]})
    store = RetryingStore(
        faulty,
        POLICY,
        sleep=Sleeps(),
        random=lambda: 0.5,
        on_retry=lambda op, n, e, d: seen.append((op, n, type(e), d)),
    )
    await store.put("k", b"x")
    assert seen == [("put", 1, Throttled, pytest.approx(0.05))]


async def test_random_faults_are_seeded_and_survivable() -> None:
    async def run(seed: int) -> list[tuple[str, str, Fault]]:
        faulty = FaultyStore(
            MemoryStore(),
            rates={
                "put": {Fault.THROTTLE: 0.2, Fault.LOST_RESPONSE: 0.1},
                "*": {Fault.TIMEOUT: 0.1},
            },
            seed=seed,
        )
        store = RetryingStore(faulty, RetryPolicy(max_attempts=20), sleep=Sleeps())
        for i in range(100):
            await store.put(f"k{i}", str(i).encode())
        for i in range(100):
            assert await store.get(f"k{i}") == str(i).encode()
        return faulty.injected

    first = await run(42)
    assert first == await run(42)
    assert len(first) > 20
    assert {f for _, _, f in first} == {Fault.THROTTLE, Fault.LOST_RESPONSE, Fault.TIMEOUT}


async def test_slow_first_byte_uses_delay_hook() -> None:
    waited: list[float] = []

    async def fake_delay(s: float) -> None:
        waited.append(s)

    faulty = FaultyStore(
        MemoryStore(), script={"get": [None, Fault.SLOW]}, slow_seconds=2.5, delay=fake_delay
    )
    await faulty.put("k", b"x")
    assert await faulty.get("k") == b"x"
    assert waited == []
    assert await faulty.get("k") == b"x"
    assert waited == [2.5]


def test_faulty_store_rejects_unknown_ops() -> None:
    with pytest.raises(ValueError):
        FaultyStore(MemoryStore(), rates={"post": {Fault.THROTTLE: 1.0}})
    with pytest.raises(ValueError):
        FaultyStore(MemoryStore()).inject("post", Fault.THROTTLE)


@pytest.mark.s3
async def test_lost_response_put_on_s3_uses_etag(s3_url: str) -> None:
    inner = open_object_store(s3_url, retry=False)
    faulty = FaultyStore(inner, script={"put": [Fault.LOST_RESPONSE]})
    store = RetryingStore(faulty, POLICY, sleep=Sleeps())
    async with store:
        data = bytes(range(256)) * 4096
        await store.put("seg/1", data)
        assert faulty.calls["head"] == 1
        assert faulty.calls["get"] == 0  # MD5 == ETag, no need to read it back
        assert await store.get("seg/1") == data


async def test_open_object_store_wraps_with_retries(tmp_path: Path) -> None:
    store = open_object_store("memory://shared-a")
    assert isinstance(store, RetryingStore)
    other = open_object_store("memory://shared-a", retry=False)
    private = open_object_store("memory://", retry=False)
    await store.put("x", b"1")
    assert await other.get("x") == b"1"
    with pytest.raises(ObjectNotFound):
        await private.get("x")
    custom = open_object_store(f"file://{tmp_path}/new/dir", retry=RetryPolicy(max_attempts=2))
    assert isinstance(custom, RetryingStore) and custom.policy.max_attempts == 2
    assert (tmp_path / "new" / "dir").is_dir()
    with pytest.raises(ValueError):
        open_object_store("ftp://nope")
    s3 = open_object_store(
        "s3://bkt/some/prefix?endpoint=http://h:1&max_connections=4&path_style=false", retry=False
    )
    assert s3.prefix == "some/prefix/"  # type: ignore[attr-defined]
    assert s3.config.max_pool_connections == 4  # type: ignore[attr-defined]
    await s3.close()
