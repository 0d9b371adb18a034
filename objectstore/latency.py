"""Simulated object-store latency: profiles and the ``LatencyStore`` wrapper.

Sits between a store and its callers when a URL carries ``latency=...``
(``file:///data/objects?latency=s3-standard``, ``s3://b/p?endpoint=...&latency=s3-express``):
:func:`objectstore.open_object_store` strips the ``latency*`` options, opens the
backend, wraps it here, then adds the retry layer on top (so every retried
attempt pays the latency again, as a real request would). Local stores answer
a PUT in milliseconds; benchmarks under a profile pay what S3 would charge.

Each call sleeps ``draw + bytes / throughput``: ``draw`` comes from a lognormal
fitted to the profile's p50 and p99 for that operation (``mu = ln p50``,
``sigma = ln(p99 / p50) / z(0.99)``) with a seeded RNG, and the size term
charges a per-request transfer rate, so an 8 MiB segment costs more than a
64 KiB journal record. PUT sleeps before the write (the object appears when
the request completes); GET sleeps after reading (first byte + transfer of
what was returned; a 404 still costs its first-byte draw); HEAD sleeps once;
DeleteObjects once per 1,000 keys; LIST once per page of 1,000 keys.

Profiles (ms; ``put`` excludes the size term, which adds ~11.7 ms per MiB at 90 MB/s):

=============  ============  ================  =====================  ======
profile        put p50/p99   get first byte    head, delete, list     MB/s
=============  ============  ================  =====================  ======
s3-standard    40 / 190      30 / 100          as get / put / get     90
s3-express     5 / 15        5 / 15            5 / 15                 90
none           0             0                 0                      none
=============  ============  ================  =====================  ======

so a 1 MiB S3 Standard PUT is ~52 ms at p50 and ~202 ms at p99. Sources:

* AWS, "Optimizing S3 Express One Zone performance" (S3 User Guide,
  docs.aws.amazon.com/AmazonS3/latest/userguide/s3-express-performance.html):
  "consistent single-digit millisecond first-byte read and write request
  latencies -- up to 10x faster than S3 Standard". Hence s3-express 5/15 ms and
  S3 Standard first bytes in the tens of milliseconds.
* AWS whitepaper "Optimizing Amazon S3 Performance", "Timeouts and Retries for
  Latency-Sensitive Applications" (docs.aws.amazon.com/whitepapers/latest/
  s3-optimizing-performance-best-practices/): S3 advises tracking and
  aggressively retrying slow requests, i.e. the tail is several times the median
  (our p99/p50 is 3-5x). The often-quoted 100-200 ms first byte for small
  objects (we found it relayed, e.g. notes.aslamcodes.in/aws/s3/s3-performance,
  not on an AWS page we could read) puts our GET p99 at its low end.
* WarpStream, "The Art of Being Lazy(log)" (warpstream.com/blog): a PUT to a
  traditional object store takes "on the order of a few hundred milliseconds"
  at worst; produce p99 400 ms by default, p50/p99 105/170 ms on S3 Express One
  Zone. WarpStream docs "Low Latency Clusters" (docs.warpstream.com/warpstream/
  configuration/low-latency-clusters): 250 ms batches on S3 Standard give produce
  p50/p99 250/500 ms, 50 ms batches on S3 Express p50 < 80, p99 < 150 ms. Taking
  the batch wait and the metadata commit out leaves PUT p99 ~200 ms (Standard)
  and ~15 ms (Express), as above.
* The 90 MB/s per request is a planning figure (single-stream S3 transfers are
  commonly 80-100 MB/s), not a published AWS number; set ``latency_mbps``.

Custom profiles: ``latency_<op>_p50_ms`` / ``latency_<op>_p99_ms`` for op in
put, get, head, delete, list override the base profile (``latency=``, default
``none``); one given alone keeps the base profile's p99/p50 ratio.
``latency_mbps`` sets the transfer rate (0 = no size term), ``latency_seed`` the
RNG seed (default: fresh entropy per store). ``latency_stall_file=PATH`` stalls
every call while PATH exists, as a stopped endpoint would (benchmarks' nemesis).
"""

from __future__ import annotations

import asyncio
import math
import os
import random
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from statistics import NormalDist
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from objectstore.base import ObjectInfo, ObjectStore, StoreBase, split_url_options
from objectstore.errors import ObjectStoreError

