"""The produce pipeline's byte budget: back-pressure instead of a growing heap.

Where it sits: the produce handler reserves a request's bytes
(:meth:`ProducePipeline.reserve <agent.produce.pipeline.ProducePipeline.reserve>`)
before appending it, and the ack step releases them once the request is answered.
A request over the budget waits instead of growing the heap.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque


class ByteBudget:
    """Bytes of produce data admitted but not yet acknowledged.

    Waiters are served first come, first served; with room and nobody waiting,
    :meth:`try_acquire` admits without a coroutine (the common case)."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.used = 0
        self._waiters: deque[tuple[int, asyncio.Future[None]]] = deque()

    def _fits(self, n: int) -> bool:
        # An oversized request is admitted alone so it cannot wait forever.
        return self.used == 0 or self.used + n <= self.capacity

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
