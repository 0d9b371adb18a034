"""Fault hooks for tests and benchmarks: make this agent slow on purpose.

Where it sits: :class:`~agent.server.AgentServer` wraps its Kafka dispatcher
with :func:`wrap_dispatch` when ``debug_faults`` (``FLOE_DEBUG_FAULTS``) is on,
and serves ``POST /debug/delay?ms=N`` on the admin port. From then on every
request this agent serves (Kafka connections, the peer relay ``/kafka`` and the
peer probe ``/kafka/probe`` of :mod:`agent.cluster.isolation`, all of which run
through that dispatcher) is answered ``N`` ms later than it would have been:
the handler runs as usual, the delay is added after it and before the response
is written. Requests on one connection are still pipelined (each waits on its
own), so the agent stays correct, only slow -- the fault issue 43's slow-agent
isolation is measured against. ``ms=0`` turns it off.

Off by default: without ``debug_faults`` nothing is wrapped and the route
answers 404, so a production agent cannot be slowed through its admin port.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from agent.connection import Deferred

log = logging.getLogger(__name__)

MAX_DELAY_MS = 600_000

Dispatch = Callable[..., Awaitable[Any]]


class Faults:
    """The faults currently injected into this agent (one per agent)."""

    def __init__(self) -> None:
        self.delay_ms = 0
        self.delayed = 0  # requests answered late on purpose

    def set_delay(self, ms: int) -> None:
        if ms != self.delay_ms:
            log.warning(
                "debug fault: every request answered %d ms late (was %d ms)", ms, self.delay_ms
            )
        self.delay_ms = ms


def wrap_dispatch(dispatch: Dispatch, faults: Faults) -> Dispatch:
    """``dispatch`` with ``faults.delay_ms`` added to every response (see module docstring)."""

    async def late(result: Any, delay_s: float) -> Any:
        if isinstance(result, Deferred):
            result = await result.awaitable
        await asyncio.sleep(delay_s)
        return result

    async def dispatch_with_faults(*args: Any, **kwargs: Any) -> Any:
        result = await dispatch(*args, **kwargs)
        if faults.delay_ms <= 0:
            return result
        faults.delayed += 1
        # A task, started now: pipelined requests of one connection wait side by side
        # (responses still leave in order), not one after the other.
        return Deferred(asyncio.ensure_future(late(result, faults.delay_ms / 1000)))

    return dispatch_with_faults


def add_fault_routes(app: web.Application, faults: Faults, *, enabled: bool) -> None:
    """``POST /debug/delay?ms=N`` (``GET`` reads it); 404 unless ``enabled``."""

    async def delay(request: web.Request) -> web.Response:
        if not enabled:
            raise web.HTTPNotFound(text="debug faults are off (FLOE_DEBUG_FAULTS)")
        if request.method == "POST":
            try:
                ms = int(request.query.get("ms", ""))
            except ValueError:
                raise web.HTTPBadRequest(text="ms=<milliseconds> expected") from None
            if not 0 <= ms <= MAX_DELAY_MS:
                raise web.HTTPBadRequest(text=f"ms must be within 0..{MAX_DELAY_MS}")
            faults.set_delay(ms)
        return web.json_response({"delay_ms": faults.delay_ms, "delayed": faults.delayed})

    app.router.add_route("*", "/debug/delay", delay)
