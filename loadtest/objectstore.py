"""Object store benchmark: Floe's ObjectStore vs the raw client on the same server.

Measures what the agent's uploader (PUT of ~flush_bytes segments) and fetch
cache (ranged GETs of cache blocks) will get from storage, and how much our
layer costs on top of the raw baseline (DESIGN.md: always report the raw
figure of the same store next to ours):

* S3: ``open_object_store(url)`` (with its retry wrapper) vs raw aioboto3 with
  the *same* botocore Config, against the same endpoint in the same run. With no
  ``--url`` a private moto server process is started (moto tops out near
  200 MB/s on one core: a correctness server, not a performance ceiling).
* file: ``file://`` store in a temp dir vs raw ``open/write/fsync`` and
  ``seek/read`` from the thread pool.

Rounds alternate the order (raw first, then ours first) to cancel warm-up bias.

    python -m loadtest.objectstore [--url s3://...|file://...] [--size 8MiB]
        [--count N] [--concurrency C] [--ranges 1MiB,4MiB] [--rounds R]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import re
import shutil
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import aioboto3

from loadtest.services import start_moto
from objectstore import ObjectStore, open_object_store
from objectstore.s3 import S3Store

_UNITS = {
    "": 1,
    "b": 1,
    "k": 1 << 10,
    "kb": 1 << 10,
    "kib": 1 << 10,
    "m": 1 << 20,
    "mb": 1 << 20,
    "mib": 1 << 20,
}
_UNITS |= {"g": 1 << 30, "gb": 1 << 30, "gib": 1 << 30}


def parse_size(text: str) -> int:
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*", text)
    if not m or m.group(2).lower() not in _UNITS:
        raise argparse.ArgumentTypeError(f"bad size {text!r}")
    return int(float(m.group(1)) * _UNITS[m.group(2).lower()])


@dataclass
class Result:
    op: str
    impl: str
    nbytes: int = 0
    wall: float = 0.0
    latencies: list[float] = field(default_factory=list)

    @property
    def mbps(self) -> float:
        return self.nbytes / self.wall / 1e6 if self.wall else 0.0

    @property
    def ops(self) -> float:
        return len(self.latencies) / self.wall if self.wall else 0.0

    def pct(self, p: float) -> float:
        lat = sorted(self.latencies)
        return lat[min(len(lat) - 1, int(p * len(lat)))] * 1000 if lat else 0.0


async def run_ops(
    result: Result, jobs: list[Callable[[], Awaitable[int]]], concurrency: int
) -> None:
    """Run ``jobs`` (each returns bytes moved) with bounded concurrency, timing each."""
    sem = asyncio.Semaphore(concurrency)

    async def one(job: Callable[[], Awaitable[int]]) -> None:
        async with sem:
            t = time.perf_counter()
            moved = await job()  # not `+= await`: that reads nbytes before awaiting
            result.nbytes += moved
            result.latencies.append(time.perf_counter() - t)

    t0 = time.perf_counter()
    await asyncio.gather(*(one(j) for j in jobs))
    result.wall += time.perf_counter() - t0


class Backend:
    """One side of a comparison: put/get callables over the same server or disk."""

    name = "?"

    async def put(self, key: str, data: bytes) -> None:
        raise NotImplementedError

    async def get(self, key: str, start: int, end: int) -> bytes:
        raise NotImplementedError


class Ours(Backend):
    def __init__(self, store: ObjectStore) -> None:
        self.store, self.name = store, "floe"

    async def put(self, key: str, data: bytes) -> None:
        await self.store.put(key, data)

    async def get(self, key: str, start: int, end: int) -> bytes:
        return await self.store.get(key, start, end)


class RawS3(Backend):
    def __init__(self, client: Any, bucket: str, prefix: str) -> None:
        self.client, self.bucket, self.prefix, self.name = client, bucket, prefix, "raw aioboto3"

    async def put(self, key: str, data: bytes) -> None:
        await self.client.put_object(
            Bucket=self.bucket, Key=self.prefix + key, Body=data, IfNoneMatch="*"
        )

    async def get(self, key: str, start: int, end: int) -> bytes:
        resp = await self.client.get_object(
            Bucket=self.bucket, Key=self.prefix + key, Range=f"bytes={start}-{end - 1}"
        )
        async with resp["Body"] as body:
            data: bytes = await body.read()
            return data


class RawFile(Backend):
    def __init__(self, root: Path) -> None:
        self.root, self.name = root, "raw file"
        root.mkdir(parents=True, exist_ok=True)

    def _put(self, key: str, data: bytes) -> None:
        fd = os.open(self.root / key.replace("/", "_"), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            os.write(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)

    def _get(self, key: str, start: int, end: int) -> bytes:
        with open(self.root / key.replace("/", "_"), "rb", buffering=0) as f:
            f.seek(start)
            return f.read(end - start)

    async def put(self, key: str, data: bytes) -> None:
        await asyncio.to_thread(self._put, key, data)

    async def get(self, key: str, start: int, end: int) -> bytes:
        return await asyncio.to_thread(self._get, key, start, end)


async def compare(
    label: str, sides: list[Backend], args: argparse.Namespace, gets: int
) -> list[Result]:
    """PUT then ranged-GET through each side, alternating which goes first per round.

    Each side does one untimed PUT and GET first (connection pool, thread pool).
    """
    data = os.urandom(args.size)
    rng = random.Random(1)
    results = {
        (op, s.name): Result(op, s.name)
        for s in sides
        for op in ["put", *[f"get {r >> 20}MiB" for r in args.ranges]]
    }
    run_id = uuid.uuid4().hex[:8]
    for side in sides:
        warm = f"bench/{run_id}/warmup-{side.name.replace(' ', '-')}"
        await side.put(warm, data[:1024])
        await side.get(warm, 0, 1024)
    for rnd in range(args.rounds):
        order = sides if rnd % 2 == 0 else sides[::-1]
        for side in order:
            keys = [
                f"bench/{run_id}/{side.name.replace(' ', '-')}/{rnd}/{i:05d}"
                for i in range(args.count)
            ]

            def put_job(k: str, side: Backend = side) -> Callable[[], Awaitable[int]]:
                async def job() -> int:
                    await side.put(k, data)
                    return len(data)

                return job

            await run_ops(results[("put", side.name)], [put_job(k) for k in keys], args.concurrency)
            for r in args.ranges:
                r = min(r, args.size)

                def get_job(
                    k: str, start: int, r: int = r, side: Backend = side
                ) -> Callable[[], Awaitable[int]]:
                    async def job() -> int:
                        got = await side.get(k, start, start + r)
                        assert len(got) == r
                        return r

                    return job

                jobs = [
                    get_job(rng.choice(keys), rng.randrange(0, args.size - r + 1))
                    for _ in range(args.gets)
                ]
                await run_ops(results[(f"get {r >> 20}MiB", side.name)], jobs, args.concurrency)
    print_table(label, list(results.values()), [s.name for s in sides])
    return list(results.values())


def print_table(label: str, results: list[Result], names: list[str]) -> None:
    print(f"\n== {label} ==")
    print(f"{'op':<12}{'impl':<14}{'MB/s':>9}{'obj/s':>9}{'p50 ms':>9}{'p99 ms':>9}")
    by = {(r.op, r.impl): r for r in results}
    for op in dict.fromkeys(r.op for r in results):
        for name in names:
            r = by[(op, name)]
            print(
                f"{op:<12}{name:<14}{r.mbps:>9.1f}{r.ops:>9.1f}{r.pct(0.5):>9.2f}{r.pct(0.99):>9.2f}"
            )
        ours, raw = by[(op, names[0])], by[(op, names[1])]
        print(f"{op:<12}{'ours/raw':<14}{ours.mbps / raw.mbps if raw.mbps else 0:>9.2f}x")


async def bench_s3(url: str, args: argparse.Namespace) -> None:
    store = open_object_store(url)
    inner = getattr(store, "inner", store)
    assert isinstance(inner, S3Store)
    session = aioboto3.Session()
    async with (
        store,
        session.client("s3", endpoint_url=inner.endpoint, config=inner.config) as client,
    ):
        raw = RawS3(client, inner.bucket, inner.prefix)
        await compare(
            f"S3 {inner.endpoint or 'aws'} bucket={inner.bucket}",
            [Ours(store), raw],
            args,
            args.gets,
        )
        if not args.keep:
            keys = [i.key async for i in store.list("bench/")]
            await store.delete_many(keys)


async def bench_file(root: Path, args: argparse.Namespace) -> None:
    async with open_object_store(f"file://{root / 'floe'}") as store:
        await compare(f"file {root}", [Ours(store), RawFile(root / "raw")], args, args.gets * 8)


async def main_async(args: argparse.Namespace) -> None:
    print(
        f"size={args.size >> 20}MiB count={args.count} concurrency={args.concurrency} rounds={args.rounds}"
    )
    proc = None
    url = args.url
    try:
        if url is None:
            for k, v in {"AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench"}.items():
                os.environ.setdefault(k, v)
            proc, endpoint = start_moto()
            bucket = f"floe-bench-{uuid.uuid4().hex[:8]}"
            session = aioboto3.Session()
            async with session.client("s3", endpoint_url=endpoint, region_name="us-east-1") as c:
                await c.create_bucket(Bucket=bucket)
            url = f"s3://{bucket}/bench-prefix?endpoint={endpoint}&region=us-east-1"
            print(f"started moto at {endpoint} (pid {proc.pid})")
        scheme = urlsplit(url).scheme
        if scheme == "s3":
            await bench_s3(url, args)
        if scheme == "file":
            await bench_file(Path(urlsplit(url).path), args)
        elif not args.no_file:
            tmp = Path(tempfile.mkdtemp(prefix="floe-bench-", dir=args.tmpdir))
            try:
                await bench_file(tmp, args)
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(10)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(
        prog="python -m loadtest.objectstore", description=__doc__.split("\n\n")[0]
    )
    p.add_argument(
        "--url", help="s3://bucket/prefix?endpoint=... or file:///dir (default: private moto)"
    )
    p.add_argument("--size", type=parse_size, default=8 << 20, help="object size (default 8MiB)")
    p.add_argument("--count", type=int, default=16, help="objects PUT per side per round")
    p.add_argument("--concurrency", type=int, default=4)
    p.add_argument(
        "--ranges", type=lambda s: [parse_size(x) for x in s.split(",")], default=[1 << 20, 4 << 20]
    )
    p.add_argument(
        "--gets", type=int, default=32, help="ranged GETs per range size per side per round"
    )
    p.add_argument("--rounds", type=int, default=4, help="alternating rounds (default 4)")
    p.add_argument("--no-file", action="store_true", help="skip the file:// comparison")
    p.add_argument("--tmpdir", help="where the file:// comparison writes (default: system temp)")
    p.add_argument("--keep", action="store_true", help="keep benchmark objects")
    asyncio.run(main_async(p.parse_args(argv)))


if __name__ == "__main__":
    main()
