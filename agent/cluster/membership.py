"""Agent membership: register, heartbeat, and the live set every agent agrees on.

Identity is not address. Each agent has a stable id (``--agent-id`` /
``FLOE_AGENT_ID``, or a random one per start) from which its Kafka node id is
derived (:func:`~agent.cluster.ring.node_id_for`); it registers the address it
advertises to clients (which several agents may share: a zone's load
balancer) *and* its private peer address (``--peer-address`` /
``FLOE_PEER_ADDRESS``, or discovered), which peers use for the block cache.
Nothing here compares addresses, so agents behind one address never evict each
other.

Registration claims the id for this process (a random ``instance`` token): a
second live process with the same id is refused at start with
:class:`DuplicateAgentError` (and so is a node-id collision), while a restart
of the same agent after a kill -9 takes the stale row over once it is older
than ``dead_after_s``. The agent then heartbeats every ``heartbeat_s`` (default
1 s) from a background task, and :meth:`Membership.refresh` reads the registry.
A graceful stop deregisters at once. Metadata, FindCoordinator and the peer
cache all read :attr:`Membership.rings`: one view per agent.

Liveness has hysteresis (issue 43: on a CPU-starved host two agents saw each
other leave and rejoin every 10-20 s, and each flap moved partition leaders
and group coordinators). A peer leaves when it has been silent -- its
``heartbeat_at`` unchanged -- for ``dead_after_s`` *of this agent's healthy
time*, not of wall-clock time. The agent measures its own health by its own
beats: a beat that completes more than ``heartbeat_s * 1.5`` (and 0.5 s
more than due) after the previous one (the event loop was starved, or the
metastore write was slow) is late; a late beat counts as at most one ``heartbeat_s`` of silence for
the peers, and while the latest beat is late this agent evicts nobody. So a
killed agent leaves a healthy observer within ``dead_after_s`` (plus at most
one heartbeat) of its last beat, as before, while a starved observer keeps
its view. Only a silence of ``HOLD * dead_after_s`` (late beats credited)
drops a peer whatever this agent's health: a permanently starved agent must
still let a dead peer go, and a metastore outage (no beats at all) evicts
nobody. A peer rejoins only with a beat newer than the one it left with.

The clock is injectable: tests drive :meth:`Membership.tick` with a ManualClock.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Callable, Iterable
from contextlib import suppress
from dataclasses import dataclass

from prometheus_client import Counter

from agent.clock import Clock
from agent.cluster.ring import Peer, Rings
from agent.cluster.virtual import virtual_ids
from agent.metrics import METRICS
from agent.tasks import cancel_and_wait
from metastore import Metastore
from metastore.types import AgentInfo

log = logging.getLogger(__name__)

HOLD = 4  # a peer silent for HOLD * dead_after (late beats credited) leaves, whatever our health
WINDOW_MS = 600_000  # rows read: heartbeats this recent (older ones: agents long gone)
LATE = 1.5  # our own beat is late when it completes more than LATE * heartbeat after the last
LATE_MIN_S = 0.5  # ... and this much after it was due (short beats: a hiccup is not starvation)

MEMBERSHIP_CHANGES = Counter(
    "floe_membership_changes",
    "Agents joining or leaving this agent's ring (a leave moves partition leaders and coordinators)",
    ["change"],
    registry=METRICS.registry,
)
LATE_BEATS = Counter(
    "floe_membership_late_beats",
    "This agent's own heartbeats that completed late (starved event loop or slow metastore):"
    " it evicted nobody meanwhile",
    registry=METRICS.registry,
)


class DuplicateAgentError(RuntimeError):
    """Another live agent holds this agent's id (or its node id): refuse to start."""


def peer_of(a: AgentInfo) -> Peer:
    return Peer(a.id, a.host, a.port, a.zone, a.peer_port, a.peer_host, a.endpoints)


@dataclass(slots=True)
class _Seen:
    beat_ms: int  # the peer's heartbeat_at as last read
    silent_s: float  # our healthy time since that beat (credited at each of our own beats)


