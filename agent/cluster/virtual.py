"""Virtual brokers: each agent process advertised as several Kafka node ids.

Where it sits: :class:`~agent.cluster.cluster.Cluster` builds a
:class:`VirtualNodes` for each rings object (one live set); Metadata and
DescribeCluster list its nodes, Metadata's partition leaders come from
:meth:`VirtualNodes.leaders`, and anything that receives a node id (a
DescribeConfigs broker resource, tests) maps it back to its agent with
:meth:`VirtualNodes.peer`.

Why: Kafka clients keep one connection per node id and bound the requests in
flight per connection (5 for an idempotent producer; librdkafka puts one
partition in each Produce request), and every produce request waits for its
segment's seal + PUT + commit. With 16 partitions on one agent an idempotent
librdkafka producer can send only 5 partition batches per seal, so a partition
gets a slot every few seals. Advertised as ``k`` brokers, all at the process's
own host:port, the agent gets ``k`` connections from each client and each
connection carries ~1/k of its partitions: ``5 k`` requests in flight per seal.

Node ids: virtual broker 0 is the agent's own node id
(:func:`~agent.cluster.ring.node_id_for`), so one virtual broker changes nothing;
virtual broker ``i > 0`` is ``node_id_for("<agent id>~v<i>")`` (a CRC into
int31), the same on every agent. ``virtual_brokers`` must be equal on every
agent of a cluster (like ``cluster_id``): each agent lists every agent's
virtual brokers from its own setting. Produce and Fetch are accepted by every
agent, so a client that reaches any of them is served; the partition's ring
owner (cache locality) is unchanged, only which of its node ids leads it.
Group coordinators are answered with the owning agent's own node id.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable

from agent.cluster.ring import Peer, Ring, node_id_for

MAX_VIRTUAL_BROKERS = 64


def virtual_ids(agent_id: str, k: int) -> list[int]:
    """The ``k`` node ids agent ``agent_id`` is advertised as (its own first)."""
    return [node_id_for(agent_id)] + [node_id_for(f"{agent_id}~v{i}") for i in range(1, k)]


class VirtualNodes:
    """The node ids of one live set: each peer's ``k`` ids, and the way back."""

    def __init__(self, peers: Iterable[Peer], k: int) -> None:
        self.k = max(1, k)
        self.nodes: list[tuple[int, Peer]] = []  # (node id, agent), agents in ring order
        self.ids: dict[str, list[int]] = {}  # agent id -> its node ids
        self._by_id: dict[int, Peer] = {}
        for p in peers:
            ids = self.ids[p.agent_id] = virtual_ids(p.agent_id, self.k)
            for n in ids:
                self.nodes.append((n, p))
                self._by_id.setdefault(n, p)

    def peer(self, node_id: int) -> Peer | None:
        """The agent process behind ``node_id`` (any of its virtual ids)."""
        return self._by_id.get(node_id)

    def leaders(self, ring: Ring, topic_id: object, partitions: int, default: Peer) -> list[int]:
        """One leader node id per partition: the partition's ring owner (as without
        virtual brokers), then one of that owner's ``k`` ids, round robin over the
        owner's partitions in order, starting at a per-topic offset so that topics of
        few partitions do not all land on virtual broker 0."""
        if len(ring) <= 1:  # one agent: every partition's owner, no hashing
            owners = [ring.owner(f"{topic_id}:0") or default] * partitions
        else:
            owners = [ring.owner(f"{topic_id}:{p}") or default for p in range(partitions)]
        if self.k == 1:
            return [o.node_id for o in owners]
        start = zlib.crc32(str(topic_id).encode()) % self.k
        seen: dict[str, int] = {}
        out: list[int] = []
        for owner in owners:
            ids = self.ids.get(owner.agent_id) or virtual_ids(owner.agent_id, self.k)
            i = seen.get(owner.agent_id, 0)
            seen[owner.agent_id] = i + 1
            out.append(ids[(start + i) % self.k])
        return out
