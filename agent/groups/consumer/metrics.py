"""Per-group /metrics of the consumer groups this agent coordinates, both kinds.

Where it sits: the KIP-848 consumer-group coordinator refreshes its groups every
``interval_s`` (:func:`refresh`: members, group epoch and lag) and the classic
coordinator (agent.groups.coordinator) its own (:func:`refresh_classic`: lag);
tests call both directly. Lag is the high watermark minus the committed offset,
summed over the group's committed partitions, in ``floe_consumer_group_lag{group}``
for either kind. Only the ring owner reports a group, so a cluster-wide sum counts
each group once. Cost: one offset read per group and one partition-offsets read
per committed topic per refresh (plus one group listing for the classic groups,
so that groups with committed offsets but no member are reported too).

It reads the coordinators through :class:`GroupSource` / :class:`ClassicGroupSource`
(what it needs, not the classes), so the coordinators can import this module and
not the other way round.
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Protocol

from prometheus_client import Gauge

from agent.metrics import METRICS

if TYPE_CHECKING:
    from agent.groups.consumer.model import ConsumerGroup
    from metastore import Metastore

LAG = Gauge(
    "floe_consumer_group_lag",
    "Consumer group (classic or KIP-848): records behind the high watermarks, over its committed partitions",
    ["group"],
    registry=METRICS.registry,
)
MEMBERS = Gauge("floe_consumer_group_members", "KIP-848 group: members", ["group"], registry=METRICS.registry)
EPOCH = Gauge("floe_consumer_group_epoch", "KIP-848 group: group epoch", ["group"], registry=METRICS.registry)
_reported: set[str] = set()
_reported_classic: set[str] = set()


class GroupSource(Protocol):
    """What a refresh reads: the live groups this agent owns, and the metastore."""

    @property
    def meta(self) -> Metastore: ...

    def reported_groups(self) -> list[ConsumerGroup]: ...


class ClassicGroupSource(Protocol):
    """What a classic refresh reads: the ids of the classic groups this agent owns."""

    @property
    def meta(self) -> Metastore: ...

    async def reported_group_ids(self) -> list[str]: ...


async def group_lag(meta: Metastore, group_id: str, ends: dict[uuid.UUID, dict[int, int]]) -> int:
    """High watermark minus committed offset, summed over ``group_id``'s committed
    partitions; ``ends`` caches each topic's high watermarks for one refresh."""
    lag = 0
    for o in await meta.fetch_offsets(group_id):
        if o.topic_id not in ends:
            ends[o.topic_id] = {p.partition: p.high_watermark for p in await meta.partition_offsets(o.topic_id)}
        lag += max(0, ends[o.topic_id].get(o.partition, o.offset) - o.offset)
    return lag


async def refresh_classic(coord: ClassicGroupSource) -> dict[str, int]:
    """Recompute the lag of the classic groups; returns group id -> lag (for tests)."""
    out: dict[str, int] = {}
    ends: dict[uuid.UUID, dict[int, int]] = {}
    for gid in await coord.reported_group_ids():
        out[gid] = await group_lag(coord.meta, gid, ends)
        LAG.labels(gid).set(out[gid])
    for gone in _reported_classic - set(out) - _reported:
        LAG.remove(gone)
    _reported_classic.clear()
    _reported_classic.update(out)
    return out


async def refresh(coord: GroupSource) -> dict[str, int]:
    """Recompute the gauges; returns group id -> lag (for tests)."""
    out: dict[str, int] = {}
    ends: dict[uuid.UUID, dict[int, int]] = {}
    for g in coord.reported_groups():
        gid = g.group_id
        lag = await group_lag(coord.meta, gid, ends)
        out[gid] = lag
        LAG.labels(gid).set(lag)
        MEMBERS.labels(gid).set(len(g.members))
        EPOCH.labels(gid).set(g.group_epoch)
    for gone in _reported - set(out):
        for gauge in (MEMBERS, EPOCH):
            gauge.remove(gone)
        if gone not in _reported_classic:  # a group migrated to classic keeps its lag line
            LAG.remove(gone)
    _reported.clear()
    _reported.update(out)
    return out
