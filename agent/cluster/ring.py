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
    host: str
    port: int  # Kafka port
    zone: str | None
    admin_port: int | None  # HTTP (peer cache), None when unknown

    @property
    def node_id(self) -> int:
        return node_id_for(self.host, self.port)

    @property
    def admin_url(self) -> str | None:
        return f"http://{self.host}:{self.admin_port}" if self.admin_port else None


def node_id_for(host: str, port: int) -> int:
    """The Kafka node id of the agent advertised at ``host:port``: a CRC32 into
    int31. Bound to the address (like a Kafka broker id to its listener), so an
    agent restarted in place keeps its id and clients' connections stay valid."""
    return (zlib.crc32(f"{host}:{port}".encode()) & 0x7FFFFFFF) or 1


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
