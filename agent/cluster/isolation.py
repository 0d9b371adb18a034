"""Slow-agent isolation (issue 43): a slow agent leaves placement for a minute.

Where it sits: owned by :class:`~agent.cluster.cluster.Cluster`. Twice a heartbeat
this agent probes every live peer (:mod:`agent.cluster.probes`), and publishes,
with its next heartbeat (``agents.observations``, migration 0018), the median
of its last ``window`` probes of each peer and the isolations it applies. Then
every agent runs :func:`judge` over the documents of all live agents, so every
agent computes the same isolated set from the same rows (within a heartbeat of
each other), and the Cluster builds its placement rings -- partition leaders in
Metadata, group, share-group and transaction coordinators -- from the live
agents minus the isolated ones. An isolated agent stays a member: it serves
its peers' block-cache requests and answers NOT_COORDINATOR for what it no
longer owns, as after any ring change; it answers Produce NOT_LEADER_OR_FOLLOWER
so that clients refresh their metadata now (:mod:`agent.handlers._isolated`).

The rule (the seeds' "isolation of slow nodes"):

* an agent's score is the latency a majority of its observers saw at least (the
  lower median of their published medians); a failed or timed-out probe counts
  as the probe timeout;
* it is slow when its score exceeds ``slow_ms`` AND ``factor`` times the fastest
  agent's score (a cluster-wide slowdown -- a slow network or metastore --
  isolates nobody; the fastest agent, not the median, so that with 2 of 3
  agents slow one of them can still be isolated);
* a slow agent is isolated for ``isolate_for_s`` from when the isolation began
  (the earliest start any agent published, so a late joiner agrees), even if it
  recovers meanwhile; one still slow when its minute ends begins a new one;
* an observer whose own event loop is starved (a round of its probes began more
  than ``max_lag_ms`` late within its last ``window`` rounds: a CPU-starved host,
  a long GC) publishes no probes, and drops the ones it holds: its timings measure
  itself, not its peers. On a host where every agent is starved nobody is judged,
  so nobody is isolated and leadership does not move back and forth;
* at most ``max(1, floor(max_fraction * n))`` agents are isolated, and never all
  (``n - 1``); with 3 agents, 1. Existing isolations keep their place and new
  candidates are taken worst first; when more are held than allowed (agents
  left), the one isolated longest is placed again first (the seeds' rule:
  past the cap, calls go to the server isolated longest).
"""

from __future__ import annotations

import json
import logging
import math
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from statistics import median

from prometheus_client import Counter, Gauge

from agent.metrics import METRICS
from metastore.types import AgentInfo

log = logging.getLogger(__name__)

