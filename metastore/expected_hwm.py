"""The high watermarks a Postgres sequencer expects its next group to find.

Where it sits: inside ``PostgresMetastore.commit_objects`` (the process that
runs the group commit: an agent, or ``floe metastore serve`` for many agents).
When every partition a group touches has an expected high watermark here, the
group is committed optimistically (migration 0014): its batch rows are COPYed
at those offsets *before* any partition lock is taken, so the COPY overlaps the
previous group's commit, and ``floe_group_seal`` then checks the expectation
under the locks. The expectation is advanced as soon as the group is planned
(before any await), so the next group can be planned while this one commits.

It is only a hint: a wrong value (another agent wrote directly, a group failed,
a transaction marker went through another path) makes the seal decline and the
group is committed the ordinary way, after which the entries are learnt again.
A partition committed by an ordinary group still in flight has no entry (its
outcome is not known yet). After a miss, optimism pauses for a growing number
of groups (several agents writing the same partitions directly would otherwise
pay a wasted COPY on most commits).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence

Key = tuple[int, int]  # (topic id as int, partition): UUID hashing is Python code

MAX_PAUSE = 64


class ExpectedWatermarks:
    def __init__(self) -> None:
        self._hwm: dict[Key, int] = {}
        self._busy: dict[Key, int] = {}  # ordinary groups in flight per partition
        self._pause = 0  # groups to commit the ordinary way before trying again
        self._misses = 0
        self._waiters: list[asyncio.Event] = []  # settle() calls, woken by release()
        # counters (tests, benchmarks)
        self.hits = 0
        self.declined = 0

    def plan(self, keys: Sequence[Key], sizes: Sequence[int]) -> list[int] | None:
        """The expected high watermarks (and advance them by ``sizes``), or ``None``
        when the group must go the ordinary way; then the caller must call
        :meth:`release` for the same keys when it is done."""
        hwm = self._hwm
        if self._pause:
            self._pause -= 1
        else:
            try:
                expected = [hwm[k] for k in keys]
            except KeyError:
                pass
            else:
                for k, e, s in zip(keys, expected, sizes, strict=True):
                    hwm[k] = e + s
                return expected
        busy = self._busy
        for k in keys:
            hwm.pop(k, None)
            busy[k] = busy.get(k, 0) + 1
        return None

    async def settle(self, keys: Sequence[Key], wait_s: float) -> None:
        """Wait (at most ``wait_s``) while an ordinary group in flight touches one
        of ``keys`` that has no expectation: its outcome teaches it. Without this, two
        groups in flight on the same partitions would keep each other ordinary for
        ever (each marks the partitions busy while the other learns them)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait_s
        hwm, busy = self._hwm, self._busy
        while busy and not self._pause and any(k in busy and k not in hwm for k in keys):
            remaining = deadline - loop.time()
            if remaining <= 0:
                return
            released = asyncio.Event()
            self._waiters.append(released)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(released.wait(), remaining)

    def release(self, keys: Sequence[Key], before: Sequence[int] | None, sizes: Sequence[int]) -> None:
        """An ordinary group is done: ``before`` are the high watermarks it found if
        every batch was accepted at them (its fast path), else ``None``."""
        hwm, busy = self._hwm, self._busy
        for i, k in enumerate(keys):
            left = busy.get(k, 1) - 1
            if left > 0:
                busy[k] = left
                continue
            busy.pop(k, None)
            if before is not None:
                hwm[k] = before[i] + sizes[i]
        waiters, self._waiters = self._waiters, []
        for released in waiters:
            released.set()

    def hit(self) -> None:
        self.hits += 1
        self._misses = 0

    def miss(self, keys: Sequence[Key]) -> None:
        """The seal declined (or the optimistic attempt failed): forget ``keys``
        and pause optimism for a while."""
        self.declined += 1
        self.forget(keys)
        self._misses += 1
        self._pause = min(MAX_PAUSE, 1 << min(self._misses, 6))

    def forget(self, keys: Sequence[Key]) -> None:
        """A commit outside this bookkeeping touched ``keys``."""
        for k in keys:
            self._hwm.pop(k, None)
