"""Consistent-hash rings over the live agents, and the zone hint of a client.

Where it sits: :mod:`agent.cluster.membership` keeps the live set; this module
turns it into rings (uhashring's ketama: md5-based, so every agent builds the
same ring from the same set, whatever order it learnt the set in). Three uses:

* partition "leaders" in Metadata: key ``topic_id:partition`` over the agents of
  the client's zone (all agents when the zone has none or the client gave none),
* group coordinators: key ``group:<id>`` over all agents,
* read-cache owners: key ``object:<key>`` over the agents of *this* agent's zone,
  so each block is read from object storage about once per zone.
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Iterable
from dataclasses import dataclass

from uhashring import HashRing

_ZONE_HINT = re.compile(r"floe_az=([A-Za-z0-9_.:-]+)")


@dataclass(frozen=True, slots=True)
class Peer:
    """One live agent as the registry knows it."""

    agent_id: str
    host: str  # advertised to clients (may be shared: a load balancer)
    port: int  # advertised Kafka port
    zone: str | None
    admin_port: int | None  # peer HTTP port (peer cache), None when unknown
    peer_host: str | None = None  # private address for peer traffic; None = ``host``
    # Every listener's advertised endpoint, "NAME://host:port,..." (None: one listener).
    endpoints: str | None = None

    def endpoint(self, listener: str | None) -> tuple[str, int]:
        """Where a client that came in on ``listener`` reaches this agent (Kafka's
        rule: the same listener on every broker); host/port when unknown."""
        if listener and self.endpoints:
            for item in self.endpoints.split(","):
                name, _, rest = item.partition("://")
                if name == listener:
                    host, _, port = rest.rpartition(":")
                    return host, int(port)
        return self.host, self.port

    @property
    def node_id(self) -> int:
        return node_id_for(self.agent_id)

    @property
    def admin_url(self) -> str | None:
        return self.admin_url_for("http")

    def admin_url_for(self, scheme: str) -> str | None:
        """The peer's admin HTTP base URL; ``scheme`` is https when the cluster runs
        ``admin_tls`` (every agent does or none: the registry does not store it)."""
        host = self.peer_host or self.host
        if not self.admin_port:
            return None
        return f"{scheme}://[{host}]:{self.admin_port}" if ":" in host else f"{scheme}://{host}:{self.admin_port}"


def node_id_for(agent_id: str) -> int:
    """The Kafka node id of agent ``agent_id``, never of its address: several agents
    may advertise one load-balancer address and still be distinct brokers. A
    numeric id in [1, 2^31) is the node id itself (``--agent-id 3`` is broker 3);
    any other id maps to a CRC32 into int31, stable for a configured id."""
    if agent_id.isdigit() and 0 < int(agent_id) < 2**31:
        return int(agent_id)
    return (zlib.crc32(agent_id.encode()) & 0x7FFFFFFF) or 1


def client_zone(client_id: str | None) -> str | None:
    """The ``floe_az=<zone>`` hint inside a client.id (WarpStream's ``ws_az=``)."""
    if not client_id:
        return None
    m = _ZONE_HINT.search(client_id)
    return m.group(1) if m else None


class Ring:
    """A ring over a fixed set of peers (rebuild on membership change)."""

    def __init__(self, peers: Iterable[Peer]) -> None:
        self.peers = {p.agent_id: p for p in peers}
        self._ring = HashRing(nodes=sorted(self.peers)) if self.peers else None
        self._memo: dict[str, Peer] = {}

    def owner(self, key: str) -> Peer | None:
        hit = self._memo.get(key)
        if hit is not None:
            return hit
        if self._ring is None:
            return None
        peer = self.peers[self._ring.get_node(key)]
        if len(self._memo) > 100_000:
            self._memo.clear()
        self._memo[key] = peer
        return peer

    def __len__(self) -> int:
        return len(self.peers)


class Rings:
    """The rings of one live set: all agents, and per zone."""

    def __init__(self, peers: Iterable[Peer]) -> None:
        self.peers = sorted(peers, key=lambda p: p.agent_id)
        self.all = Ring(self.peers)
        self._zones: dict[str | None, Ring] = {}

    def zone(self, zone: str | None) -> Ring:
        """Agents of ``zone``; all agents when ``zone`` is None or has no agent."""
        if zone is None:
            return self.all
        ring = self._zones.get(zone)
        if ring is None:
            members = [p for p in self.peers if p.zone == zone]
            ring = self._zones[zone] = Ring(members) if members else self.all
        return ring
