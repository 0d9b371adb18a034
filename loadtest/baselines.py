"""Raw baselines measured in the same run as every load test (DESIGN.md: always
report the raw figure of the same store next to ours).

* ``objectstore``: raw PUTs of ``flush_bytes`` objects (the agent's segment
  size at full load) at the agent's upload concurrency, then ranged GETs of
  one cache block (``fetch_block_bytes``), straight to the same store (raw
  aioboto3 with the store's botocore config for S3; ``open/write/fsync`` and
  ``seek/read`` for ``file://``). Nothing of Floe's in the timed path.
* ``metastore``: the same plpgsql commit SQL the agent runs, sent with raw
  asyncpg on one connection (the agent's committer commits one object at a
  time), into a scratch database on the same Postgres server.
* ``loopback``: TCP throughput over 127.0.0.1 between two threads (1 MiB sends).

When the store URL carries a simulated latency profile (``latency=s3-standard``,
:mod:`objectstore.latency`), the raw PUTs and GETs sleep the same drawn delays
the agent's store does, so Floe's throughput and latency are compared with raw
access to the same simulated S3; the profile is recorded in the result
(``latency_profile``).

All bounded by count and time.
"""

from __future__ import annotations

import asyncio
import os
import random
import socket
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from loadtest.objectstore import Backend, RawFile, RawS3, Result, run_ops
from objectstore.latency import LatencyProfile, parse_latency, split_latency_url


class Latent(Backend):
    """A raw side behind a simulated latency profile (same model as ``LatencyStore``)."""

    def __init__(self, side: Backend, profile: LatencyProfile, seed: int | None = None) -> None:
        self.side, self.profile, self.rng = side, profile, random.Random(seed)
        self.name = f"{side.name} + {profile.name} latency"

    async def put(self, key: str, data: bytes) -> None:
        await asyncio.sleep(self.profile.put.draw(self.rng) + self.profile.transfer_s(len(data)))
        await self.side.put(key, data)

    async def get(self, key: str, start: int, end: int) -> bytes:
        first = self.profile.get.draw(self.rng)
        data = await self.side.get(key, start, end)
        await asyncio.sleep(first + self.profile.transfer_s(len(data)))
        return data


def _summary(r: Result) -> dict[str, float]:
    return {
        "MBps": r.mbps,
        "ops_per_s": r.ops,
        "p50_ms": r.pct(0.5),
        "p99_ms": r.pct(0.99),
        "max_ms": r.pct(1.0),
        "count": len(r.latencies),
        "bytes": r.nbytes,
    }


async def _store_baseline(
    side: Backend, size: int, range_bytes: int, concurrency: int, count: int, gets: int,
    budget_s: float,
) -> dict[str, Any]:
    data = os.urandom(size)
    run = uuid.uuid4().hex[:8]
    await side.put(f"baseline/{run}/warm", data[:1024])  # connection pool / thread pool
    await side.get(f"baseline/{run}/warm", 0, 1024)
    put = Result("put", side.name)
    keys = [f"baseline/{run}/{i:05d}" for i in range(count)]
    def put_job(k: str) -> Any:
        async def job() -> int:
            await side.put(k, data)
            return size

        return job

    await asyncio.wait_for(run_ops(put, [put_job(k) for k in keys], concurrency), budget_s)
    done = keys
    rng = random.Random(7)
    get = Result("get", side.name)
    range_bytes = min(range_bytes, size)

    def get_job(k: str, start: int) -> Any:
        async def job() -> int:
            got = await side.get(k, start, start + range_bytes)
            return len(got)

        return job

    jobs = [get_job(rng.choice(done), rng.randrange(0, size - range_bytes + 1)) for _ in range(gets)]
    await asyncio.wait_for(run_ops(get, jobs, concurrency), budget_s)
    return {
        "object_bytes": size,
        "range_bytes": range_bytes,
        "concurrency": concurrency,
        "put": _summary(put),
        "get": _summary(get),
    }


async def objectstore_baseline(
    objects_url: str, size: int, range_bytes: int, concurrency: int = 4, count: int = 24,
    gets: int = 48, budget_s: float = 30.0,
) -> dict[str, Any]:
    objects_url, latency_opts = split_latency_url(objects_url)
    profile, seed = parse_latency(latency_opts)

    def latent(side: Backend) -> Backend:
        return side if profile.is_zero else Latent(side, profile, seed)

    out = await _raw_baseline(objects_url, latent, size, range_bytes, concurrency, count, gets, budget_s)
    out["latency_profile"] = profile.describe()
    return out