OPS = ("put", "get", "head", "delete", "list")
PAGE_KEYS = 1000  # S3's ListObjectsV2 page and DeleteObjects batch
Z99 = NormalDist().inv_cdf(0.99)  # 2.326: p99 of a lognormal is exp(mu + Z99 * sigma)


@dataclass(frozen=True, slots=True)
class OpLatency:
    """Median and 99th percentile (ms) of one operation's fixed cost."""

    p50_ms: float
    p99_ms: float

    @property
    def sigma(self) -> float:
        return math.log(self.p99_ms / self.p50_ms) / Z99 if self.p50_ms > 0 else 0.0

    def draw(self, rng: random.Random) -> float:
        """One delay in seconds."""
        if self.p50_ms <= 0:
            return 0.0
        return self.p50_ms * math.exp(self.sigma * rng.gauss(0.0, 1.0)) / 1000.0


@dataclass(frozen=True, slots=True)
class LatencyProfile:
    """Per-operation latency plus a per-request transfer rate (MB/s, 0 = free)."""

    name: str
    put: OpLatency
    get: OpLatency
    head: OpLatency
    delete: OpLatency
    list: OpLatency
    mbps: float = 0.0
    # While this file exists every call waits (a stalled endpoint, as SIGSTOP of its server).
    stall_file: str = ""

    def op(self, name: str) -> OpLatency:
        lat: OpLatency = getattr(self, name)
        return lat

    @property
    def is_zero(self) -> bool:
        return all(self.op(o).p50_ms <= 0 for o in OPS) and self.mbps <= 0 and not self.stall_file

    def transfer_s(self, nbytes: int) -> float:
        return nbytes / (self.mbps * 1e6) if self.mbps > 0 else 0.0

    def describe(self) -> dict[str, Any]:
        """Flat numbers for result files: which latency a benchmark ran under."""
        out: dict[str, Any] = {"profile": self.name}
        for o in OPS:
            out[f"{o}_p50_ms"] = self.op(o).p50_ms
            out[f"{o}_p99_ms"] = self.op(o).p99_ms
        out["mbps"] = self.mbps
        return out


_ZERO = OpLatency(0.0, 0.0)
_STD_PUT, _STD_GET = OpLatency(40.0, 190.0), OpLatency(30.0, 100.0)
_EXPRESS = OpLatency(5.0, 15.0)
PROFILES: dict[str, LatencyProfile] = {
    "none": LatencyProfile("none", _ZERO, _ZERO, _ZERO, _ZERO, _ZERO, 0.0),
    "s3-standard": LatencyProfile("s3-standard", _STD_PUT, _STD_GET, _STD_GET, _STD_PUT, _STD_GET, 90.0),
    "s3-express": LatencyProfile("s3-express", _EXPRESS, _EXPRESS, _EXPRESS, _EXPRESS, _EXPRESS, 90.0),
}


def _number(key: str, value: Any) -> float:
    try:
        x = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{key}={value!r} is not a number") from None
    if not math.isfinite(x) or x < 0:
        raise ValueError(f"{key}={value!r} must be a finite number >= 0")
    return x


def parse_latency(options: Mapping[str, Any]) -> tuple[LatencyProfile, int | None]:
    """``latency=``/``latency_*`` options -> (profile, seed). Raises ValueError on bad input."""
    base = str(options.get("latency", "none") or "none").strip().lower()
    if base not in PROFILES:
        known = ", ".join(sorted(PROFILES))
        raise ValueError(
            f"unknown latency profile {base!r} (known: {known}; or set "
            "latency_<op>_p50_ms / latency_<op>_p99_ms for op in put, get, head, delete, list)"
        )
    profile = PROFILES[base]
    seed: int | None = None
    given: dict[tuple[str, str], float] = {}
    for key, value in options.items():
        if key == "latency":
            continue
        if key == "latency_seed":
            seed = int(_number(key, value))
        elif key == "latency_mbps":
            profile = replace(profile, mbps=_number(key, value))
        elif key == "latency_stall_file":
            profile = replace(profile, stall_file=str(value))
        else:
            parts = key.split("_")
            if len(parts) != 4 or parts[1] not in OPS or parts[2] not in ("p50", "p99") or parts[3] != "ms":
                raise ValueError(
                    f"unknown latency option {key!r} (latency, latency_seed, latency_mbps, latency_stall_file, "
                    "latency_<put|get|head|delete|list>_<p50|p99>_ms)"
                )
            given[(parts[1], parts[2])] = _number(key, value)
    overrides: dict[str, Any] = {}  # op name -> OpLatency (Any: replace() checks names)
    for o in OPS:
        p50, p99 = given.get((o, "p50")), given.get((o, "p99"))
        if p50 is None and p99 is None:
            continue
        old = profile.op(o)
        ratio = old.p99_ms / old.p50_ms if old.p50_ms > 0 else 1.0
        p50 = p50 if p50 is not None else (p99 or 0.0) / ratio
        p99 = p99 if p99 is not None else p50 * ratio
        if p99 < p50 or (p50 == 0 and p99 > 0):
            raise ValueError(f"latency for {o}: need 0 < p50 <= p99 (or both 0), got {p50}/{p99} ms")
        overrides[o] = OpLatency(p50, p99)
    if overrides:
        profile = replace(profile, name=f"{base}+custom", **overrides)
    elif "latency_mbps" in options:
        profile = replace(profile, name=f"{base}+custom")
    return profile, seed


