"""The agent's view of the cluster: membership, routing, peer cache, wake-ups.

Where it sits: ``broker.cluster``, created by the :class:`~agent.broker.Broker`
and started by the :class:`~agent.server.AgentServer` once its ports are bound.
Handlers ask it for routing decisions:

* :meth:`Cluster.brokers` — the live agents; :meth:`Cluster.nodes` — their node
  ids as Metadata/DescribeCluster list them (``virtual_brokers`` per agent,
  :mod:`agent.cluster.virtual`); :meth:`Cluster.leaders` — Metadata's leader ids;
* :meth:`Cluster.leader` — a partition's "leader": its ring owner among the
  agents of the client's zone (``floe_az=`` in client.id), all agents when the
  zone has none or the client gave no hint;
* :meth:`Cluster.coordinator` — a group's ring owner over all agents;
* :attr:`Cluster.placement` — the rings those three use: the live agents minus
  the ones isolated as slow (:mod:`agent.cluster.isolation`); membership,
  Metadata's broker list and the peer cache keep every live agent;
* :meth:`Cluster.load` — the block-cache loader (peer cache, then object store).

Produce and Fetch are accepted by every agent: the "leader" only steers clients
so that a partition's reads land where its blocks are cached (one exception: an
agent isolated as slow turns Produce away, :meth:`Cluster.turns_away`). Until
:meth:`start` runs (unit tests, embedded use) the cluster is this agent alone.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from aiohttp import web

from agent.clock import Clock
from agent.cluster.forward import GroupForwarder, add_forward_route
from agent.cluster.groups import ClusteredGroupCoordinator
from agent.cluster.isolation import Isolation, IsolationSettings
from agent.cluster.membership import Membership
from agent.cluster.peer_cache import PeerBlockLoader, StoreGet, add_block_route
from agent.cluster.probes import PeerProber, add_probe_route
from agent.cluster.ring import Peer, Rings
from agent.cluster.virtual import VirtualNodes
from agent.cluster.wakeups import Key, PgWakeups, PollWakeups, Wakeups
from agent.notify import CommitNotifier
from agent.security.tls import PeerTls
from agent.tasks import cancel_and_wait
from metastore import Metastore, is_postgres
from metastore.engine import asyncpg_dsn

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ClusterSettings:
    heartbeat_s: float = 1.0
    dead_after_s: float = 5.0
    poll_interval_s: float = 0.1
    peer_cache: bool = True
    # The peer credential (issue 42: FLOE_PEER_TOKEN, else FLOE_INTERNAL_TOKEN), sent to
    # peers' /blocks and /kafka (metastore.internal_auth); never the metastore's.
    peer_token: str = ""
    virtual_brokers: int = 1  # Kafka node ids per agent (agent.cluster.virtual)
    # admin_tls (issue 42): peers' admin ports are https, verified with this (agent.security.tls).
    peer_tls: PeerTls | None = None
    isolation: IsolationSettings = field(default_factory=IsolationSettings)  # issue 43


class Cluster:
    def __init__(
        self,
        meta: Metastore,
        me: Peer,
        clock: Clock,
        store_get: StoreGet,
        notifier: CommitNotifier,
        *,
        metastore_url: str,
        settings: ClusterSettings | None = None,
    ) -> None:
        self.settings = s = settings or ClusterSettings()
        self.meta = meta
        self.metastore_url = metastore_url
        self.notifier = notifier
        self.membership = Membership(
            meta,
            me,
            clock,
            heartbeat_s=s.heartbeat_s,
            dead_after_s=s.dead_after_s,
            on_change=self._changed,
            virtual_brokers=s.virtual_brokers,
        )
        self.peers = PeerBlockLoader(store_get, self.membership, me.zone, token=s.peer_token, tls=s.peer_tls)
        self.forwarder = GroupForwarder(lambda: self.me, self.coordinator, token=s.peer_token, tls=s.peer_tls)
        self.store_get = store_get
        self.wakeups: Wakeups = Wakeups()
        self.groups: ClusteredGroupCoordinator | None = None
        self.ring_listeners: list[Callable[[], None]] = []  # called after each ring change
        self._virtual: tuple[Rings, VirtualNodes] | None = None
        self.clock = clock
        self.isolation = Isolation(me.agent_id, s.isolation)
        self.membership.report = self.isolation.report
        self.prober = PeerProber(self.admin_url, token=s.peer_token, tls=s.peer_tls)
        self._placement: tuple[Rings, frozenset[str], Rings] | None = None
        self._isolating: asyncio.Task[None] | None = None
        self._probes: set[asyncio.Task[None]] = set()

    # -- life cycle -------------------------------------------------------------------

    def set_me(self, me: Peer) -> None:
        self.membership.set_me(me)
        self.isolation.me = me.agent_id
        self.peers.zone = me.zone

    @property
    def me(self) -> Peer:
        return self.membership.me

    def admin_url(self, peer: Peer) -> str | None:
        """``peer``'s admin HTTP base URL, https when this cluster runs admin_tls."""
        return peer.admin_url_for("https" if self.settings.peer_tls is not None else "http")

    @property
    def rings(self) -> Rings:
        return self.membership.rings

    def attach_groups(self, groups: ClusteredGroupCoordinator) -> None:
        self.groups = groups
        groups.owns = self.owns_group

    def add_routes(self, app: web.Application, cache: object, dispatch: object = None) -> None:
        add_block_route(app, cache)  # type: ignore[arg-type]
        if dispatch is not None:
            add_forward_route(app, dispatch)  # type: ignore[arg-type]
            add_probe_route(app, dispatch)  # type: ignore[arg-type]

    async def start(self) -> None:
        await self.membership.start()
        # LISTEN/NOTIFY needs a database connection: an agent on a served metastore
        # (http(s)://, `floe metastore serve`) has none and polls instead.
        if "://" in self.metastore_url and is_postgres(self.metastore_url):
            self.wakeups = PgWakeups(asyncpg_dsn(self.metastore_url), self.notifier)
        else:
            self.wakeups = PollWakeups(
                self.meta,
                self.notifier,
                interval_s=self.settings.poll_interval_s,
                active=lambda: len(self.rings.all) > 1,
            )
        await self.wakeups.start()
        if self.settings.isolation.enabled:
            loop = asyncio.get_running_loop()
            self._isolating = loop.create_task(self._isolate(), name="isolation")

    async def stop(self) -> None:
        await cancel_and_wait(self._isolating)
        self._isolating = None
        await cancel_and_wait(*self._probes)
        await self.prober.close()
        await self.wakeups.stop()
        await self.membership.stop()
        await self.peers.close()
        await self.forwarder.close()

    def _changed(self, rings: Rings) -> None:
        if self.groups is not None:
            self.groups.release_unowned()
        for listener in self.ring_listeners:
            listener()  # other coordinators (KIP-848 groups) drop what they no longer own

    # -- slow-agent isolation (agent.cluster.isolation) ------------------------------------

    async def isolation_round(self) -> bool:
        """Start one probe of every live peer (not awaited: a slow peer's probe ends at
        its timeout, while the next ones are already on their way), then judge from
        the registry's last rows; True when the isolated set (and so placement) changed."""
        me = self.me.agent_id
        others = [p for p in self.rings.peers if p.agent_id != me]
        loop = asyncio.get_running_loop()
        for p in others:
            task = loop.create_task(self._probe(p), name=f"probe {p.agent_id}")
            self._probes.add(task)
            task.add_done_callback(self._probes.discard)
        self.isolation.forget(p.agent_id for p in others)
        live = [p.agent_id for p in self.rings.peers]
        changed = self.isolation.apply(self.membership.rows, live, self.clock.now_ms())
        if changed:
            self._changed(self.rings)  # coordinators release what moved, as on a ring change
        return changed

    async def _probe(self, peer: Peer) -> None:
        ms, error = await self.prober.probe(peer, self.settings.isolation.probe_timeout_s)
        if any(p.agent_id == peer.agent_id for p in self.rings.peers):
            self.isolation.record(peer.agent_id, ms, error)

    async def _isolate(self) -> None:
        interval = self.settings.heartbeat_s / 2  # probes twice a beat: slow is seen in ~2 s
        due: float | None = None
        while True:
            started = self.clock.monotonic()
            if due is not None:  # how late this round began: our own loop's lag
                self.isolation.note_lag(max(0.0, started - due) * 1000)
            try:
                await self.isolation_round()
            except asyncio.CancelledError:
                raise
            except Exception:  # a bug here must not stop the probes
                log.exception("isolation round failed")
            now = self.clock.monotonic()
            pause = max(0.05, interval - (now - started))
            due = now + pause
            await asyncio.sleep(pause)

    @property
    def placement(self) -> Rings:
        """The rings of partition leaders and coordinators: live agents minus isolated ones."""
        rings, isolated = self.rings, self.isolation.isolated
        hit = self._placement
        if hit is not None and hit[0] is rings and hit[1] == isolated:
            return hit[2]
        keep = [p for p in rings.peers if p.agent_id not in isolated]
        placed = Rings(keep) if isolated and keep else rings
        self._placement = (rings, isolated, placed)
        return placed

    def turns_away(self) -> bool:
        """This agent is isolated and clients can reach the others at their own
        addresses: Produce is answered NOT_LEADER_OR_FOLLOWER (agent.handlers._isolated)."""
        me = self.me
        if me.agent_id not in self.isolation.isolated:
            return False
        return any((p.host, p.port) != (me.host, me.port) for p in self.placement.peers)

    # -- routing ----------------------------------------------------------------------

    def brokers(self) -> list[Peer]:
        return list(self.rings.peers)

    @property
    def virtual(self) -> VirtualNodes:
        """The node ids of the current live set (``virtual_brokers`` per agent)."""
        rings = self.rings
        hit = self._virtual
        if hit is None or hit[0] is not rings:
            hit = self._virtual = (rings, VirtualNodes(rings.peers, self.settings.virtual_brokers))
        return hit[1]

    def nodes(self) -> list[tuple[int, Peer]]:
        """(node id, agent) of every broker Metadata/DescribeCluster list."""
        return self.virtual.nodes

    def leader(self, topic_id: object, partition: int, zone: str | None) -> Peer:
        owner = self.placement.zone(zone).owner(f"{topic_id}:{partition}")
        return owner or self.me

    def leaders(self, topic_id: object, partitions: int, zone: str | None) -> list[int]:
        """Each partition's leader node id: a virtual id of its ring owner in ``zone``."""
        return self.virtual.leaders(self.placement.zone(zone), topic_id, partitions, self.me)

    def coordinator(self, key: str) -> Peer:
        return self.placement.all.owner(f"group:{key}") or self.me

    def owns_group(self, group_id: str) -> bool:
        return self.coordinator(group_id).agent_id == self.me.agent_id

    # -- data -------------------------------------------------------------------------

    async def load(self, key: str, start: int, end: int) -> bytes:
        if not self.settings.peer_cache:
            return await self.store_get(key, start, end)
        return await self.peers.load(key, start, end)

    def committed(self, keys: Iterable[Key]) -> None:
        self.wakeups.committed(keys)