async def _raw_baseline(
    objects_url: str, latent: Callable[[Backend], Backend], size: int, range_bytes: int,
    concurrency: int, count: int, gets: int, budget_s: float,
) -> dict[str, Any]:
    scheme = urlsplit(objects_url).scheme
    if scheme == "file":
        root = Path(urlsplit(objects_url).path).parent / "baseline-raw"
        side: Backend = latent(RawFile(root))
        out = await _store_baseline(side, size, range_bytes, concurrency, count, gets, budget_s)
        import shutil

        shutil.rmtree(root, ignore_errors=True)
        out["impl"] = "raw file (open/write/fsync, seek/read)"
        return out
    if scheme == "s3":
        import aioboto3

        from objectstore import open_object_store
        from objectstore.s3 import S3Store

        store = open_object_store(objects_url)
        inner = getattr(store, "inner", store)
        assert isinstance(inner, S3Store)
        session = aioboto3.Session()
        async with session.client("s3", endpoint_url=inner.endpoint, config=inner.config) as client:
            side = latent(RawS3(client, inner.bucket, inner.prefix))
            out = await _store_baseline(side, size, range_bytes, concurrency, count, gets, budget_s)
            resp = await client.list_objects_v2(Bucket=inner.bucket, Prefix=inner.prefix + "baseline/")
            for o in resp.get("Contents", []):
                await client.delete_object(Bucket=inner.bucket, Key=o["Key"])
        await store.close()
        out["impl"] = "raw aioboto3 (same botocore config)"
        return out
    raise ValueError(f"no raw baseline for {objects_url}")


async def postgres_commit_baseline(
    pg_url: str, partitions: int = 16, seconds: float = 4.0, max_commits: int = 20_000
) -> dict[str, Any]:
    """Raw asyncpg commits of the agent's commit SQL (``metastore.postgres.COMMIT_SQL``)."""
    import asyncpg

    from loadtest.metastore import Workload
    from metastore import open_metastore
    from metastore.engine import asyncpg_dsn
    from metastore.postgres import COMMIT_SQL

    dsn = asyncpg_dsn(pg_url)
    db = f"floe_baseline_{uuid.uuid4().hex[:8]}"
    admin = await asyncpg.connect(dsn)
    try:
        await admin.execute(f"CREATE DATABASE {db}")
    finally:
        await admin.close()
    scratch_url = pg_url.rsplit("/", 1)[0] + "/" + db
    meta = await open_metastore(scratch_url)
    try:
        created = await meta.create_topic("baseline", 1000)
        assert created.topic is not None, created.message
        wl = Workload(created.topic.id, partitions, False, seed=11)
        prepared = [list(zip(*wl.next_object(), strict=True)) for _ in range(200)]
        con = await asyncpg.connect(asyncpg_dsn(scratch_url), server_settings={"jit": "off"})
        try:
            lat: list[float] = []
            run = uuid.uuid4().hex[:8]
            for i in range(20):  # warm-up: plan cache
                await con.fetchrow(COMMIT_SQL, f"{run}/w/{i}", 1 << 20, "bench", 0, *prepared[i])
            t_start = time.perf_counter()
            stop = t_start + seconds
            n = 0
            while n < max_commits and (t := time.perf_counter()) < stop:
                await con.fetchrow(
                    COMMIT_SQL, f"{run}/{n}", 1 << 20, "bench", 0, *prepared[n % len(prepared)]
                )
                lat.append(time.perf_counter() - t)
                n += 1
            wall = time.perf_counter() - t_start
        finally:
            await con.close()
    finally:
        await meta.close()
    lat.sort()

    def q(p: float) -> float:
        return lat[min(len(lat) - 1, int(p * len(lat)))] * 1000 if lat else float("nan")

    return {
        "impl": "raw asyncpg, COMMIT_SQL, 1 connection",
        "partitions_per_object": partitions,
        "commits_per_s": n / wall if wall else 0.0,
        "p50_ms": q(0.5),
        "p99_ms": q(0.99),
        "max_ms": q(1.0),
        "count": n,
    }


def loopback_tcp_baseline(total_bytes: int = 1 << 30, seconds: float = 3.0) -> dict[str, Any]:
    """Bytes/s over 127.0.0.1 between two threads (the socket calls drop the GIL)."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    port = srv.getsockname()[1]
    received = [0]

    def sink() -> None:
        conn, _ = srv.accept()
        buf = bytearray(1 << 20)
        with conn:
            while True:
                n = conn.recv_into(buf)
                if n == 0:
                    return
                received[0] += n

    th = threading.Thread(target=sink, daemon=True)
    th.start()
    chunk = os.urandom(1 << 20)
    sent = 0
    with socket.create_connection(("127.0.0.1", port)) as s:
        t0 = time.perf_counter()
        while sent < total_bytes and time.perf_counter() - t0 < seconds:
            s.sendall(chunk)
            sent += len(chunk)
    th.join(10)
    wall = time.perf_counter() - t0
    srv.close()
    return {"MBps": received[0] / wall / 1e6, "bytes": received[0], "seconds": wall}


def measure_all(
    objects_url: str | None, metastore_url: str | None, flush_bytes: int, block_bytes: int,
    upload_concurrency: int, partitions: int,
) -> dict[str, Any]:
    out: dict[str, Any] = {}
    out["loopback_tcp"] = loopback_tcp_baseline()
    if objects_url:
        out["objectstore"] = asyncio.run(
            objectstore_baseline(objects_url, flush_bytes, block_bytes, upload_concurrency)
        )
    if metastore_url and metastore_url.startswith("postgresql"):
        out["metastore"] = asyncio.run(postgres_commit_baseline(metastore_url, partitions))
    return out
