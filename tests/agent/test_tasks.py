"""cancel_and_wait: a background task's cancellation is swallowed, the caller's is not."""

from __future__ import annotations

import asyncio

import pytest

from agent.clock import ManualClock
from agent.groups.timers import Timers
from agent.tasks import cancel_and_wait


def _slow_to_stop(release: asyncio.Event, ended: list[str]) -> asyncio.Task[None]:
    """A task whose cleanup, once cancelled, waits for ``release``."""

    async def run() -> None:
        try:
            await asyncio.Event().wait()
        finally:
            await release.wait()
            ended.append("task")

    return asyncio.get_running_loop().create_task(run())


async def test_the_tasks_cancellation_is_swallowed() -> None:
    release, ended = asyncio.Event(), list[str]()
    task = _slow_to_stop(release, ended)
    await asyncio.sleep(0)  # the task is parked on its event
    release.set()
    await cancel_and_wait(task, None)
    assert task.cancelled() and ended == ["task"]


async def test_a_cancel_of_the_caller_while_it_waits_is_raised() -> None:
    """The stop is cancelled while the task cleans up: the caller ends cancelled
    (before: it returned normally and went on), and only after the task ended."""
    release, ended = asyncio.Event(), list[str]()
    task = _slow_to_stop(release, ended)
    await asyncio.sleep(0)

    async def stopper() -> None:
        await cancel_and_wait(task)
        ended.append("stopper went on")

    stop = asyncio.get_running_loop().create_task(stopper())
    await asyncio.sleep(0)  # stopper waits for the task's cleanup
    stop.cancel()
    await asyncio.sleep(0)
    assert not stop.done()  # still waiting for the task to end
    release.set()
    with pytest.raises(asyncio.CancelledError):
        await stop
    assert ended == ["task"]


async def test_cleanup_run_because_the_caller_was_cancelled_completes() -> None:
    """``except CancelledError: await close(); raise``: the cancel that started the
    cleanup is not raised again inside it, so every task is stopped."""
    release, ended = asyncio.Event(), list[str]()
    first, second = _slow_to_stop(release, ended), _slow_to_stop(release, ended)
    release.set()

    async def serve() -> None:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            await cancel_and_wait(first)
            await cancel_and_wait(second)
            ended.append("closed")
            raise

    server = asyncio.get_running_loop().create_task(serve())
    await asyncio.sleep(0)
    server.cancel()
    with pytest.raises(asyncio.CancelledError):
        await server
    assert ended == ["task", "task", "closed"]


async def test_swallowed_and_other_exceptions() -> None:
    async def fails(exc: BaseException) -> None:
        try:
            await asyncio.Event().wait()
        finally:
            raise exc

    quiet = asyncio.get_running_loop().create_task(fails(OSError("listen socket gone")))
    await asyncio.sleep(0)
    await cancel_and_wait(quiet, swallow=(OSError,))
    loud = asyncio.get_running_loop().create_task(fails(KeyError("bug")))
    await asyncio.sleep(0)
    with pytest.raises(KeyError):
        await cancel_and_wait(loud, swallow=(OSError,))


async def test_timers_stop_passes_on_a_cancel_aimed_at_its_caller() -> None:
    """A component's stop() (the group timers) no longer swallows the cancel of
    the task that called it."""
    timers = Timers(ManualClock())
    timers.start()
    await asyncio.sleep(0)
    gate = asyncio.Event()

    async def stop_then_more() -> str:
        await timers.stop()
        await gate.wait()  # a cancel swallowed by stop() would leave us parked here
        return "went on"

    stopping = asyncio.get_running_loop().create_task(stop_then_more())
    await asyncio.sleep(0)  # stop() has cancelled the timers' task and waits for it
    stopping.cancel()
    for _ in range(5):
        await asyncio.sleep(0)
    assert stopping.cancelled()  # not parked on the gate
    gate.set()