class Liveness:
    """Which peers are alive, judged with hysteresis (see the module docstring).

    :meth:`beat` is told when each of this agent's own heartbeats completes and
    credits the silence of every peer; :meth:`judge` reads the registry's rows."""

    def __init__(self, heartbeat_s: float, dead_after_s: float) -> None:
        self.heartbeat_s, self.dead_after_s = heartbeat_s, dead_after_s
        self.late_after_s = max(heartbeat_s * LATE, heartbeat_s + LATE_MIN_S)
        self.healthy = True  # our latest beat was on time
        self.late_beats = 0
        self.last_gap_s = 0.0
        self._beat_at: float | None = None  # clock.monotonic() of our last completed beat
        self._seen: dict[str, _Seen] = {}

    def beat(self, at: float) -> None:
        """Our own heartbeat (or registration) reached the registry at ``at``."""
        gap = 0.0 if self._beat_at is None else max(0.0, at - self._beat_at)
        self._beat_at, self.last_gap_s = at, gap
        was, self.healthy = self.healthy, gap <= self.late_after_s
        if not self.healthy:
            self.late_beats += 1
            LATE_BEATS.inc()
            if was:
                log.warning(
                    "own heartbeat late (%.1f s after the last, heartbeat %.1f s): this agent is "
                    "starved or its metastore slow; evicting nobody until its beats are on time",
                    gap, self.heartbeat_s,
                )  # fmt: skip
        elif not was:
            log.info("own heartbeats on time again (%d late so far)", self.late_beats)
        # A late beat's gap is not all healthy time: it counts as one beat at most.
        credit = gap if self.healthy else min(gap, self.heartbeat_s)
        for seen in self._seen.values():
            seen.silent_s += credit

    def judge(
        self, rows: Iterable[AgentInfo], now_ms: int, members: set[str]
    ) -> tuple[list[AgentInfo], dict[str, str]]:
        """The rows of the live peers, and why each of ``members`` not among them left."""
        live, rows_by_id = [], {a.id: a for a in rows}
        left: dict[str, str] = {}
        for a in rows_by_id.values():
            age_s = (now_ms - a.heartbeat_at_ms) / 1000
            seen = self._seen.get(a.id)
            if seen is None:  # first sighting: the wall clock tells how silent it has been
                seen = self._seen[a.id] = _Seen(a.heartbeat_at_ms, max(0.0, age_s))
            elif a.heartbeat_at_ms != seen.beat_ms:  # a new beat: alive, whatever the clocks say
                seen.beat_ms = a.heartbeat_at_ms
                seen.silent_s = min(max(0.0, age_s), self.heartbeat_s)
            silent = seen.silent_s
            if silent < self.dead_after_s:
                live.append(a)
            elif a.id in members and not self.healthy and silent < HOLD * self.dead_after_s:
                live.append(a)  # we are starved: what we read says nothing about the peer
            elif a.id in members:
                left[a.id] = (
                    f"no heartbeat for {silent:.1f} s of this agent's healthy time"
                    if self.healthy
                    else f"no heartbeat for {silent:.1f} s, late beats of this agent counted (over {HOLD} x dead after)"
                ) + f" (dead after {self.dead_after_s:g} s; last heartbeat {age_s:.1f} s ago)"
        for gone in set(self._seen) - set(rows_by_id):
            seen = self._seen.pop(gone)
            if gone in members:
                age_s = (now_ms - seen.beat_ms) / 1000
                left[gone] = (
                    f"no heartbeat for {age_s:.0f} s"
                    if age_s >= WINDOW_MS / 1000
                    else "deregistered (stopped)"
                )
        return live, left


