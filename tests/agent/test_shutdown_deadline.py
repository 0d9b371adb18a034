"""The exit deadline of a shutdown (agent.server.arm_exit_deadline, issue 43)."""

from __future__ import annotations

import threading

from agent.server import EXIT_FORCED, arm_exit_deadline


def test_deadline_exits_with_the_forced_status() -> None:
    fired: list[int] = []
    done = threading.Event()

    def hard_exit(code: int) -> None:
        fired.append(code)
        done.set()

    timer = arm_exit_deadline(0.05, hard_exit)
    assert timer.daemon  # never keeps the interpreter alive on its own
    assert done.wait(10)
    assert fired == [EXIT_FORCED]


def test_cancelled_deadline_does_not_fire() -> None:
    fired: list[int] = []
    timer = arm_exit_deadline(30, fired.append)
    timer.cancel()
    timer.join(10)
    assert not timer.is_alive() and fired == []
