"""Stopping an agent's background tasks without swallowing a cancel aimed at the caller.

Where it sits: under every part of the agent that runs a background task
(membership heartbeat, commit wake-ups, group timers, health, quotas, ACL
refresh, EMF metrics, the transaction checker) and stops it in its
``stop()``/``close()``, which the server's shutdown awaits.

Why: the usual ``task.cancel(); with suppress(CancelledError): await task``
cannot tell the task's own cancellation from one aimed at the caller while it
waits. A shutdown that was itself cancelled (a second SIGTERM, a test's
timeout, ``asyncio.wait_for`` around a stop) then carried on as if nothing had
happened. :func:`cancel_and_wait` swallows the task's cancellation and re-raises
the caller's (``Task.cancelling()``, Python 3.11+).
"""

from __future__ import annotations

import asyncio
from typing import Any


async def cancel_and_wait(
    *tasks: asyncio.Future[Any] | None, swallow: tuple[type[BaseException], ...] = ()
) -> None:
    """Cancel ``tasks`` (None entries are skipped) and wait until each has ended.

    Their cancellation is expected and swallowed, and so are the exceptions in
    ``swallow`` they end with. A cancel of the calling task that arrives while it
    waits is raised once every task has ended. One that arrived before the call
    is not raised again: cleanup that runs *because* the caller was cancelled
    (``except CancelledError: await close(); raise``) must run to its end, which
    is why the count of cancel requests is compared, as ``asyncio.timeout`` does."""
    me = asyncio.current_task()
    before = me.cancelling() if me is not None else 0
    live = [t for t in tasks if t is not None]
    expected: tuple[type[BaseException], ...] = (asyncio.CancelledError, *swallow)
    for t in live:
        t.cancel()
    for t in live:
        try:
            await t
        except expected:
            pass
    if me is not None and me.cancelling() > before:
        raise asyncio.CancelledError
