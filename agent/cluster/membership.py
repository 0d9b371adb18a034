"""Agent membership: register, heartbeat, and the live set every agent agrees on.

Each agent upserts its row in the metastore's agent registry (host, Kafka port,
zone) and heartbeats every ``heartbeat_s`` (default 1 s) from a background task;
``refresh`` reads the agents whose heartbeat is younger than ``dead_after_s``
(default 5 s), so a killed agent drops out of everyone's rings within about
``dead_after_s + heartbeat_s``. A graceful stop deregisters at once.

The registry row has no column for the admin (HTTP) port the peer read cache
needs, and this change adds no migration: the registry id is
``<agent_id>@<admin_port>`` (:func:`registry_id` / :func:`parse_registry_id`).
A row without ``@`` is an agent without a peer cache (readers fall back to the
object store).

An agent started on the address of a dead one (a restart after kill -9) removes
the stale row on registration, so clients never see two brokers on one address.
The clock is injectable: tests drive :meth:`Membership.tick` with a ManualClock.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from contextlib import suppress

from agent.clock import Clock
from agent.cluster.ring import Peer, Rings
from metastore import Metastore

log = logging.getLogger(__name__)


def registry_id(peer: Peer) -> str:
    return f"{peer.agent_id}@{peer.admin_port}" if peer.admin_port else peer.agent_id


def parse_registry_id(rid: str) -> tuple[str, int | None]:
    agent_id, sep, admin = rid.rpartition("@")
    if sep and admin.isdigit():
        return agent_id, int(admin)
    return rid, None


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
    ) -> None:
        self.meta = meta
        self.me = me
        self.clock = clock
        self.heartbeat_s = heartbeat_s
        self.dead_after_ms = int(dead_after_s * 1000)
        self.on_change = on_change
        self.rings = Rings([me])
        self._task: asyncio.Task[None] | None = None
        self.started = False

    @property
    def rid(self) -> str:
        return registry_id(self.me)

    def set_me(self, me: Peer) -> None:
        """The bound ports became known (before :meth:`start`)."""
        self.me = me
        self.rings = Rings([me])

    async def start(self) -> None:
        await self._register()
        await self.refresh()
        self.started = True
        self._task = asyncio.get_running_loop().create_task(self._run(), name="membership")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        if self.started:
            self.started = False
            with suppress(Exception):
                await self.meta.deregister_agent(self.rid)

    async def _register(self) -> None:
        me = self.me
        await self.meta.register_agent(self.rid, me.host, me.port, me.zone)
        for a in await self.meta.live_agents(0):
            if a.id != self.rid and (a.host, a.port) == (me.host, me.port):
                log.info("removing stale registration %s at %s:%d", a.id, a.host, a.port)
                await self.meta.deregister_agent(a.id)

    async def tick(self) -> None:
        """One heartbeat and refresh (the background task calls this every interval)."""
        if not await self.meta.heartbeat(self.rid):
            log.warning("agent %s was dropped from the registry; registering again", self.rid)
            await self._register()
        await self.refresh()

    async def refresh(self) -> Rings:
        rows = await self.meta.live_agents(self.clock.now_ms() - self.dead_after_ms)
        peers = {self.me.agent_id: self.me}  # we serve, whatever the registry says
        for a in rows:
            agent_id, admin = parse_registry_id(a.id)
            peers.setdefault(agent_id, Peer(agent_id, a.host, a.port, a.zone, admin))
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
