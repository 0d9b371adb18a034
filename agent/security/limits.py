"""Limits no client can exceed (issue 15): connection counts, deadlines, unread responses.

Where it sits: owned by :class:`~agent.server.AgentServer`, consulted by every
:class:`~agent.connection.KafkaConnection`:

* :class:`ConnectionLimits` — ``max_connections`` and ``max_connections_per_ip``
  (Kafka's ``max.connections`` / ``max.connections.per.ip``): a connection over
  either is closed as soon as it is accepted, before it costs a buffer or a task.
* :class:`ResponseBudget` — ``queued_max_request_bytes``: bytes of responses
  handed to the transports but not yet taken by their (slow or non-reading)
  clients, all connections together. A connection whose client does not read
  gets nothing more built or read for it (one response at most, itself capped
  by ``fetch_max_bytes``); a Fetch is built to at most what is left of the
  budget (at least one batch, KIP-74), so clients that ask for huge fetches and
  never read leave the budget plus a batch each, and other clients keep being
  served with smaller responses; a connection whose responses stay unread for
  ``request_timeout_ms`` while the budget is exceeded is closed.
* :class:`DeadlineSweeper` — one task for all connections: closes those idle for
  ``connections_max_idle_ms`` and those that started a request and did not
  finish sending it within ``request_timeout_ms`` (a slowloris holding a
  partial frame). The clock is injected; :meth:`DeadlineSweeper.sweep` is the
  whole policy and is tested without waiting.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from collections.abc import Callable, Iterable
from typing import Protocol

from prometheus_client import Counter as PromCounter

from agent.metrics import METRICS
from agent.tasks import cancel_and_wait

log = logging.getLogger(__name__)

REFUSED = PromCounter(
    "floe_connections_refused",
    "Kafka connections closed at accept: max_connections or max_connections_per_ip reached",
    ["reason"],
    registry=METRICS.registry,
)
EXPIRED = PromCounter(
    "floe_connections_expired",
    "Kafka connections closed by a deadline: idle (connections_max_idle_ms) or partial request (request_timeout_ms)",
    ["reason"],
    registry=METRICS.registry,
)


class ConnectionLimits:
    """Open connections, in total and per client address."""

    def __init__(
        self, max_connections: int, max_per_ip: int, *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.max_connections = max_connections
        self.max_per_ip = max_per_ip
        self.total = 0
        self.per_ip: Counter[str] = Counter()
        self._clock = clock
        self._last_log = -1e9
        self._refused_since_log = 0

    def admit(self, ip: str) -> bool:
        reason = None
        if self.total >= self.max_connections:
            reason = "max_connections"
        elif self.per_ip[ip] >= self.max_per_ip:
            reason = "max_connections_per_ip"
        if reason is not None:
            REFUSED.labels(reason).inc()
            self._refused(ip, reason)
            return False
        self.total += 1
        self.per_ip[ip] += 1
        return True

    def release(self, ip: str) -> None:
        self.total -= 1
        self.per_ip[ip] -= 1
        if self.per_ip[ip] <= 0:
            del self.per_ip[ip]

    def _refused(self, ip: str, reason: str) -> None:
        # One line per 10 s, not one per refused connection of a flood.
        self._refused_since_log += 1
        now = self._clock()
        if now - self._last_log >= 10.0:
            log.warning(
                "refusing connections: %s reached (%d open, %d from %s; %d refused since the last line)",
                reason, self.total, self.per_ip[ip], ip, self._refused_since_log,
            )  # fmt: skip
            self._last_log = now
            self._refused_since_log = 0


class ResponseBudget:
    """Bytes of written-but-unread responses over all connections."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.used = 0

    def add(self, n: int) -> None:
        self.used += n

    def sub(self, n: int) -> None:
        self.used -= n

    @property
    def exceeded(self) -> bool:
        return self.used > self.capacity

    def available(self) -> int:
        return max(0, self.capacity - self.used)


class Expirable(Protocol):
    def expired(self, now: float, idle_s: float, request_s: float) -> str | None: ...
    def close(self) -> None: ...


class DeadlineSweeper:
    """Closes idle connections and those stuck in the middle of a request."""

    def __init__(
        self,
        conns: Callable[[], Iterable[Expirable]],
        *,
        idle_ms: int,
        request_ms: int,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._conns = conns
        self.idle_s = idle_ms / 1000
        self.request_s = request_ms / 1000
        self.clock = clock
        # Deadlines are enforced to within a quarter of the shorter one (at most 5 s late).
        self.interval_s = min(5.0, max(0.05, min(self.idle_s, self.request_s) / 4))
        self._task: asyncio.Task[None] | None = None

    def sweep(self, now: float | None = None) -> int:
        """Close every connection past a deadline at ``now``; return how many."""
        now = self.clock() if now is None else now
        closed = 0
        for c in list(self._conns()):
            reason = c.expired(now, self.idle_s, self.request_s)
            if reason is not None:
                EXPIRED.labels(reason).inc()
                log.info("closing %s: %s", getattr(c, "peer", "?"), reason)
                c.close()
                closed += 1
        return closed

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="floe-conn-deadlines")

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.interval_s)
            try:
                self.sweep()
            except Exception:  # never let the sweeper die
                log.exception("connection deadline sweep failed")

    async def stop(self) -> None:
        await cancel_and_wait(self._task)
        self._task = None
