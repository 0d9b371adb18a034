"""Hedged GETs and PUTs: a call that has not answered by an adaptive deadline is sent again.

Sits between the retry layer and the backend when a URL carries ``hedge=on``:
:func:`objectstore.open_object_store` builds
``RetryingStore(HedgingStore(LatencyStore(backend)))``. Why hedging goes *under*
retries: a hedge answers a slow attempt, a retry answers a failed one. Under
the retry layer the deadline is measured against single requests (a backoff
sleep never looks like a slow request), a throttled attempt goes back to the
retry layer's backoff instead of being doubled at once, and a hedge is at most
one extra request per attempt. Over it, a call sleeping in backoff after a 503
would be "slow" and fire a fresh request straight into the throttling store,
and both copies would retry on their own (up to twice ``max_attempts``). The
simulated latency sits under the hedge because a hedge is a second request
that pays its own draw.

Rules (the "tail at scale" hedged request, Dean & Barroso, CACM 2013):

* ``get`` (ranged too) and ``put`` are hedged; ``head``, ``delete_many``,
  ``list`` pass through.
* Deadline: the ``quantile`` (p95) of the last ``window`` primary latencies of
  the same op and size class (``small`` < ``large_bytes`` <= ``large``; a GET
  without an end is ``whole``), clamped to ``[floor_ms, ceiling_ms]``;
  ``initial_ms`` until ``min_samples`` are seen. One sample per successful
  call: the primary's latency, or, when the hedge won, the primary's age at
  that moment (a lower bound; it keeps the tail in the window).
* At most one hedge per call, paid from a token bucket that gains ``budget``
  tokens per call (up to ``burst``): hedges <= ``budget`` of calls over time,
  so a uniformly slow store is not hit twice as hard. ``Throttled`` empties it.
* The first success wins and the other copy is cancelled. A lost PUT race is
  harmless: keys are create-only and both copies carry the same bytes. An
  ``ObjectExists`` from one copy while the other is out usually means the
  other landed and its answer is the slow part, so we check at once whether
  the stored object is ours (HEAD and MD5 ETag, else compare the bytes, as
  :mod:`objectstore.retry` does for a lost response): ours is a success,
  someone else's an ``ObjectExists``. If neither copy succeeds, a retriable
  error is raised in preference to ``ObjectExists`` (the retry layer then
  checks ownership itself).
* A non-retriable error (``ObjectNotFound``, ``PermanentError``, ``ValueError``)
  is an answer and surfaces at once; a retriable one waits for the other copy.

URL options: ``hedge=on|off`` (default off) and ``hedge_<field>`` for each
:class:`HedgePolicy` field (``hedge_initial_ms=50&hedge_budget=0.1``).
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter, deque
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any, TypeVar

from objectstore.base import ObjectInfo, ObjectStore, StoreBase, holds, split_url_options
from objectstore.errors import ObjectExists, ObjectStoreError, Throttled

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class HedgePolicy:
    """When to send a second copy of a slow call, and how many to allow."""

    initial_ms: float = 100.0  # deadline before min_samples are seen
    floor_ms: float = 10.0
    ceiling_ms: float = 1000.0
    quantile: float = 0.95
    window: int = 256  # primary latencies kept per (op, size class)
    min_samples: int = 20
    budget: float = 0.05  # hedge tokens earned per call
    burst: float = 10.0  # token bucket capacity
    large_bytes: int = 1 << 20

    def __post_init__(self) -> None:
        if not (
            0 < self.floor_ms <= self.ceiling_ms
            and self.initial_ms > 0
            and 0 < self.quantile < 1
            and self.window >= 1
            and self.min_samples >= 1
            and 0 <= self.budget <= 1
            and self.burst >= 1
            and self.large_bytes >= 1
        ):
            raise ValueError(f"invalid hedge policy: {self}")


class LatencyWindow:
    """The last ``window`` latencies (seconds) of one op and size class, and their deadline."""

    def __init__(self, policy: HedgePolicy) -> None:
        self.policy = policy
        self.samples: deque[float] = deque(maxlen=policy.window)
        self._deadline: float | None = None

    def add(self, seconds: float) -> None:
        self.samples.append(seconds)
        self._deadline = None

    def deadline(self) -> float:
        """Seconds to wait for a primary before hedging it."""
        if self._deadline is None:
            p = self.policy
            if len(self.samples) < p.min_samples:
                ms = p.initial_ms
            else:
                ordered = sorted(self.samples)
                ms = ordered[min(len(ordered) - 1, int(p.quantile * len(ordered)))] * 1000
            self._deadline = min(p.ceiling_ms, max(p.floor_ms, ms)) / 1000
        return self._deadline


class HedgingStore(StoreBase):
    """Delegates to ``inner``, sending a second GET/PUT when the first is slow.

    ``clock`` (seconds) and ``sleep`` (the deadline timer) are injectable so
    tests drive time by hand; ``on_hedge(op, won)`` is called when a hedged call
    ends (metrics)."""

    def __init__(
        self,
        inner: ObjectStore,
        policy: HedgePolicy | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[object]] = asyncio.sleep,
        on_hedge: Callable[[str, bool], None] | None = None,
    ) -> None:
        self.inner = inner
        self.policy = policy or HedgePolicy()
        self._clock = clock
        self._sleep = sleep
        self._on_hedge = on_hedge
        self._windows: dict[tuple[str, str], LatencyWindow] = {}
        self._tokens = self.policy.burst
        self._background: set[asyncio.Future[Any]] = set()
        self.calls: Counter[str] = Counter()
        self.hedges: Counter[str] = Counter()
        self.hedges_won: Counter[str] = Counter()
        self.hedges_denied: Counter[str] = Counter()  # deadline passed, bucket empty

    def __repr__(self) -> str:
        return f"HedgingStore({self.inner!r})"

    def window(self, op: str, size_class: str) -> LatencyWindow:
        w = self._windows.get((op, size_class))
        if w is None:
            w = self._windows[(op, size_class)] = LatencyWindow(self.policy)
        return w

    def stats(self) -> dict[str, Any]:
        """Counters per op, hedges per 1,000 calls and the current deadlines (ms)."""
        total = sum(self.calls.values())
        return {
            "calls": dict(self.calls),
            "hedges": dict(self.hedges),
            "hedges_won": dict(self.hedges_won),
            "hedges_denied": dict(self.hedges_denied),
            "hedges_per_1000": 1000 * sum(self.hedges.values()) / total if total else 0.0,
            "deadline_ms": {f"{op}/{c}": w.deadline() * 1000 for (op, c), w in self._windows.items()},
        }

    def _size_class(self, nbytes: int | None) -> str:
        if nbytes is None:
            return "whole"
        return "large" if nbytes >= self.policy.large_bytes else "small"

    def _spawn(self, coro: Awaitable[T]) -> asyncio.Future[T]:
        task = asyncio.ensure_future(coro)
        self._background.add(task)
        task.add_done_callback(self._reap)
        return task

    def _reap(self, task: asyncio.Future[Any]) -> None:
        self._background.discard(task)
        if not task.cancelled():
            task.exception()  # retrieved: a cancelled loser's late error is not "never retrieved"

    async def _hedged(
        self,
        op: str,
        size_class: str,
        call: Callable[[], Awaitable[T]],
        confirm: Callable[[], Awaitable[bool]] | None = None,
    ) -> T | None:
        p = self.policy
        self.calls[op] += 1
        self._tokens = min(p.burst, self._tokens + p.budget)
        window = self.window(op, size_class)
        t0 = self._clock()
        primary = self._spawn(call())
        timer = self._spawn(self._sleep(window.deadline()))
        hedge: asyncio.Future[T] | None = None
        try:
            first: set[asyncio.Future[Any]] = {primary, timer}
            done, _ = await asyncio.wait(first, return_when=asyncio.FIRST_COMPLETED)
            if primary in done or self._tokens < 1:
                if primary not in done:
                    self.hedges_denied[op] += 1
                result = await primary
                window.add(self._clock() - t0)
                return result
            self._tokens -= 1
            self.hedges[op] += 1
            hedge = self._spawn(call())
            answer, winner = await self._race(primary, hedge, confirm)
            # The primary's latency, or its age if the hedge won (a lower bound).
            window.add(self._clock() - t0)
            if winner is not primary:
                self.hedges_won[op] += 1
            if self._on_hedge is not None:
                self._on_hedge(op, winner is not primary)
            return answer
        finally:
            for left in (primary, timer, hedge):
                if left is not None and not left.done():
                    left.cancel()

    async def _race(
        self,
        primary: asyncio.Future[Any],
        hedge: asyncio.Future[Any],
        confirm: Callable[[], Awaitable[bool]] | None,
    ) -> tuple[Any, asyncio.Future[Any]]:
        """The first success of two copies (or a confirmed PUT), and who gave it."""
        pending: set[asyncio.Future[Any]] = {primary, hedge}
        check: asyncio.Future[bool] | None = None
        errors: list[BaseException] = []
        try:
            while pending:
                done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
                for task in (primary, hedge, check):
                    if task is None or task not in done:
                        continue
                    exc = task.exception()
                    if task is check:
                        if exc is None and check.result():
                            return None, check  # the other copy's PUT landed: ours
                        if exc is None:  # someone else's object: a real conflict
                            raise next(e for e in errors if isinstance(e, ObjectExists))
                        errors.append(exc)
                    elif exc is None:
                        return task.result(), task
                    elif isinstance(exc, ObjectExists):
                        # Maybe the other copy landed first: check instead of waiting for it.
                        errors.append(exc)
                        if confirm is not None and check is None:
                            check = self._spawn(confirm())
                            pending.add(check)
                    elif isinstance(exc, ObjectStoreError) and exc.retriable:
                        if isinstance(exc, Throttled):
                            self._tokens = 0.0  # do not hedge into a store asking us to slow down
                        errors.append(exc)
                    else:
                        raise exc  # an answer (not found, permanent, invalid): the same for both
            # Nothing succeeded. A retriable error first: the PUT may have landed, and
            # the retry layer then checks whether the object is ours.
            raise next((e for e in errors if not isinstance(e, ObjectExists)), errors[0])
        finally:
            if check is not None and not check.done():
                check.cancel()

    async def put(self, key: str, data: bytes | memoryview) -> None:
        size_class = self._size_class(memoryview(data).nbytes)
        await self._hedged(
            "put", size_class, lambda: self.inner.put(key, data), lambda: holds(self.inner, key, data)
        )

    async def get(self, key: str, start: int | None = None, end: int | None = None) -> bytes:
        nbytes = None if end is None else max(0, end - (start or 0))
        data = await self._hedged("get", self._size_class(nbytes), lambda: self.inner.get(key, start, end))
        assert data is not None  # only a confirmed PUT answers None
        return data

    async def head(self, key: str) -> ObjectInfo:
        return await self.inner.head(key)

    async def delete_many(self, keys: Sequence[str]) -> None:
        await self.inner.delete_many(keys)

    def list(self, prefix: str = "", *, start_after: str | None = None) -> AsyncIterator[ObjectInfo]:
        return self.inner.list(prefix, start_after=start_after)

    async def close(self) -> None:
        for task in list(self._background):
            task.cancel()
        if self._background:
            await asyncio.wait(list(self._background))
        await self.inner.close()


def split_hedge_url(url: str, opts: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
    """Remove the ``hedge*`` options from ``url``'s query and from ``opts`` (in place):
    :func:`objectstore.base.split_url_options`."""
    return split_url_options(url, "hedge", opts)


_FIELDS = {f.name: f.type for f in fields(HedgePolicy)}


def parse_hedge(options: Mapping[str, Any], *, default: bool = False) -> HedgePolicy | None:
    """``hedge=``/``hedge_*`` options -> a policy, or None when hedging is off."""
    raw = options.get("hedge", default)
    on = raw if isinstance(raw, bool) else str(raw).strip().lower()
    if on not in (True, False, "on", "off", "true", "false", "1", "0", "yes", "no"):
        raise ValueError(f"hedge={raw!r}: expected on or off")
    values: dict[str, Any] = {}
    for key, value in options.items():
        if key == "hedge":
            continue
        name = key.removeprefix("hedge_")
        if name not in _FIELDS:
            raise ValueError(f"unknown hedge option {key!r} (hedge, " + ", ".join(f"hedge_{n}" for n in _FIELDS) + ")")
        try:
            values[name] = int(value) if _FIELDS[name] == "int" else float(value)
        except (TypeError, ValueError):
            raise ValueError(f"{key}={value!r} is not a number") from None
    policy = HedgePolicy(**values)  # validates even when off: a typo fails at startup
    return policy if on in (True, "on", "true", "1", "yes") else None
