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
1 s) from a background task; :meth:`Membership.refresh` reads the agents whose
heartbeat is younger than ``dead_after_s`` (default 5 s), so a killed agent
drops out of everyone's rings within about ``dead_after_s + heartbeat_s``. A
graceful stop deregisters at once. Metadata, FindCoordinator and the peer
cache all read :attr:`Membership.rings`: one view per agent.

The clock is injectable: tests drive :meth:`Membership.tick` with a ManualClock.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Callable
from contextlib import suppress

from agent.clock import Clock
from agent.cluster.ring import Peer, Rings
from agent.cluster.virtual import virtual_ids
from agent.tasks import cancel_and_wait
from metastore import Metastore
from metastore.types import AgentInfo

log = logging.getLogger(__name__)


class DuplicateAgentError(RuntimeError):
    """Another live agent holds this agent's id (or its node id): refuse to start."""


def peer_of(a: AgentInfo) -> Peer:
    return Peer(a.id, a.host, a.port, a.zone, a.peer_port, a.peer_host, a.endpoints)


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
        self.on_change = on_change
        self.virtual_brokers = virtual_brokers
        self.rings = Rings([me])
        self._task: asyncio.Task[None] | None = None
        self.started = False
        self.instance = uuid.uuid4().hex
        self.evictions = 0  # times this agent found itself dropped from the registry
        self._refreshed_at = float("-inf")  # clock.monotonic() when the applied read began
        self._reads = self._applied = 0  # registry reads begun; the newest one applied

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
        if not await self.meta.heartbeat(self.rid, self.instance):
            self.evictions += 1
            log.warning("agent %s was dropped from the registry; registering again", self.rid)
            await self._register()
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
        rows = await self.meta.live_agents(self.clock.now_ms() - self.dead_after_ms)
        # Fresh as of when the read began, and only once it has an answer: a refresh
        # still in flight (the heartbeat's, begun before another agent registered)
        # must not make fresh_rings answer with the rings it is about to replace, nor
        # replace, when it ends, the rings a later read has already applied.
        if read < self._applied:
            return self.rings
        self._applied, self._refreshed_at = read, started
        peers = {self.me.agent_id: self.me}  # we serve, whatever the registry says
        for a in rows:
            peers.setdefault(a.id, peer_of(a))
        if set(peers.values()) != set(self.rings.peers):
            old = {p.agent_id for p in self.rings.peers}
            log.info(
                "membership changed: %d agents (joined %s, left %s)",
                len(peers),
                sorted(set(peers) - old),
                sorted(old - set(peers)),
            )
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