class Membership:
    def __init__(
        self,
        meta: Metastore,
        me: Peer,
        clock: Clock,
        *,
        heartbeat_s: float = 1.0,
        dead_after_s: float = 5.0,
        on_change: Callable[[Rings], None] | None = None,
        virtual_brokers: int = 1,
    ) -> None:
        self.meta = meta
        self.me = me
        self.clock = clock
        self.heartbeat_s = heartbeat_s
        self.dead_after_ms = int(dead_after_s * 1000)
        self.liveness = Liveness(heartbeat_s, dead_after_s)
        self.on_change = on_change
        self.virtual_brokers = virtual_brokers
        self.rings = Rings([me])
        self._task: asyncio.Task[None] | None = None
        self.started = False
        self.instance = uuid.uuid4().hex
        self.evictions = 0  # times this agent found itself dropped from the registry
        self._refreshed_at = float("-inf")  # clock.monotonic() when the applied read began
        self._reads = self._applied = 0  # registry reads begun; the newest one applied
        self.report: Callable[[], str | None] = lambda: None  # published with each beat (isolation)
        self.rows: list[AgentInfo] = []  # the registry's rows as last applied

    @property
    def rid(self) -> str:
        return self.me.agent_id

    def set_me(self, me: Peer) -> None:
        """The bound ports became known (before :meth:`start`)."""
        self.me = me
        self.rings = Rings([me])

    async def start(self) -> None:
        await self._register(starting=True)
        await self.refresh()
        self.started = True
        self._task = asyncio.get_running_loop().create_task(self._run(), name="membership")

    async def stop(self) -> None:
        await cancel_and_wait(self._task)
        self._task = None
        if self.started:
            self.started = False
            with suppress(Exception):
                await self.meta.deregister_agent(self.rid, self.instance)

    async def _register(self, *, starting: bool = False) -> None:
        me = self.me
        live_since = self.clock.now_ms() - self.dead_after_ms
        holder = await self.meta.register_agent(
            self.rid,
            me.host,
            me.port,
            me.zone,
            peer_host=me.peer_host,
            peer_port=me.admin_port,
            instance=self.instance,
            live_since_ms=live_since,
            endpoints=me.endpoints,
        )
        if holder is not None:
            ago = max(0, self.clock.now_ms() - holder.heartbeat_at_ms) / 1000
            msg = (
                f"agent id {self.rid!r} is already used by a live agent (peer address "
                f"{holder.peer_host or holder.host}:{holder.peer_port}, heartbeat {ago:.1f} s ago); "
                f"give each agent its own --agent-id (FLOE_AGENT_ID), or wait "
                f"{self.dead_after_ms / 1000:.0f} s if that agent was just killed"
            )
            if starting:
                raise DuplicateAgentError(msg)
            log.error("%s; not registering again", msg)
            return
        self.liveness.beat(self.clock.monotonic())
        if starting:
            mine = set(virtual_ids(self.rid, self.virtual_brokers))
            for a in await self.meta.live_agents(live_since):
                same = mine.intersection(virtual_ids(a.id, self.virtual_brokers))
                if a.id != self.rid and same:
                    await self.meta.deregister_agent(self.rid, self.instance)
                    raise DuplicateAgentError(
                        f"agent ids {self.rid!r} and {a.id!r} map to the same Kafka node id "
                        f"{min(same)}; give one of them another --agent-id"
                    )

    async def tick(self) -> None:
        """One heartbeat and refresh (the background task calls this every interval)."""
        if not await self.meta.heartbeat(self.rid, self.instance, self.report()):
            self.evictions += 1
            log.warning("agent %s was dropped from the registry; registering again", self.rid)
            await self._register()
        else:
            self.liveness.beat(self.clock.monotonic())
        await self.refresh()

    async def fresh_rings(self, max_age_s: float) -> Rings:
        """The rings, read again from the registry when the last read is older than
        ``max_age_s``. Metadata answers with this: two agents must not disagree for
        a heartbeat about who is live. Right after an agent joins, the others know it
        only at their next refresh; a Metadata answer listing fewer brokers makes
        librdkafka (2.10+) drop the brokers it does not list, and a partition whose
        leader is a dropped broker fails with "Unknown partition" (found with
        ``--workers 2``: one worker listed only itself for ~0.6 s after both were
        healthy)."""
        if self.started and self.clock.monotonic() - self._refreshed_at > max_age_s:
            try:
                await self.refresh()
            except Exception:  # metastore outage: answer with the last known rings
                log.debug("membership refresh for Metadata failed", exc_info=True)
        return self.rings

    async def refresh(self) -> Rings:
        started, self._reads = self.clock.monotonic(), self._reads + 1
        read = self._reads
        now = self.clock.now_ms()
        rows = await self.meta.live_agents(now - max(WINDOW_MS, HOLD * self.dead_after_ms))
        # Fresh as of when the read began, and only once it has an answer: a refresh
        # still in flight (the heartbeat's, begun before another agent registered)
        # must not make fresh_rings answer with the rings it is about to replace, nor
        # replace, when it ends, the rings a later read has already applied.
        if read < self._applied:
            return self.rings
        self._applied, self._refreshed_at, self.rows = read, started, rows
        old = {p.agent_id for p in self.rings.peers}
        others = [a for a in rows if a.id != self.rid]
        live, left = self.liveness.judge(others, now, old)
        peers = {self.me.agent_id: self.me}  # we serve, whatever the registry says
        for a in live:
            peers.setdefault(a.id, peer_of(a))
        if set(peers.values()) != set(self.rings.peers):
            joined, gone = sorted(set(peers) - old), sorted(old - set(peers))
            for agent_id in gone:
                log.warning(
                    "agent %s left the ring: %s",
                    agent_id,
                    left.get(agent_id, "not in the registry"),
                )
            MEMBERSHIP_CHANGES.labels("join").inc(len(joined))
            MEMBERSHIP_CHANGES.labels("leave").inc(len(gone))
            log.info("membership changed: %d agents (joined %s, left %s)", len(peers), joined, gone)
            self.rings = Rings(peers.values())
            if self.on_change is not None:
                self.on_change(self.rings)
        return self.rings

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.heartbeat_s)
            try:
                await self.tick()
            except asyncio.CancelledError:
                raise
            except Exception as e:  # the metastore is down: keep the last view
                log.warning("membership heartbeat failed: %s", e)
