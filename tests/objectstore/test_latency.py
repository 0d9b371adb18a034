"""The simulated-latency wrapper: URL selection, the delay distributions, the size term.

Delays are recorded by an injected sleep, never waited for. (Data passing
through unchanged is covered by the contract suite's ``file+latency`` backend.)
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from objectstore import ObjectNotFound, RetryingStore, open_object_store
from objectstore.latency import (
    PROFILES,
    LatencyStore,
    OpLatency,
    parse_latency,
    split_latency_url,
    with_latency,
)
from objectstore.local import LocalStore
from objectstore.memory import MemoryStore
from objectstore.s3 import S3Store

N = 10_000


class Recorder:
    """A fake ``asyncio.sleep`` that keeps the requested delays (seconds)."""

    def __init__(self) -> None:
        self.delays: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.delays.append(seconds)


def pct_ms(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))] * 1000


def wrapped(profile: str, seed: int = 1) -> tuple[LatencyStore, Recorder]:
    rec = Recorder()
    return LatencyStore(MemoryStore(), PROFILES[profile], seed=seed, sleep=rec), rec


# -- selection by URL ------------------------------------------------------------------


def test_url_selects_wrapper_and_profile(tmp_path: Path) -> None:
    store = open_object_store("memory://?latency=s3-standard")
    assert isinstance(store, RetryingStore)  # retries sit on top: each attempt pays again
    assert isinstance(store.inner, LatencyStore)
    assert store.inner.profile.name == "s3-standard"
    assert isinstance(store.inner.inner, MemoryStore)

    bare = open_object_store(f"file://{tmp_path}/o?fsync=false&latency=s3-express", retry=False)
    assert isinstance(bare, LatencyStore) and bare.profile == PROFILES["s3-express"]
    assert isinstance(bare.inner, LocalStore) and bare.inner.fsync is False

    by_kwarg = open_object_store("memory://", retry=False, latency="s3-express")
    assert isinstance(by_kwarg, LatencyStore) and by_kwarg.profile.name == "s3-express"


def test_s3_backend_never_sees_latency_options() -> None:
    url = "s3://bucket/pre?endpoint=http://127.0.0.1:9&latency=s3-standard&region=us-east-1"
    store = open_object_store(url, retry=False)  # S3Store would reject an unknown kwarg
    assert isinstance(store, LatencyStore) and isinstance(store.inner, S3Store)
    assert store.inner.endpoint == "http://127.0.0.1:9"
    assert store.inner.bucket == "bucket"


def test_profile_none_or_absent_gives_the_bare_store() -> None:
    assert isinstance(open_object_store("memory://?latency=none", retry=False), MemoryStore)
    assert isinstance(open_object_store("memory://", retry=False), MemoryStore)


def test_split_keeps_other_options() -> None:
    opts = {"latency_seed": 4, "max_connections": 3}
    url, found = split_latency_url("s3://b/p?endpoint=http://h:1&latency=s3-express", opts)
    assert url == "s3://b/p?endpoint=http://h:1"
    assert found == {"latency": "s3-express", "latency_seed": 4}
    assert opts == {"max_connections": 3}


# -- bad input -------------------------------------------------------------------------


def test_bad_profile_name_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match=r"unknown latency profile 's3-fast'.*s3-express, s3-standard"):
        open_object_store("memory://?latency=s3-fast")
    with pytest.raises(ValueError, match="unknown latency profile"):
        with_latency("file:///tmp/x", "glacier")


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"latency_put_p95_ms": "3"}, "unknown latency option 'latency_put_p95_ms'"),
        ({"latency_fetch_p50_ms": "3"}, "unknown latency option"),
        ({"latency_put_p50_ms": "abc"}, "not a number"),
        ({"latency_get_p50_ms": "-1"}, ">= 0"),
        ({"latency_put_p50_ms": "50", "latency_put_p99_ms": "10"}, "p50 <= p99"),
        ({"latency_mbps": "inf"}, "finite"),
    ],
)
def test_bad_options(options: dict[str, str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_latency(options)


# -- custom profiles -------------------------------------------------------------------


def test_overrides_make_a_custom_profile() -> None:
    profile, seed = parse_latency(
        {"latency": "s3-standard", "latency_put_p50_ms": "80", "latency_get_p99_ms": "300",
         "latency_mbps": "50", "latency_seed": "9"}
    )
    assert seed == 9
    assert profile.name == "s3-standard+custom"
    assert profile.put == OpLatency(80.0, 380.0)  # p50 alone keeps the base p99/p50 ratio
    assert profile.get == OpLatency(90.0, 300.0)
    assert profile.head == PROFILES["s3-standard"].head and profile.mbps == 50.0
    assert profile.describe()["put_p99_ms"] == 380.0
    fixed, _ = parse_latency({"latency_put_p50_ms": "7"})  # on top of none: a fixed delay
    assert fixed.put == OpLatency(7.0, 7.0) and fixed.get == OpLatency(0.0, 0.0)


# -- the distributions -----------------------------------------------------------------


@pytest.mark.parametrize("profile", ["s3-standard", "s3-express"])
async def test_put_and_get_delays_match_the_profile(profile: str) -> None:
    store, rec = wrapped(profile)
    for i in range(N):
        await store.put(f"k{i}", b"")  # empty: the fixed cost alone, no size term
    puts, rec.delays = rec.delays, []
    for i in range(N):
        assert await store.get(f"k{i % 7}") == b""
    gets = rec.delays
    assert len(puts) == len(gets) == N
    for delays, want in ((puts, PROFILES[profile].put), (gets, PROFILES[profile].get)):
        assert pct_ms(delays, 0.50) == pytest.approx(want.p50_ms, rel=0.05)
        assert pct_ms(delays, 0.99) == pytest.approx(want.p99_ms, rel=0.10)


def test_draws_are_seeded() -> None:
    a, _ = wrapped("s3-standard", seed=5)
    b, _ = wrapped("s3-standard", seed=5)
    c, _ = wrapped("s3-standard", seed=6)
    da = [a.draw("put") for _ in range(50)]
    assert da == [b.draw("put") for _ in range(50)]
    assert da != [c.draw("put") for _ in range(50)]


async def test_size_term_charges_the_transfer_rate() -> None:
    small, rec_small = wrapped("s3-standard", seed=3)
    big, rec_big = wrapped("s3-standard", seed=3)  # same seed: same fixed draws
    await small.put("k", b"")
    await big.put("k", bytes(8 << 20))
    assert rec_big.delays[0] - rec_small.delays[0] == pytest.approx((8 << 20) / 90e6)
    await small.get("k")
    await big.get("k", 0, 1 << 20)  # a GET pays for the bytes it returned
    assert rec_big.delays[1] - rec_small.delays[1] == pytest.approx((1 << 20) / 90e6)


async def test_errors_still_cost_a_round_trip() -> None:
    store, rec = wrapped("s3-express")
    with pytest.raises(ObjectNotFound):
        await store.get("missing")
    with pytest.raises(ObjectNotFound):
        await store.head("missing")
    assert len(rec.delays) == 2 and all(d > 0 for d in rec.delays)


async def test_list_and_delete_pay_per_page_of_1000() -> None:
    store, rec = wrapped("s3-standard")
    keys = [f"k{i:05d}" for i in range(2500)]
    for k in keys:
        await store.put(k, b"x")
    rec.delays = []
    assert [i.key async for i in store.list()] == keys
    assert len(rec.delays) == 3  # pages of 1000, 1000 and 500
    rec.delays = []
    await store.delete_many(keys)
    assert len(rec.delays) == 1 and rec.delays[0] > 0  # three DeleteObjects, one wait
    await store.delete_many([])
    assert len(rec.delays) == 1
    assert [i async for i in store.list()] == []


def test_one_mib_put_is_about_what_s3_standard_charges() -> None:
    """The table in the module docstring: a 1 MiB PUT at p50/p99 ~52/~202 ms."""
    store, _ = wrapped("s3-standard", seed=11)
    d = [store.draw("put", 1 << 20) for _ in range(N)]
    assert pct_ms(d, 0.5) == pytest.approx(40 + (1 << 20) / 90e3, rel=0.05)
    assert pct_ms(d, 0.99) == pytest.approx(190 + (1 << 20) / 90e3, rel=0.10)
    assert math.isclose(PROFILES["none"].op("put").draw(store.rng), 0.0)


async def test_a_stall_file_holds_every_call_until_it_is_removed(tmp_path: Path) -> None:
    """The benchmarks' "bucket stalled" nemesis: while the file exists nothing answers."""
    stall = tmp_path / "stalled"
    stall.write_text("")
    profile, _ = parse_latency({"latency_stall_file": str(stall)})
    assert not profile.is_zero
    waits: list[float] = []

    async def sleep(s: float) -> None:
        waits.append(s)
        if len(waits) == 3:
            stall.unlink()  # the nemesis ends after three polls

    store = LatencyStore(MemoryStore(), profile, sleep=sleep)
    await store.put("k", b"v")
    assert waits == [0.05, 0.05, 0.05]
    assert await store.get("k") == b"v"
    assert len(waits) == 3
