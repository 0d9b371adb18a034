"""The group timers' driver ends when stopped, whatever it was doing (agent/groups/timers.py).

A CI run hung in ``Broker.close()``: ``Timers.stop()`` cancelled the driver task
just as a schedule() had woken it. The driver slept in ``asyncio.wait_for``,
which on Python 3.11 returns the inner result instead of raising when a cancel
arrives after the inner wait finished but before wait_for resumed (bpo-42130),
so the driver went round its loop again and ``stop()`` waited forever. Here the
cancel lands at each point of a wake-up in turn: 0-5 event-loop turns after
the wake, each on a fresh driver.
"""

from __future__ import annotations

import asyncio

import pytest

from agent.clock import ManualClock
from agent.groups.timers import Timers


@pytest.mark.parametrize("turns", range(6))
async def test_stop_ends_the_driver_woken_at_any_moment(turns: int) -> None:
    timers = Timers(ManualClock())
    timers.schedule("far", 3600, lambda: None)
    timers.start()
    for _ in range(3):
        await asyncio.sleep(0)  # the driver is waiting for the far deadline
    timers.schedule("near", 1800, lambda: None)  # an earlier deadline wakes it
    for _ in range(turns):
        await asyncio.sleep(0)
    driver = timers._task
    assert driver is not None
    stopping = asyncio.ensure_future(timers.stop())
    done, _ = await asyncio.wait([driver], timeout=10)
    assert driver in done, "the driver went on after stop()"
    await stopping
    assert timers._task is None
