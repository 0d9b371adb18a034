"""Fault-injecting ``ObjectStore`` wrapper for reliability tests.

Wraps any store (usually memory or moto S3) underneath a
:class:`~objectstore.retry.RetryingStore`, the uploader or the fetch cache, and
makes chosen calls fail the way S3 does in production:

* ``THROTTLE`` — 503 SlowDown before the request reaches the store;
* ``TIMEOUT`` — the request times out before reaching the store (TransientError);
* ``SLOW`` — slow first byte: ``await delay(slow_seconds)`` then the real call
  (``delay`` is injectable, so tests can use a fake clock instead of sleeping);
* ``LOST_RESPONSE`` — the real call *happens* (a PUT is stored, a delete
  deletes) and then a TransientError is raised, as when the response is lost.
  For ``list`` it means the stream breaks after the first object;
* ``ERROR`` — a PermanentError.

Faults are scripted per operation (``inject("put", Fault.THROTTLE, None, ...)``,
consumed one per call, ``None`` = a clean call) and, once a script runs out,
drawn at random from per-operation ``rates`` with a seeded RNG, so a failing
run is reproducible. Operations: put, get, head, delete_many, list ("*" in
``rates`` applies to all).
"""

from __future__ import annotations

import asyncio
import enum
import random
from collections import Counter, deque
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence

from objectstore.base import ObjectInfo, ObjectStore, StoreBase
from objectstore.errors import PermanentError, Throttled, TransientError

OPS = ("put", "get", "head", "delete_many", "list")


class Fault(enum.Enum):
    THROTTLE = "throttle"
    TIMEOUT = "timeout"
    SLOW = "slow"
    LOST_RESPONSE = "lost_response"
    ERROR = "error"


class FaultyStore(StoreBase):
    """Delegates to ``inner`` but injects scripted or random faults per operation."""

    def __init__(
        self,
        inner: ObjectStore,
        *,
        script: Mapping[str, Sequence[Fault | None]] | None = None,
        rates: Mapping[str, Mapping[Fault, float]] | None = None,
        seed: int | None = 0,
        slow_seconds: float = 0.5,
        delay: Callable[[float], Awaitable[object]] = asyncio.sleep,
    ) -> None:
        self.inner = inner
        self._script: dict[str, deque[Fault | None]] = {op: deque() for op in OPS}
        for op, faults in (script or {}).items():
            self.inject(op, *faults)
        for op in rates or {}:
            if op != "*" and op not in OPS:
                raise ValueError(f"unknown operation {op!r}")
        self.rates = dict(rates or {})
        self.rng = random.Random(seed)
        self.slow_seconds = slow_seconds
        self.delay = delay
        self.calls: Counter[str] = Counter()
        self.injected: list[tuple[str, str, Fault]] = []  # (op, key, fault)

    def __repr__(self) -> str:
        return f"FaultyStore({self.inner!r})"

    def inject(self, op: str, *faults: Fault | None) -> None:
        """Queue faults for the next calls of ``op`` (``None`` = one clean call)."""
        if op not in OPS:
            raise ValueError(f"unknown operation {op!r}")
        self._script[op].extend(faults)

    def _next(self, op: str, key: str) -> Fault | None:
        self.calls[op] += 1
        queue = self._script[op]
        fault: Fault | None = None
        if queue:
            fault = queue.popleft()
        else:
            table = {**self.rates.get("*", {}), **self.rates.get(op, {})}
            if table:
                r = self.rng.random()
                for candidate, p in table.items():
                    if r < p:
                        fault = candidate
                        break
                    r -= p
        if fault is not None:
            self.injected.append((op, key, fault))
        return fault

    async def _before(self, fault: Fault | None, op: str, key: str) -> None:
        """Faults that strike before the request reaches the store."""
        if fault is Fault.THROTTLE:
            raise Throttled(f"injected SlowDown on {op} {key}", key=key)
        if fault is Fault.TIMEOUT:
            raise TransientError(f"injected timeout on {op} {key}", key=key)
        if fault is Fault.ERROR:
            raise PermanentError(f"injected permanent error on {op} {key}", key=key)
        if fault is Fault.SLOW:
            await self.delay(self.slow_seconds)

    @staticmethod
    def _after(fault: Fault | None, op: str, key: str) -> None:
        if fault is Fault.LOST_RESPONSE:
            raise TransientError(f"injected lost response on {op} {key}", key=key)

    async def put(self, key: str, data: bytes | memoryview) -> None:
        fault = self._next("put", key)
        await self._before(fault, "put", key)
        await self.inner.put(key, data)
        self._after(fault, "put", key)

    async def get(self, key: str, start: int | None = None, end: int | None = None) -> bytes:
        fault = self._next("get", key)
        await self._before(fault, "get", key)
        data = await self.inner.get(key, start, end)
        self._after(fault, "get", key)
        return data

    async def head(self, key: str) -> ObjectInfo:
        fault = self._next("head", key)
        await self._before(fault, "head", key)
        info = await self.inner.head(key)
        self._after(fault, "head", key)
        return info

    async def delete_many(self, keys: Sequence[str]) -> None:
        label = keys[0] if keys else ""
        fault = self._next("delete_many", label)
        await self._before(fault, "delete_many", label)
        await self.inner.delete_many(keys)
        self._after(fault, "delete_many", label)

    async def list(
        self, prefix: str = "", *, start_after: str | None = None
    ) -> AsyncIterator[ObjectInfo]:
        fault = self._next("list", prefix)
        await self._before(fault, "list", prefix)
        async for info in self.inner.list(prefix, start_after=start_after):
            yield info
            self._after(fault, "list", prefix)

    async def close(self) -> None:
        await self.inner.close()
