"""Direct mode: the driver plans from the metastore itself (options ``metastore`` + ``objects``).

Where it sits: one :class:`~spark_source.backend.Backend`, beside the agents'
planning API (:mod:`spark_source.agents`). The driver needs database (or
``floe metastore serve``) access and, to resolve timestamps to the exact
record, read access to the object store; executors still read objects only.
With the journal tier (option ``journal``, the agents' ``FLOE_JOURNAL``) the
plan carries the journal bucket URLs, where executors read ``journal/`` keys.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Mapping

from metastore import Metastore, open_metastore
from metastore.reads import PlanConflict, batch_at_time, plan_ranges, select_partitions
from metastore.types import BatchLocation, MetastoreError
from objectstore import ObjectStore
from objectstore.journal import open_journaled_store
from objectstore.parquet import is_parquet_key, read_offset_range
from objectstore.timestamps import first_offset_in_batch, first_offset_in_rows
from spark_source.backend import (
    DataLossError,
    LeaseSpec,
    PartitionState,
    PlanningError,
    ReadPlan,
    State,
    data_loss,
)
from spark_source.offsets import TopicPartition
from spark_source.options import SourceOptions
from spark_source.plan import ObjectRef

log = logging.getLogger("spark_source")


class MetastoreBackend:
    def __init__(self, ms: Metastore, objects_url: str, journal: tuple[str, ...] = ()) -> None:
        self.ms = ms
        self.objects_url = objects_url
        self.journal = journal
        self._store: ObjectStore | None = None

    @classmethod
    async def open(cls, opts: SourceOptions) -> MetastoreBackend:
        assert opts.metastore is not None and opts.objects is not None
        ms = await open_metastore(opts.metastore, auto_migrate=False)
        return cls(ms, opts.objects, opts.journal)

    async def close(self) -> None:
        if self._store is not None:
            await self._store.close()
        await self.ms.close()

    def _objects(self) -> ObjectStore:
        if self._store is None:
            # Timestamp lookups may land on a batch still in the journal tier.
            self._store = open_journaled_store(self.objects_url, self.journal)
        return self._store

    async def partition_state(self, opts: SourceOptions) -> State:
        """Log start and high watermark of every partition the source reads."""
        found = await select_partitions(
            self.ms,
            subscribe=opts.subscribe,
            pattern=opts.subscribe_pattern,
            assign=opts.assign,
        )
        state = {
            (r.topic.name, r.partition): PartitionState(r.topic.id, r.log_start, r.high_watermark)
            for r in found
        }
        if opts.isolation_level != "read_committed" or not found:
            return state
        views = await self.ms.stable_offsets([(r.topic.id, r.partition, r.log_start) for r in found])
        for r, v in zip(found, views, strict=True):
            if not v.error:
                state[(r.topic.name, r.partition)] = PartitionState(
                    r.topic.id, r.log_start, min(v.last_stable_offset, r.high_watermark),
                    tuple(tuple(a) for a in v.aborted),  # type: ignore[misc]
                )
        return state

    async def offsets_for_times(
        self, queries: Mapping[TopicPartition, tuple[uuid.UUID, int]]
    ) -> dict[TopicPartition, int]:
        out: dict[TopicPartition, int] = {}
        for tp, (tid, ts) in queries.items():
            try:
                offset, batch = await batch_at_time(self.ms, tid, tp[1], ts)
            except ValueError as e:
                raise PlanningError(f"{tp[0]}-{tp[1]}: {e}") from e
            if batch is not None:
                # The first batch reaching ts holds the first record reaching it.
                exact = await record_offset(self._objects(), batch, ts)
                if exact is not None:
                    offset = max(exact, offset)
            out[tp] = offset
        return out

    async def read_plan(
        self,
        ranges: Mapping[TopicPartition, tuple[uuid.UUID, int, int]],
        *,
        fail_on_data_loss: bool,
        lease: LeaseSpec | None,
    ) -> ReadPlan:
        tps = list(ranges)
        try:
            leased = await plan_ranges(
                self.ms,
                [(tid, tp[1], s, e) for tp, (tid, s, e) in ranges.items()],
                lease_id=lease.lease_id if lease else None,
                ttl_ms=lease.ttl_ms if lease else 0,
                owner=lease.owner if lease else "",
            )
        except PlanConflict as e:
            raise PlanningError(str(e)) from e
        except LookupError as e:
            raise DataLossError(str(e)) from e
        plan = ReadPlan(
            objects_url=self.objects_url,
            journal_urls=self.journal,
            lease_expires_ms=leased.expires_at_ms,
        )
        for tp, r in zip(tps, leased.ranges, strict=True):
            if r.lost is not None:
                data_loss(
                    f"{tp[0]}-{tp[1]}: offsets {r.lost[0]}..{r.lost[1] - 1} deleted while planning",
                    fail_on_data_loss,
                )
                plan.starts[tp] = r.first
            plan.batches[tp] = r.batches
        keys = sorted({b.object_key for bs in plan.batches.values() for b in bs})
        plan.objects = {k: ObjectRef(leased.sizes.get(k, -1)) for k in keys}
        return plan

    async def renew_lease(
        self, lease: LeaseSpec, keys: list[str]
    ) -> tuple[list[str], dict[str, str]]:
        """Extend the lease; returns the keys already collected (no URLs: direct mode)."""
        grant = await self.ms.acquire_read_lease(
            lease.lease_id, keys, lease.ttl_ms, owner=lease.owner
        )
        return list(grant.missing), {}

    async def release_lease(self, lease_id: str) -> None:
        try:
            await self.ms.release_read_lease(lease_id)
        except MetastoreError as e:  # it expires on its own
            log.info("floe source: releasing lease %s failed: %s", lease_id, e)


async def record_offset(store: ObjectStore, b: BatchLocation, ts: int) -> int | None:
    """The first offset of batch ``b`` whose record timestamp is >= ``ts``."""
    if is_parquet_key(b.object_key):
        data = await store.get(b.object_key)
        return first_offset_in_rows(read_offset_range(data, b.base_offset, b.last_offset), ts)
    data = await store.get(b.object_key, b.byte_pos, b.byte_pos + b.byte_len)
    return first_offset_in_batch(data, b.base_offset, ts)