ISOLATED = Gauge(
    "floe_agent_isolated", "1 for each agent this agent's view isolates (slow: out of placement)",
    ["agent"], registry=METRICS.registry,
)  # fmt: skip
ISOLATIONS = Counter(
    "floe_isolations", "Isolations of slow agents this agent applied (one per agent and start)",
    registry=METRICS.registry,
)  # fmt: skip
STARVED_ROUNDS = Counter(
    "floe_isolation_starved_rounds",
    "Probe rounds that began late (this agent's own loop starved): probes withheld",
    registry=METRICS.registry,
)  # fmt: skip
PROBE_MS = Gauge(
    "floe_peer_probe_ms", "Median of this agent's recent probes of each peer (ms)", ["agent"],
    registry=METRICS.registry,
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class IsolationSettings:
    enabled: bool = True
    slow_ms: float = 500.0
    factor: float = 3.0
    isolate_for_s: float = 60.0
    max_fraction: float = 0.3
    probe_timeout_s: float = 1.0  # a round lasts at most this: a slow peer is seen in ~3 beats
    window: int = 5  # probes per peer in the median
    min_probes: int = 3  # fewer than this: nothing published about the peer yet
    max_lag_ms: float = 100.0  # a round that began later than this: our own loop is starved


@dataclass(frozen=True, slots=True)
class Observations:
    """One agent's published document: its probes and the isolations it applies."""

    probes: dict[str, float] = field(default_factory=dict)  # peer -> median probe ms
    isolated: dict[str, int] = field(default_factory=dict)  # agent -> began at (wall ms)

    def dump(self) -> str:
        return json.dumps(
            {"p": {k: round(v, 1) for k, v in self.probes.items()}, "i": self.isolated}
        )

    @classmethod
    def parse(cls, text: str | None) -> Observations:
        if not text:
            return cls()
        try:
            doc = json.loads(text)
            return cls(
                {str(k): float(v) for k, v in doc.get("p", {}).items()},
                {str(k): int(v) for k, v in doc.get("i", {}).items()},
            )
        except (ValueError, TypeError, AttributeError):  # a newer or broken writer: ignore it
            return cls()


@dataclass(frozen=True, slots=True)
class Verdict:
    isolated: dict[str, int]  # agent -> began at (wall ms)
    scores: dict[str, float]  # agent -> score (ms)
    slow: list[str]  # judged slow now, isolated or not (past the cap)
    cap: int
    best_ms: float
    seen: dict[str, dict[str, float]]  # agent -> observer -> median probe ms


def cap_for(n: int, fraction: float) -> int:
    """How many of ``n`` agents may be isolated at once: max(1, floor(fraction n)), never all."""
    return 0 if n <= 1 else min(n - 1, max(1, math.floor(fraction * n)))


def judge(docs: Mapping[str, Observations], now_ms: int, s: IsolationSettings) -> Verdict:
    """The isolated set from the published documents of the live agents (pure)."""
    live = sorted(docs)
    seen: dict[str, dict[str, float]] = {}
    scores: dict[str, float] = {}
    for x in live:
        by = {o: docs[o].probes[x] for o in live if o != x and x in docs[o].probes}
        if by:
            vals = sorted(by.values())
            seen[x] = by
            scores[x] = vals[len(vals) - (len(vals) // 2 + 1)]  # a majority saw at least this
    best = min(scores.values(), default=0.0)
    slow = sorted(x for x, v in scores.items() if v > s.slow_ms and v > s.factor * best)
    # One isolation's start is the earliest start published for it; starts of one
    # isolation lie within a few beats of each other, consecutive ones isolate_for apart.
    span = int(s.isolate_for_s * 1000)
    starts: dict[str, list[int]] = {}
    for o in live:
        for x, began in docs[o].isolated.items():
            if x in docs:
                starts.setdefault(x, []).append(began)
    held: dict[str, int] = {}
    for x, times in starts.items():
        newest = max(times)
        began = min(b for b in times if b > newest - span)
        if now_ms - began < span:
            held[x] = began
    cap = cap_for(len(live), s.max_fraction)
    held_first = sorted(held, key=lambda x: (-held[x], x))  # the one isolated longest: placed first
    new = sorted(set(slow) - set(held), key=lambda x: (-scores[x], x))  # worst first
    chosen = (held_first + new)[:cap]
    return Verdict({x: held.get(x, now_ms) for x in chosen}, scores, slow, cap, best, seen)


class Isolation:
    """This agent's probe windows, its published document, and the current verdict."""

    def __init__(self, me: str, settings: IsolationSettings | None = None) -> None:
        self.me = me
        self.settings = settings or IsolationSettings()
        self._windows: dict[str, deque[float]] = {}
        self._errors: dict[str, str] = {}
        self._lags: deque[float] = deque(maxlen=self.settings.window)
        self.verdict = Verdict({}, {}, [], 0, 0.0, {})

    @property
    def isolated(self) -> frozenset[str]:
        return frozenset(self.verdict.isolated)

    def record(self, peer: str, ms: float, error: str | None = None) -> None:
        """One probe of ``peer`` took ``ms`` (the timeout when it failed)."""
        w = self._windows.get(peer)
        if w is None:
            w = self._windows[peer] = deque(maxlen=self.settings.window)
        w.append(ms)
        if error is not None:
            self._errors[peer] = error
        else:
            self._errors.pop(peer, None)
        PROBE_MS.labels(peer).set(median(w))

    def note_lag(self, ms: float) -> None:
        """This round of probes began ``ms`` later than planned (our own loop's lag).
        A starved round drops the probe windows: only probes taken after it count."""
        self._lags.append(ms)
        if ms > self.settings.max_lag_ms and self._windows:
            if not self.starved:
                log.info("own event loop %.0f ms late: peer probes withheld until it is on time", ms)
            self._windows.clear()
            STARVED_ROUNDS.inc()

    @property
    def starved(self) -> bool:
        """One of our last ``window`` rounds began more than ``max_lag_ms`` late."""
        return any(lag > self.settings.max_lag_ms for lag in self._lags)

    def forget(self, live: Iterable[str]) -> None:
        """Drop the windows of peers that left."""
        keep = set(live)
        for gone in set(self._windows) - keep:
            del self._windows[gone]
            self._errors.pop(gone, None)
            PROBE_MS.remove(gone)

    def medians(self) -> dict[str, float]:
        if self.starved:
            return {}  # our timings measure our own starved loop, not our peers
        n = self.settings.min_probes
        return {p: float(median(w)) for p, w in sorted(self._windows.items()) if len(w) >= n}

    def report(self) -> str | None:
        """The document the next heartbeat publishes (None: isolation is off)."""
        if not self.settings.enabled:
            return None
        return Observations(self.medians(), self.verdict.isolated).dump()

    def apply(self, rows: Iterable[AgentInfo], live: Iterable[str], now_ms: int) -> bool:
        """Judge from the registry's rows of the live agents; True when the isolated set changed."""
        if not self.settings.enabled:
            return False
        ids = set(live)
        docs = {a.id: Observations.parse(a.observations) for a in rows if a.id in ids}
        for missing in ids - set(docs):
            docs[missing] = Observations()
        old, self.verdict = self.verdict, judge(docs, now_ms, self.settings)
        v = self.verdict
        for x in sorted(set(v.isolated) - set(old.isolated)):
            ISOLATIONS.inc()
            ISOLATED.labels(x).set(1)
            observed = ", ".join(f"{o} {ms:.0f} ms" for o, ms in sorted(v.seen.get(x, {}).items()))
            log.warning(
                "isolating agent %s for %.0f s: slow probes (score %.0f ms > %.0f ms and %.1f x the fastest"
                " agent's %.0f ms; median probe by observer: %s)%s",
                x, self.settings.isolate_for_s, v.scores.get(x, 0.0), self.settings.slow_ms,
                self.settings.factor, v.best_ms, observed or "-",
                f"; last probe error: {self._errors[x]}" if x in self._errors else "",
            )  # fmt: skip
        for x in sorted(set(old.isolated) - set(v.isolated)):
            ISOLATED.labels(x).set(0)
            log.info(
                "agent %s placed again (isolation over; score now %.0f ms)", x, v.scores.get(x, 0.0)
            )
        skipped = [x for x in v.slow if x not in v.isolated]
        if skipped and skipped != [x for x in old.slow if x not in old.isolated]:
            log.warning(
                "agents %s are slow too but stay placed: at most %d of %d agents are isolated at once",
                skipped, v.cap, len(ids),
            )  # fmt: skip
        return set(v.isolated) != set(old.isolated)
