"""The produce pipeline's byte budget, and the one memory budget it shares with responses.

Where it sits: the produce handler admits a request's bytes
(:mod:`agent.produce.admission`: at once, after a short grace wait, or not at
all: a retriable error) before appending it, and the ack step releases them once
the request is answered. :func:`share` ties this budget to the connections'
:class:`~agent.security.limits.ResponseBudget` (unread responses, planned Fetch
bytes, request frames being received) under one ``memory_budget_bytes`` per
agent process: produce is admitted only while produce + responses stay under
it, and a Fetch is planned into what produce leaves. Each side keeps its own
cap (``max_buffered_bytes``, ``queued_max_request_bytes``).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import Callable
from typing import Protocol


class ByteBudget:
    """Bytes of produce data admitted but not yet acknowledged.

    Waiters are served first come, first served; with room and nobody waiting,
    :meth:`try_acquire` admits without a coroutine (the common case)."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.used = 0
        self._waiters: deque[tuple[int, asyncio.Future[None]]] = deque()
        # The shared budget (see :func:`share`): total, and the bytes held by the other side.
        self.total: int | None = None
        self._others: Callable[[], int] = _nothing

    def _fits(self, n: int) -> bool:
        # An oversized request is admitted alone so it cannot wait forever.
        if self.used == 0:
            return True
        if self.used + n > self.capacity:
            return False
        return self.total is None or self.used + n + self._others() <= self.total

    def try_acquire(self, n: int) -> bool:
        if not self._waiters and self._fits(n):
            self.used += n
            return True
        return False

    async def acquire(self, n: int) -> None:
        if self.try_acquire(n):
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append((n, fut))
        try:
            await fut
        except asyncio.CancelledError:
            if fut.done() and not fut.cancelled():
                self.release_nowait(n)  # granted as we were cancelled: give it back
            else:
                with contextlib.suppress(ValueError):
                    self._waiters.remove((n, fut))
                self._wake()
            raise

    def release_nowait(self, n: int) -> None:
        self.used -= n
        self._wake()

    def _wake(self) -> None:
        while self._waiters:
            n, fut = self._waiters[0]
            if fut.done():
                self._waiters.popleft()
                continue
            if not self._fits(n):
                return
            self._waiters.popleft()
            self.used += n
            fut.set_result(None)

    async def release(self, n: int) -> None:
        self.release_nowait(n)


def _nothing() -> int:
    return 0


class SharedSide(Protocol):
    """The response side of the shared budget (:class:`~agent.security.limits.ResponseBudget`)."""

    used: int

    def share(self, total: int, others: Callable[[], int]) -> None: ...


def share(produce: ByteBudget, responses: SharedSide, total: int) -> None:
    """Put ``produce`` and ``responses`` under one budget of ``total`` bytes: each
    side sees what the other holds. Called once per agent process (the server)."""
    produce.total = total
    produce._others = lambda: responses.used
    responses.share(total, lambda: produce.used)
