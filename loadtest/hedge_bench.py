"""Hedged GETs vs plain GETs under the simulated S3 latency (objectstore.hedge).

Opens ``memory://hedge-bench?latency=<profile>`` through ``open_object_store``
(so the real wrapper order: retries over hedging over the latency model), puts
a few objects of ``--size``, then runs ``--count`` whole-object GETs at
``--concurrency`` with hedging off and on, and prints p50/p99/p99.9 and hedges
per 1,000 calls. The latency model draws independent lognormal delays, so this
shows what hedging does to a lognormal tail, not to a real store's stalls.

    python -m loadtest.hedge_bench [--count 2000] [--concurrency 8] [--size 1MiB]
        [--profile s3-standard | --profile 'latency=s3-standard&latency_get_p99_ms=300']
        [--hedge hedge_budget=0.05&...] [--seed 1] [--stall 0.01:1.0]
"""

from __future__ import annotations

import argparse
import asyncio
import time
from typing import Any

from objectstore import ObjectStore, RetryingStore, open_object_store
from objectstore.faults import Fault, FaultyStore
from objectstore.hedge import HedgingStore, parse_hedge, split_hedge_url
from objectstore.latency import LatencyStore, parse_latency, split_latency_url
from objectstore.memory import MemoryStore, reset_memory_stores

OBJECTS = 16


def _size(text: str) -> int:
    units = {"kib": 1 << 10, "mib": 1 << 20, "k": 1 << 10, "m": 1 << 20}
    t = text.strip().lower()
    for suffix, mult in units.items():
        if t.endswith(suffix):
            return int(float(t[: -len(suffix)]) * mult)
    return int(t)


def _pct_ms(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))] * 1000


def _open(url: str, stall: tuple[float, float] | None, seed: int) -> ObjectStore:
    """``open_object_store(url)``, or with ``stall`` the same chain built by hand with a
    FaultyStore under the latency model: each request (a hedge too) stalls with
    probability ``rate`` for ``seconds``, the way a real store occasionally does."""
    if stall is None:
        return open_object_store(url)
    url, latency_opts = split_latency_url(url)
    url, hedge_opts = split_hedge_url(url)
    profile, _ = parse_latency(latency_opts)
    rate, seconds = stall
    store: ObjectStore = FaultyStore(
        MemoryStore(), rates={"get": {Fault.SLOW: rate}}, slow_seconds=seconds, seed=seed
    )
    store = LatencyStore(store, profile, seed=seed)
    policy = parse_hedge(hedge_opts)
    if policy is not None:
        store = HedgingStore(store, policy)
    return RetryingStore(store)


async def run(
    url: str, *, count: int, concurrency: int, size: int, stall: tuple[float, float] | None = None, seed: int = 1
) -> dict[str, Any]:
    reset_memory_stores()
    store = _open(url, stall, seed)
    data = bytes(size)
    latencies: list[float] = []
    async with store:
        for i in range(OBJECTS):
            await store.put(f"obj/{i}", data)
        hedger = getattr(store, "inner", None)
        if isinstance(hedger, HedgingStore):  # the warm-up PUTs are not GET samples
            hedger.calls.clear()
            hedger.hedges.clear()
            hedger.hedges_won.clear()
            hedger.hedges_denied.clear()
        todo = iter(range(count))

        async def worker() -> None:
            for n in todo:
                t0 = time.perf_counter()
                got = await store.get(f"obj/{n % OBJECTS}")
                latencies.append(time.perf_counter() - t0)
                assert len(got) == size

        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        elapsed = time.perf_counter() - started
    out: dict[str, Any] = {
        "calls": len(latencies),
        "p50_ms": _pct_ms(latencies, 0.50),
        "p99_ms": _pct_ms(latencies, 0.99),
        "p999_ms": _pct_ms(latencies, 0.999),
        "max_ms": max(latencies) * 1000,
        "gets_per_s": len(latencies) / elapsed,
    }
    if isinstance(hedger, HedgingStore):
        s = hedger.stats()
        out["hedges_per_1000"] = s["hedges_per_1000"]
        out["hedges_won"] = s["hedges_won"].get("get", 0)
        out["hedges_denied"] = s["hedges_denied"].get("get", 0)
        out["deadline_ms"] = s["deadline_ms"].get("get/whole")
    return out


async def main(args: argparse.Namespace) -> None:
    latency = args.profile if "=" in args.profile else f"latency={args.profile}"
    base = f"memory://hedge-bench?{latency}&latency_seed={args.seed}"
    variants = [("off", base), ("on", f"{base}&hedge=on" + (f"&{args.hedge}" if args.hedge else ""))]
    stall = f", stalls {args.stall[0]:.1%} x {args.stall[1]} s" if args.stall else ""
    print(f"{args.count} GETs of {args.size} B at concurrency {args.concurrency}, {args.profile}{stall}")
    for name, url in variants:
        r = await run(
            url, count=args.count, concurrency=args.concurrency, size=args.size, stall=args.stall, seed=args.seed
        )
        line = (
            f"hedge {name:3}: p50 {r['p50_ms']:6.1f}  p99 {r['p99_ms']:6.1f}  p99.9 {r['p999_ms']:6.1f}"
            f"  max {r['max_ms']:6.1f} ms  {r['gets_per_s']:6.1f} GET/s"
        )
        if "hedges_per_1000" in r:
            line += (
                f"  hedges/1000 {r['hedges_per_1000']:.1f} (won {r['hedges_won']},"
                f" denied {r['hedges_denied']}, deadline {r['deadline_ms']:.1f} ms)"
            )
        print(line, flush=True)


def cli() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--count", type=int, default=2000)
    p.add_argument("--concurrency", type=int, default=8)
    p.add_argument("--size", type=_size, default=1 << 20)
    p.add_argument("--profile", default="s3-standard", help="a profile name or latency_* URL options")
    p.add_argument("--hedge", default="", help="extra hedge_* URL options, e.g. hedge_budget=0.1")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument(
        "--stall",
        type=lambda t: (float(t.split(":")[0]), float(t.split(":")[1])),
        default=None,
        help="RATE:SECONDS, e.g. 0.01:1.0: that share of requests stalls that long",
    )
    asyncio.run(main(p.parse_args()))


if __name__ == "__main__":
    cli()
