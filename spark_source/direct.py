"""Direct mode: the driver plans from the metastore itself (options ``metastore`` + ``objects``).

Where it sits: one :class:`~spark_source.driver.Backend`, beside the agents'
planning API (:mod:`spark_source.agents`). The driver needs database (or
``floe metastore serve``) access and, to resolve timestamps to the exact
record, read access to the object store; executors still read objects only.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Mapping

from metastore import Metastore, open_metastore
from metastore.types import BatchLocation, ErrorCode, TopicInfo
from objectstore import ObjectStore, open_object_store
from objectstore.parquet import is_parquet_key, read_offset_range
from objectstore.timestamps import first_offset_in_batch, first_offset_in_rows
from spark_source.driver import (
    DataLossError,
    LeaseSpec,
    PartitionState,
    PlanningError,
    ReadPlan,
    State,
    _data_loss,
)
from spark_source.offsets import TopicPartition
from spark_source.options import SourceOptions
from spark_source.plan import ObjectRef

log = logging.getLogger("spark_source")

FIND_PAGE_BATCHES = 5000
FIND_PAGE_BYTES = 1 << 40
PLAN_ATTEMPTS = 5


class MetastoreBackend:
    def __init__(self, ms: Metastore, objects_url: str) -> None:
        self.ms = ms
        self.objects_url = objects_url
        self._store: ObjectStore | None = None

    @classmethod
    async def open(cls, opts: SourceOptions) -> MetastoreBackend:
        assert opts.metastore is not None and opts.objects is not None
        return cls(await open_metastore(opts.metastore, auto_migrate=False), opts.objects)

    async def close(self) -> None:
        if self._store is not None:
            await self._store.close()
        await self.ms.close()

    def _objects(self) -> ObjectStore:
        if self._store is None:
            self._store = open_object_store(self.objects_url)
        return self._store

    # -- partitions and offsets ------------------------------------------------------

    async def _topics(self, opts: SourceOptions) -> dict[str, TopicInfo]:
        if opts.subscribe or opts.assign is not None:
            names = opts.subscribe or tuple(sorted(opts.assign or {}))
            out: dict[str, TopicInfo] = {}
            for name in names:
                t = await self.ms.get_topic(name)
                if t is not None:
                    out[name] = t
            return out
        return {t.name: t for t in await self.ms.list_topics() if opts.matches(t.name)}

    async def partition_state(self, opts: SourceOptions) -> State:
        """Log start and high watermark of every partition the source reads."""
        topics = await self._topics(opts)
        by_id = {t.id: t for t in topics.values()}
        state: State = {}
        for s in await self.ms.partition_summaries():
            t = by_id.get(s.topic_id)
            if t is None or s.partition >= t.partitions:
                continue
            if opts.assign is not None and s.partition not in opts.assign.get(t.name, ()):
                continue
            state[(t.name, s.partition)] = PartitionState(
                t.id, s.log_start_offset, s.high_watermark
            )
        return state

    async def offsets_for_times(
        self, queries: Mapping[TopicPartition, tuple[uuid.UUID, int]]
    ) -> dict[TopicPartition, int]:
        out: dict[TopicPartition, int] = {}
        for tp, (tid, ts) in queries.items():
            out[tp] = await self._offset_for_time(tid, tp[1], ts)
        return out

    async def _offset_for_time(self, tid: uuid.UUID, partition: int, ts: int) -> int:
        r = await self.ms.list_offsets(tid, partition, ts)
        if r.error != ErrorCode.NONE:
            raise PlanningError(f"cannot resolve timestamp {ts} on partition {partition}: {r.error.name}")
        if r.offset < 0:
            return -1
        # The first batch reaching ts holds the first record reaching it.
        f = await self.ms.find_batches(tid, partition, r.offset, 1, max_batches=1)
        if f.error != ErrorCode.NONE or not f.batches:
            return r.offset
        found = await record_offset(self._objects(), f.batches[0], ts)
        return max(found, r.offset) if found is not None else r.offset

    # -- plans -----------------------------------------------------------------------

    async def read_plan(
        self,
        ranges: Mapping[TopicPartition, tuple[uuid.UUID, int, int]],
        *,
        fail_on_data_loss: bool,
        lease: LeaseSpec | None,
    ) -> ReadPlan:
        for _attempt in range(PLAN_ATTEMPTS):
            plan = ReadPlan(objects_url=self.objects_url)
            for tp, (tid, start, end) in ranges.items():
                first, batches = await find_range(
                    self.ms, tid, tp, start, end, fail_on_data_loss=fail_on_data_loss
                )
                plan.batches[tp] = batches
                if first != start:
                    plan.starts[tp] = first
            keys = sorted({b.object_key for bs in plan.batches.values() for b in bs})
            if lease is None:
                plan.objects = {k: ObjectRef(-1) for k in keys}
                return plan
            grant = await self.ms.acquire_read_lease(
                lease.lease_id, keys, lease.ttl_ms, owner=lease.owner
            )
            if not grant.missing:
                plan.objects = {k: ObjectRef(grant.sizes.get(k, -1)) for k in keys}
                plan.lease_expires_ms = grant.expires_at_ms
                return plan
            # The GC removed an object between the lookup and the lease: plan again.
            log.info("floe source: %d planned object(s) already collected; re-planning", len(grant.missing))
        raise PlanningError("the compactor kept moving the planned data; planning gave up")

    async def renew_lease(self, lease: LeaseSpec, keys: list[str]) -> list[str]:
        grant = await self.ms.acquire_read_lease(lease.lease_id, keys, lease.ttl_ms, owner=lease.owner)
        return list(grant.missing)

    async def release_lease(self, lease_id: str) -> None:
        await self.ms.release_read_lease(lease_id)


async def record_offset(store: ObjectStore, b: BatchLocation, ts: int) -> int | None:
    """The first offset of batch ``b`` whose record timestamp is >= ``ts``."""
    if is_parquet_key(b.object_key):
        data = await store.get(b.object_key)
        return first_offset_in_rows(read_offset_range(data, b.base_offset, b.last_offset), ts)
    data = await store.get(b.object_key, b.byte_pos, b.byte_pos + b.byte_len)
    return first_offset_in_batch(data, b.base_offset, ts)


async def find_range(
    ms: Metastore,
    topic_id: uuid.UUID,
    tp: TopicPartition,
    start: int,
    end: int,
    *,
    fail_on_data_loss: bool = True,
) -> tuple[int, list[BatchLocation]]:
    """``(first offset still readable, every batch row holding an offset of [start, end))``."""
    out: list[BatchLocation] = []
    offset = first = start
    while offset < end:
        r = await ms.find_batches(
            topic_id, tp[1], offset, FIND_PAGE_BYTES, max_batches=FIND_PAGE_BATCHES
        )
        if r.error == ErrorCode.OFFSET_OUT_OF_RANGE and offset < r.log_start_offset:
            # Retention moved the log start since the offsets were checked.
            _data_loss(
                f"{tp[0]}-{tp[1]}: offsets {offset}..{r.log_start_offset - 1} deleted "
                "while planning",
                fail_on_data_loss,
            )
            offset = first = min(r.log_start_offset, end)
            continue
        if r.error != ErrorCode.NONE:
            raise DataLossError(
                f"{tp[0]}-{tp[1]}: offset {offset} unreadable ({r.error.name}, log "
                f"start {r.log_start_offset}, end {r.high_watermark})"
            )
        if not r.batches:
            break
        for b in r.batches:
            if b.base_offset >= end:
                return first, out
            out.append(b)
        offset = r.batches[-1].last_offset + 1
    return first, out
