"""Deadlines of the group coordinator (session expiry, rebalance timeout, join delay).

A keyed timer heap on the injectable clock. Scheduling a key again replaces its
deadline (a heartbeat pushes the session deadline back); cancelled and replaced
entries stay in the heap and are skipped when they surface. In production a
driver task waits for a wake-up event, set by a new earliest deadline or by a
``call_later`` at the next deadline, and runs what is due; unit tests skip the
driver, move a ``ManualClock`` and call :meth:`Timers.run_due` themselves, so
the state machine is tested without sleeps.
Callbacks are synchronous: they only change in-memory state.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import logging
from collections.abc import Callable, Hashable

from agent.clock import Clock
from agent.tasks import cancel_and_wait

log = logging.getLogger(__name__)


class Timers:
    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self._heap: list[tuple[float, int, Hashable]] = []
        self._live: dict[Hashable, tuple[float, int, Callable[[], None]]] = {}
        self._seq = itertools.count()
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def schedule(self, key: Hashable, delay_s: float, callback: Callable[[], None]) -> None:
        """Run ``callback`` ``delay_s`` seconds from now, replacing ``key``'s deadline."""
        deadline = self._clock.monotonic() + max(0.0, delay_s)
        seq = next(self._seq)
        self._live[key] = (deadline, seq, callback)
        heapq.heappush(self._heap, (deadline, seq, key))
        if self._heap[0][1] == seq:
            self._wake.set()

    def cancel(self, key: Hashable) -> None:
        self._live.pop(key, None)

    def cancel_where(self, match: Callable[[Hashable], bool]) -> None:
        """Cancel every key ``match`` accepts (a group's timers when it is dropped)."""
        for key in [k for k in self._live if match(k)]:
            del self._live[key]

    def is_scheduled(self, key: Hashable) -> bool:
        return key in self._live

    def deadline(self, key: Hashable) -> float | None:
        entry = self._live.get(key)
        return entry[0] if entry is not None else None

    def next_deadline(self) -> float | None:
        heap = self._heap
        while heap:
            deadline, seq, key = heap[0]
            entry = self._live.get(key)
            if entry is not None and entry[1] == seq:
                return deadline
            heapq.heappop(heap)  # cancelled or replaced
        return None

    def run_due(self) -> int:
        """Run every callback whose deadline has passed; returns how many ran."""
        ran = 0
        while True:
            deadline = self.next_deadline()
            if deadline is None or deadline > self._clock.monotonic():
                return ran
            _, _, key = heapq.heappop(self._heap)
            _, _, callback = self._live.pop(key)
            ran += 1
            try:
                callback()
            except Exception:
                log.exception("group timer %r failed", key)

    # -- driver -------------------------------------------------------------------

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._drive(), name="group-timers")

    async def stop(self) -> None:
        await cancel_and_wait(self._task)
        self._task = None

    async def _drive(self) -> None:
        # The next deadline sets the wake-up event itself; no asyncio.wait_for:
        # on Python 3.11 it returns instead of raising when a cancel arrives just
        # after the event was set (bpo-42130), and this loop then outlived stop().
        loop = asyncio.get_running_loop()
        while True:
            self._wake.clear()
            deadline = self.next_deadline()
            delay = None if deadline is None else deadline - self._clock.monotonic()
            if delay is None or delay > 0:
                alarm = None if delay is None else loop.call_later(delay, self._wake.set)
                try:
                    await self._wake.wait()
                finally:
                    if alarm is not None:
                        alarm.cancel()
            self.run_due()
