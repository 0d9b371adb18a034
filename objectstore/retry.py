"""Retries with exponential backoff and full jitter around any ``ObjectStore``.

Sits between the callers (uploader, fetch cache, compactor) and a backend:
``open_object_store`` wraps every store in a :class:`RetryingStore` by default.
Only :class:`Throttled` and :class:`TransientError` are retried;
``ObjectExists``/``ObjectNotFound``/``PermanentError`` surface at once.

Delay before retry *n* (1-based) is ``uniform(0, min(max_delay, base_delay *
multiplier**(n-1)))`` — "full jitter" (AWS Architecture Blog, "Exponential
Backoff And Jitter"), which spreads a herd of agents throttled together.
``sleep`` and ``random`` are injectable so tests never really sleep.

The lost-response PUT: a create-only PUT may reach S3 and be stored while its
response is lost (timeout, reset connection). Our retry then gets 412 →
``ObjectExists`` for an object *we* wrote. So when a PUT fails with
``ObjectExists`` after an earlier attempt of the *same call* failed with a
retriable error, we check whether the stored object is our data: same size,
and either its ETag equals the MD5 of our bytes (S3 single-part PUT without
SSE-KMS) or, failing that, a full GET compares equal. If it is ours the PUT
succeeded; if not, another writer owns the key and ``ObjectExists`` is raised.
A first-attempt ``ObjectExists`` is always a real conflict.
"""

from __future__ import annotations

import asyncio
import logging
import random as _random
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from objectstore.base import ObjectInfo, ObjectStore, StoreBase, holds
from objectstore.errors import ObjectExists, ObjectStoreError

log = logging.getLogger(__name__)

T = TypeVar("T")
OnRetry = Callable[[str, int, ObjectStoreError, float], None]


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How many times and how patiently to retry one store call.

    ``max_attempts`` counts the first try (1 disables retries). Defaults give
    retries after at most 0.05, 0.1, 0.2, 0.4, 0.8 s (about 1.5 s worst case).
    """

    max_attempts: int = 6
    base_delay: float = 0.05
    max_delay: float = 5.0
    multiplier: float = 2.0

    def __post_init__(self) -> None:
        if (
            self.max_attempts < 1
            or self.base_delay < 0
            or self.max_delay < 0
            or self.multiplier < 1
        ):
            raise ValueError(f"invalid retry policy: {self}")

    def cap(self, retry: int) -> float:
        """Upper bound of the delay before retry number ``retry`` (1-based)."""
        return min(self.max_delay, self.base_delay * self.multiplier ** (retry - 1))


class RetryingStore(StoreBase):
    """An ``ObjectStore`` that retries throttling and transient failures of ``inner``."""

    def __init__(
        self,
        inner: ObjectStore,
        policy: RetryPolicy | None = None,
        *,
        sleep: Callable[[float], Awaitable[object]] = asyncio.sleep,
        random: Callable[[], float] = _random.random,
        on_retry: OnRetry | None = None,
    ) -> None:
        self.inner = inner
        self.policy = policy or RetryPolicy()
        self._sleep = sleep
        self._random = random
        self._on_retry = on_retry

    def __repr__(self) -> str:
        return f"RetryingStore({self.inner!r}, {self.policy})"

    async def _backoff(self, op: str, attempt: int, err: ObjectStoreError) -> None:
        """Sleep before the next attempt, or re-raise ``err`` if out of attempts."""
        if not err.retriable or attempt >= self.policy.max_attempts:
            raise err
        delay = self._random() * self.policy.cap(attempt)
        log.debug("%s %s failed (%s), retry %d in %.3fs", op, err.key, err, attempt, delay)
        if self._on_retry is not None:
            self._on_retry(op, attempt, err, delay)
        await self._sleep(delay)

    async def _call(self, op: str, fn: Callable[[], Awaitable[T]]) -> T:
        attempt = 0
        while True:
            attempt += 1
            try:
                return await fn()
            except ObjectStoreError as e:
                await self._backoff(op, attempt, e)

    async def put(self, key: str, data: bytes | memoryview) -> None:
        ambiguous = False  # an earlier attempt may have stored the object
        attempt = 0
        while True:
            attempt += 1
            try:
                await self.inner.put(key, data)
                return
            except ObjectExists:
                if ambiguous and await self._is_ours(key, data):
                    log.info("put %s: response was lost but the object is ours", key)
                    return
                raise
            except ObjectStoreError as e:
                ambiguous = ambiguous or e.retriable
                await self._backoff("put", attempt, e)

    async def _is_ours(self, key: str, data: bytes | memoryview) -> bool:
        return await holds(self, key, data)  # its head and get retried like any call

    async def get(self, key: str, start: int | None = None, end: int | None = None) -> bytes:
        return await self._call("get", lambda: self.inner.get(key, start, end))

    async def head(self, key: str) -> ObjectInfo:
        return await self._call("head", lambda: self.inner.head(key))

    async def delete_many(self, keys: Sequence[str]) -> None:
        # Idempotent: deleting an already-deleted key is ignored by contract.
        await self._call("delete_many", lambda: self.inner.delete_many(keys))

    async def list(
        self, prefix: str = "", *, start_after: str | None = None
    ) -> AsyncIterator[ObjectInfo]:
        # Resume after the last key handed out, so a retry never repeats or skips.
        last = start_after
        attempt = 0
        while True:
            attempt += 1
            try:
                async for info in self.inner.list(prefix, start_after=last):
                    yield info
                    last = info.key
                    attempt = 1  # progress resets the budget
                return
            except ObjectStoreError as e:
                await self._backoff("list", attempt, e)

    async def close(self) -> None:
        await self.inner.close()
