"""Read planning over the metastore: which partitions, which batches, under which lease.

Where it sits: shared by the agent's planning API (``agent/planning.py``, for
Spark drivers that only know ``kafka.bootstrap.servers``) and the Spark
source's direct mode (``spark_source/direct.py``), so both plan the same way
without importing each other. Pure metastore calls: reading bytes (to resolve
a timestamp to its exact record) is the caller's business, with
:mod:`objectstore.timestamps`.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from metastore.protocol import Metastore
from metastore.types import BatchLocation, ErrorCode, PartitionSummary, TopicInfo

FIND_PAGE_BATCHES = 5000
FIND_PAGE_BYTES = 1 << 40
PLAN_ATTEMPTS = 5


class PlanConflict(RuntimeError):
    """The compactor kept collecting the planned objects (planning gave up)."""


@dataclass(frozen=True, slots=True)
class PartitionRead:
    topic: TopicInfo
    partition: int
    log_start: int
    high_watermark: int


async def select_partitions(
    ms: Metastore,
    *,
    subscribe: Sequence[str] = (),
    pattern: str | None = None,
    assign: Mapping[str, Sequence[int]] | None = None,
) -> list[PartitionRead]:
    """The existing partitions a subscription names (missing topics: none)."""
    if subscribe or assign is not None:
        names = list(subscribe) or sorted(assign or {})
        topics = [t for t in [await ms.get_topic(n) for n in names] if t is not None]
    else:
        rx = re.compile(pattern or "")
        topics = [t for t in await ms.list_topics() if rx.fullmatch(t.name)]
    by_id = {t.id: t for t in topics}
    out: list[PartitionRead] = []
    summaries: list[PartitionSummary] = await ms.partition_summaries()
    for s in summaries:
        t = by_id.get(s.topic_id)
        if t is None or s.partition >= t.partitions:
            continue
        if assign is not None and s.partition not in assign.get(t.name, ()):
            continue
        out.append(PartitionRead(t, s.partition, s.log_start_offset, s.high_watermark))
    out.sort(key=lambda r: (r.topic.name, r.partition))
    return out


async def batch_at_time(
    ms: Metastore, topic_id: uuid.UUID, partition: int, timestamp: int
) -> tuple[int, BatchLocation | None]:
    """``(offset, batch)``: the first batch whose max timestamp is >= ``timestamp``
    and its first readable offset; ``(-1, None)`` if there is none. The exact first
    record lies inside that batch (``objectstore.timestamps``)."""
    r = await ms.list_offsets(topic_id, partition, timestamp)
    if r.error != ErrorCode.NONE:
        raise ValueError(f"cannot resolve timestamp {timestamp}: {r.error.name}")
    if r.offset < 0:
        return -1, None
    f = await ms.find_batches(topic_id, partition, r.offset, 1, max_batches=1)
    if f.error != ErrorCode.NONE or not f.batches:
        return r.offset, None
    return r.offset, f.batches[0]


@dataclass(slots=True)
class RangeBatches:
    """The batches holding ``[first, end)``; ``lost`` offsets ``[start, first)`` that
    retention removed while planning (a data loss the caller reports)."""

    first: int
    batches: list[BatchLocation] = field(default_factory=list)
    lost: tuple[int, int] | None = None


async def find_range(
    ms: Metastore, topic_id: uuid.UUID, partition: int, start: int, end: int
) -> RangeBatches:
    """Every batch row holding an offset of ``[start, end)``."""
    out = RangeBatches(start)
    offset = start
    while offset < end:
        r = await ms.find_batches(
            topic_id, partition, offset, FIND_PAGE_BYTES, max_batches=FIND_PAGE_BATCHES
        )
        if r.error == ErrorCode.OFFSET_OUT_OF_RANGE and offset < r.log_start_offset:
            # Retention moved the log start since the offsets were checked.
            offset = out.first = min(r.log_start_offset, end)
            out.lost = (start, offset)
            out.batches.clear()
            continue
        if r.error != ErrorCode.NONE:
            raise LookupError(
                f"partition {partition}: offset {offset} unreadable ({r.error.name}, log "
                f"start {r.log_start_offset}, end {r.high_watermark})"
            )
        if not r.batches:
            break
        for b in r.batches:
            if b.base_offset >= end:
                return out
            out.batches.append(b)
        offset = r.batches[-1].last_offset + 1
    return out


@dataclass(slots=True)
class LeasedPlan:
    ranges: list[RangeBatches]
    sizes: dict[str, int]
    expires_at_ms: int | None


async def plan_ranges(
    ms: Metastore,
    ranges: Sequence[tuple[uuid.UUID, int, int, int]],
    *,
    lease_id: str | None = None,
    ttl_ms: int = 0,
    owner: str = "",
) -> LeasedPlan:
    """Batches for ``(topic_id, partition, start, end)`` ranges, their objects leased.

    If the GC claimed a planned object between the lookup and the lease (the
    batch rows then already point at its replacement), plan again."""
    for _ in range(PLAN_ATTEMPTS):
        found = [await find_range(ms, tid, p, s, e) for tid, p, s, e in ranges]
        keys = sorted({b.object_key for r in found for b in r.batches})
        if lease_id is None:
            return LeasedPlan(found, {}, None)
        grant = await ms.acquire_read_lease(lease_id, keys, ttl_ms, owner=owner)
        if not grant.missing:
            return LeasedPlan(found, dict(grant.sizes), grant.expires_at_ms)
    raise PlanConflict("the compactor kept collecting the planned objects; planning gave up")