def split_latency_url(url: str, opts: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
    """Remove the ``latency*`` options from ``url``'s query and from ``opts`` (in place):
    :func:`objectstore.base.split_url_options`."""
    return split_url_options(url, "latency", opts)


def with_latency(url: str, spec: str | None) -> str:
    """``url`` with a latency spec added: a profile name (``s3-standard``) or a query
    fragment of latency options (``latency=none&latency_put_p50_ms=20``)."""
    if not spec:
        return url
    fragment = spec if "=" in spec else urlencode({"latency": spec})
    parse_latency(dict(parse_qsl(fragment)))  # fail early, before any process starts
    parts = urlsplit(url)
    return urlunsplit(parts._replace(query=f"{parts.query}&{fragment}" if parts.query else fragment))


class LatencyStore(StoreBase):
    """Delegates to ``inner`` after sleeping what ``profile`` says the call would take.

    ``sleep`` and ``rng`` are injectable: tests record the requested delays
    instead of waiting for them."""

    def __init__(
        self,
        inner: ObjectStore,
        profile: LatencyProfile,
        *,
        seed: int | None = None,
        rng: random.Random | None = None,
        sleep: Callable[[float], Awaitable[object]] = asyncio.sleep,
    ) -> None:
        self.inner = inner
        self.profile = profile
        self.rng = rng if rng is not None else random.Random(seed)
        self._sleep = sleep

    def __repr__(self) -> str:
        return f"LatencyStore({self.inner!r}, {self.profile.name})"

    def draw(self, op: str, nbytes: int = 0) -> float:
        """Seconds one ``op`` call moving ``nbytes`` takes under the profile."""
        return self.profile.op(op).draw(self.rng) + self.profile.transfer_s(nbytes)

    async def _wait(self, seconds: float) -> None:
        # (a stat per call, only with a stall file configured: benchmarks)
        while self.profile.stall_file and os.path.exists(self.profile.stall_file):  # noqa: ASYNC240
            await self._sleep(0.05)  # stalled from outside (a benchmark's nemesis)
        if seconds > 0:
            await self._sleep(seconds)

    async def put(self, key: str, data: bytes | memoryview) -> None:
        await self._wait(self.draw("put", memoryview(data).nbytes))
        await self.inner.put(key, data)

    async def get(self, key: str, start: int | None = None, end: int | None = None) -> bytes:
        first = self.draw("get")
        try:
            data = await self.inner.get(key, start, end)
        except ObjectStoreError:
            await self._wait(first)  # a 404 or a 5xx still took a round trip
            raise
        await self._wait(first + self.profile.transfer_s(len(data)))
        return data

    async def head(self, key: str) -> ObjectInfo:
        await self._wait(self.draw("head"))
        return await self.inner.head(key)

    async def delete_many(self, keys: Sequence[str]) -> None:
        if keys:
            batches = -(-len(keys) // PAGE_KEYS)
            await self._wait(sum(self.draw("delete") for _ in range(batches)))
        await self.inner.delete_many(keys)

    async def list(
        self, prefix: str = "", *, start_after: str | None = None
    ) -> AsyncIterator[ObjectInfo]:
        await self._wait(self.draw("list"))
        n = 0
        async for info in self.inner.list(prefix, start_after=start_after):
            if n and n % PAGE_KEYS == 0:
                await self._wait(self.draw("list"))  # the next page's request
            n += 1
            yield info

    async def close(self) -> None:
        await self.inner.close()
