"""Per-group /metrics of the KIP-848 consumer groups this agent coordinates.

Where it sits: the consumer-group coordinator refreshes these every
``interval_s`` (and tests call :func:`refresh` directly): for every group it
owns, the members, the group epoch and the lag (high watermark minus committed
offset, summed over the group's committed partitions). Only the ring owner
reports a group, so a cluster-wide sum counts each group once. Cost: one offset
read per group and one partition-offsets read per committed topic per refresh.

It reads the coordinator through :class:`GroupSource` (what it needs, not the
class), so the coordinator can import this module and not the other way round.
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Protocol

from prometheus_client import Gauge

from agent.metrics import METRICS

if TYPE_CHECKING:
    from agent.groups.consumer.model import ConsumerGroup
    from metastore import Metastore

LAG = Gauge("floe_consumer_group_lag", "KIP-848 group: records behind the high watermarks", ["group"], registry=METRICS.registry)
MEMBERS = Gauge("floe_consumer_group_members", "KIP-848 group: members", ["group"], registry=METRICS.registry)
EPOCH = Gauge("floe_consumer_group_epoch", "KIP-848 group: group epoch", ["group"], registry=METRICS.registry)
_reported: set[str] = set()


class GroupSource(Protocol):
    """What a refresh reads: the live groups this agent owns, and the metastore."""

    @property
    def meta(self) -> Metastore: ...

    def reported_groups(self) -> list[ConsumerGroup]: ...


async def refresh(coord: GroupSource) -> dict[str, int]:
    """Recompute the gauges; returns group id -> lag (for tests)."""
    out: dict[str, int] = {}
    for g in coord.reported_groups():
        gid = g.group_id
        ends: dict[uuid.UUID, dict[int, int]] = {}
        lag = 0
        for o in await coord.meta.fetch_offsets(gid):
            if o.topic_id not in ends:
                ends[o.topic_id] = {p.partition: p.high_watermark for p in await coord.meta.partition_offsets(o.topic_id)}
            lag += max(0, ends[o.topic_id].get(o.partition, o.offset) - o.offset)
        out[gid] = lag
        LAG.labels(gid).set(lag)
        MEMBERS.labels(gid).set(len(g.members))
        EPOCH.labels(gid).set(g.group_epoch)
    for gone in _reported - set(out):
        for gauge in (LAG, MEMBERS, EPOCH):
            gauge.remove(gone)
    _reported.clear()
    _reported.update(out)
    return out
