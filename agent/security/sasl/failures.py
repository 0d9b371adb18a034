"""Failed SASL logins: counted every time, logged at most once per interval.

Sits under the SaslAuthenticate handler (agent.handlers.sasl_authenticate),
which calls :meth:`FailedLogins.record` for every failed exchange. Every
failure increments ``floe_sasl_authentication_failures_total{mechanism}`` on
the agent's /metrics; a WARNING line is written for the first failure of a
(user, client host) pair in each interval (default 10 s), and the next line for
that pair, or a sweep once the interval is over, says how many were left out.
A client retrying a wrong password 180 times a second thus writes one line
every 10 s instead of 1,800, and the counter still shows the rate.

Memory is bounded: at most ``max_keys`` pairs are tracked; beyond that, the
failures of new user names from a host share one ``(many users)`` entry, so an
attacker rotating names cannot grow the table or the log.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from prometheus_client import Counter

from agent.metrics import METRICS

log = logging.getLogger("agent.handlers.sasl_authenticate")

FAILURES = Counter(
    "floe_sasl_authentication_failures",
    "Failed SASL authentications, by mechanism (every one, logged or not)",
    ["mechanism"],
    registry=METRICS.registry,
)
MANY_USERS = "(many users)"


@dataclass(slots=True)
class _Window:
    started: float  # when its logged line was written
    left_out: int = 0  # failures since then that were not logged
    mechanism: str = ""


class FailedLogins:
    """The agent's failed-login log (one per process: :data:`FAILED_LOGINS`)."""

    def __init__(
        self,
        interval_s: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
        logger: logging.Logger = log,
        max_keys: int = 10_000,
    ) -> None:
        self.interval_s = interval_s
        self._clock = clock
        self._log = logger
        self._max_keys = max_keys
        self._windows: dict[tuple[str, str], _Window] = {}
        self._swept = clock()

    def record(self, mechanism: str, user: str, host: str, reason: str) -> bool:
        """One failed authentication of ``user`` (empty: not known, e.g. a bad
        token) from ``host``; True when a line was logged for it."""
        FAILURES.labels(mechanism).inc()
        now = self._clock()
        self._sweep(now)
        key = (user, host)
        if key not in self._windows and len(self._windows) >= self._max_keys:
            key = (MANY_USERS, host)
        w = self._windows.get(key)
        if w is not None and now - w.started < self.interval_s:
            w.left_out += 1
            return False
        left_out = w.left_out if w is not None else 0
        self._windows[key] = _Window(now, 0, mechanism)
        more = f" ({left_out} more failure(s) not logged in the previous {self.interval_s:g} s)" if left_out else ""
        self._log.warning(
            "closing %s: SASL %s authentication failed for %s: %s%s",
            host, mechanism, repr(user) if user else "an unknown principal", reason, more,
        )  # fmt: skip
        return True

    def _sweep(self, now: float) -> None:
        """Say how many were left out for pairs whose interval is over, and forget them."""
        if now - self._swept < self.interval_s:
            return
        self._swept = now
        for key, w in list(self._windows.items()):
            if now - w.started < self.interval_s:
                continue
            del self._windows[key]
            if w.left_out:
                user, host = key
                self._log.warning(
                    "SASL %s authentication failed %d more time(s) for %s from %s in %g s (not logged one by one)",
                    w.mechanism, w.left_out, repr(user) if user else "an unknown principal", host,
                    self.interval_s,
                )  # fmt: skip

    def __len__(self) -> int:
        return len(self._windows)


FAILED_LOGINS = FailedLogins()
