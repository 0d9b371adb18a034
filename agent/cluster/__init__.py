"""Many stateless agents: membership, consistent-hash rings, zone-aware routing,
the shared (peer) read cache and cross-agent fetch wake-ups. See
:mod:`agent.cluster.cluster` for the facade the broker and handlers use."""

from agent.cluster.cluster import Cluster, ClusterSettings
from agent.cluster.groups import ClusteredGroupCoordinator
from agent.cluster.ring import Peer, Ring, Rings, client_zone, node_id_for

__all__ = [
    "Cluster",
    "ClusterSettings",
    "ClusteredGroupCoordinator",
    "Peer",
    "Ring",
    "Rings",
    "client_zone",
    "node_id_for",
]
