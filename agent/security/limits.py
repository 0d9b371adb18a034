"""Limits no client can exceed (issue 15): connection counts, deadlines, unread responses.

Where it sits: owned by :class:`~agent.server.AgentServer`, consulted by every
:class:`~agent.connection.KafkaConnection`:

* :class:`ConnectionLimits` — ``max_connections`` and ``max_connections_per_ip``
  (Kafka's ``max.connections`` / ``max.connections.per.ip``): a connection over
  either is closed as soon as it is accepted, before it costs a buffer or a task
  — on TLS listeners before the handshake (:mod:`agent.security.tls_accept`);
  at ``max_connections`` the oldest connection not authenticated yet is closed
  to make room rather than the new one refused.
* :class:`ResponseBudget` — ``queued_max_request_bytes``: bytes of responses
  handed to the transports but not yet taken by their (slow or non-reading)
  clients, all connections together. A connection whose client does not read
  gets nothing more built or read for it (one response at most, itself capped
  by ``fetch_max_bytes``); a Fetch is built to at most what is left of the
  budget (at least one batch, KIP-74), so clients that ask for huge fetches and
  never read leave the budget plus a batch each, and other clients keep being
  served with smaller responses; a connection whose responses stay unread for
  ``request_timeout_ms`` while the budget is exceeded is closed. Partially
  received request frames are counted in the same budget (issue 42): beyond
  their first 64 KiB they grow only while it has room, else their connection
  stops reading until it has. Over TLS the bytes counted are those queued in
  the TCP transport under the TLS layer too. Responses share the agent's one
  ``memory_budget_bytes`` with produce (:func:`agent.produce.budget.share`): a
  Fetch is planned into what produce leaves of it.
* :class:`DeadlineSweeper` — one task for all connections: closes those idle for
  ``connections_max_idle_ms``, those that started a request and did not
  finish sending it within ``request_timeout_ms`` (a slowloris holding a
  partial frame), and those of SASL listeners not authenticated within
  ``authentication_timeout_ms`` of their accept. The clock is injected; :meth:`DeadlineSweeper.sweep` is the
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
    """Open connections, in total and per client address.

    Connections not authenticated yet (a TLS handshake under way, SASL not
    done) are also kept in :attr:`pending`, oldest first. When the total is
    reached, a new connection evicts the oldest of them instead of being
    refused (issue 42): clients that connect and never authenticate cannot
    keep the legitimate ones out by filling ``max_connections`` from many
    addresses; each address is held to ``max_connections_per_ip`` anyway.
    """

    def __init__(
        self, max_connections: int, max_per_ip: int, *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.max_connections = max_connections
        self.max_per_ip = max_per_ip
        self.total = 0
        self.per_ip: Counter[str] = Counter()
        # key -> evict(): closes the connection and returns True, or returns False when
        # it is no longer evictable (authenticated meanwhile): then it is just dropped.
        self.pending: dict[object, Callable[[], bool]] = {}
        self._clock = clock
        self._last_log = -1e9
        self._refused_since_log = 0

    def admit(self, ip: str) -> bool:
        reason = None
        if self.per_ip[ip] >= self.max_per_ip:
            reason = "max_connections_per_ip"
        elif self.total >= self.max_connections and not self._evict_oldest_pending():
            reason = "max_connections"
        if reason is not None:
            REFUSED.labels(reason).inc()
            self._refused(ip, reason)
            return False
        # After an eviction the total is over by one until the evicted connection's
        # release (its connection_lost, a loop iteration later).
        self.total += 1
        self.per_ip[ip] += 1
        return True

    def release(self, ip: str) -> None:
        self.total -= 1
        self.per_ip[ip] -= 1
        if self.per_ip[ip] <= 0:
            del self.per_ip[ip]

    def add_pending(self, key: object, evict: Callable[[], bool]) -> None:
        self.pending[key] = evict

    def forget(self, key: object) -> None:
        self.pending.pop(key, None)

    def _evict_oldest_pending(self) -> bool:
        while self.pending:
            key = next(iter(self.pending))
            if self.pending.pop(key)():
                REFUSED.labels("evicted_unauthenticated").inc()
                return True
        return False

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
    """Bytes of written-but-unread responses and of request frames being
    received, over all connections (Kafka's ``queued.max.request.bytes``).

    A frame of up to 64 KiB is counted with :meth:`add`, granted at once while
    the budget is less than twice over (small requests of well-behaved clients
    pass while large ones wait). A larger one is reserved whole when
    its size is read, as Kafka's memory pool does (:meth:`try_reserve`):
    granted while the budget is not used up (so one frame may overshoot it, and
    no frame larger than the budget starves), else its connection stops
    reading, with no buffer, and waits its turn (:meth:`wait`) until
    :meth:`sub` gives bytes back. Waiters hold nothing of what they wait for,
    so they cannot deadlock each other.
    """

    def __init__(self, capacity: int) -> None:
        self.limit = capacity  # queued_max_request_bytes: frames and unread responses
        self.used = 0
        # Connections waiting for room, oldest first: key -> takes its room.
        self._waiters: dict[object, Callable[[], None]] = {}
        # The agent's one memory budget, shared with produce (agent.produce.budget.share).
        self._total: int | None = None
        self._others: Callable[[], int] | None = None

    def share(self, total: int, others: Callable[[], int]) -> None:
        self._total, self._others = total, others

    @property
    def capacity(self) -> int:
        """What responses may plan into (a Fetch is built to what is left): the
        limit, less what produce holds of the shared memory budget. Frames are
        gated by the limit alone, so a Produce is always read (and, over budget,
        refused at once) rather than left unread in its socket."""
        if self._others is None or self._total is None:
            return self.limit
        return max(0, min(self.limit, self._total - self._others()))

    def add(self, n: int) -> None:
        self.used += n

    def try_reserve(self, n: int) -> bool:
        """Take ``n`` bytes if the budget is not used up and nobody waits before us."""
        if self.used >= self.limit or self._waiters:
            return False
        self.used += n
        return True

    def wait(self, key: object, on_room: Callable[[], None]) -> None:
        self._waiters[key] = on_room

    def cancel_wait(self, key: object) -> None:
        self._waiters.pop(key, None)

    @property
    def small_frames_pass(self) -> bool:
        """Frames of up to 64 KiB are granted at once unless the budget is twice
        over: beyond that (thousands of clients each holding part of a small
        frame) they wait their turn like large ones."""
        return self.used < 2 * self.limit

    @property
    def waiting(self) -> int:
        return len(self._waiters)

    def sub(self, n: int) -> None:
        self.used -= n
        while self._waiters and self.used < self.limit:  # grant in order
            key = next(iter(self._waiters))
            self._waiters.pop(key)()

    @property
    def exceeded(self) -> bool:
        return self.used > self.limit

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
        auth_ms: int = 0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._conns = conns
        self.idle_s = idle_ms / 1000
        self.request_s = request_ms / 1000
        self.auth_s = auth_ms / 1000  # 0: no authentication deadline
        self.clock = clock
        # Deadlines are enforced to within a quarter of the shortest one (at most 5 s late).
        shortest = min(self.idle_s, self.request_s, self.auth_s or self.idle_s)
        self.interval_s = min(5.0, max(0.05, shortest / 4))
        self._task: asyncio.Task[None] | None = None

    def sweep(self, now: float | None = None) -> int:
        """Close every connection past a deadline at ``now``; return how many."""
        now = self.clock() if now is None else now
        closed = 0
        for c in list(self._conns()):
            reason = c.expired(now, self.idle_s, self.request_s) or self._unauthenticated(c, now)
            if reason is not None:
                EXPIRED.labels(reason).inc()
                log.info("closing %s: %s", getattr(c, "peer", "?"), reason)
                c.close()
                closed += 1
        return closed

    def _unauthenticated(self, c: Expirable, now: float) -> str | None:
        """A SASL listener's connection still not authenticated ``auth_s`` after
        its accept (``accepted_at``, set by the server; before the TLS handshake
        on SASL_SSL): Kafka closes those too, a login must not take forever."""
        if not self.auth_s or not getattr(c, "pre_auth", False):
            return None
        at = getattr(c, "accepted_at", None)
        if at is None or now - at <= self.auth_s:
            return None
        return f"not authenticated within {self.auth_s * 1000:.0f} ms of accept (authentication_timeout_ms)"

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
