"""The compactor pass: retention, merges, Parquet, GC, with pluggable task executors.

One pass (:meth:`Compactor.run_pass`)::

    retention -> L0->L1 merges -> Parquet -> Parquet merges -> L1->L2 merges (+ key compaction)
              -> delete objects retired longer than the grace period -> orphan sweep

Each phase is planned on the driver, its tasks run on an executor
(:class:`InProcessExecutor` here, :class:`compactor.spark.SparkExecutor` on a
cluster), and every result is committed from the driver with
``Metastore.swap_batches``, in plan order. A swap conflict (a concurrent
retention step, DeleteRecords, topic deletion or another compactor) leaves the
log untouched; the phase is re-planned up to ``max_attempts`` times.

With an :class:`~compactor.iceberg.IcebergSync`, topics with
``floe.iceberg.enable=true`` are also Iceberg tables: the table is reconciled
with the live Parquet objects after retention and after the Parquet phase, each
Parquet phase commits its snapshot between the PUTs and the swaps, and
snapshots naming an object are expired before the object is deleted.

``fail_point`` lets tests crash the compactor at ``after_put`` (new objects
written, nothing swapped), ``after_snapshot`` (the Iceberg snapshot committed,
nothing swapped) and ``after_swap`` (swapped, inputs not yet deleted).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from compactor import metrics
from compactor.config import CompactorConfig
from compactor.execute import execute_task
from compactor.gc import collect_orphans, delete_retired, retention_pass
from compactor.iceberg import WAREHOUSE_PREFIX, IcebergSync
from compactor.iceberg_rewrite import commit_merges
from compactor.parquet_plan import plan_parquet_merges
from compactor.planner import iceberg_enabled, plan_merges, plan_parquet
from compactor.tasks import ParquetTask, Task, TaskResult
from metastore.base import Clock, system_clock_ms
from metastore.protocol import Metastore
from metastore.types import TopicInfo
from objectstore.base import ObjectStore

log = logging.getLogger(__name__)

Progress = Callable[[str, int, int], None]  # (phase, done, total)


class TaskExecutor(Protocol):
    async def run(self, tasks: Sequence[Task]) -> list[TaskResult | BaseException]: ...


class InProcessExecutor:
    """Runs tasks on this event loop, ``concurrency`` at a time."""

    def __init__(self, store: ObjectStore, concurrency: int = 4) -> None:
        self.store = store
        self.concurrency = concurrency

    async def run(self, tasks: Sequence[Task]) -> list[TaskResult | BaseException]:
        sem = asyncio.Semaphore(self.concurrency)

        async def one(t: Task) -> TaskResult:
            async with sem:
                return await execute_task(t, self.store)

        return list(await asyncio.gather(*(one(t) for t in tasks), return_exceptions=True))


@dataclass(slots=True)
class PhaseSummary:
    tasks: int = 0
    committed: int = 0
    conflicts: int = 0
    failed: int = 0
    batches: int = 0
    bytes_read: int = 0
    bytes_written: int = 0
    records_dropped: int = 0
    poisoned: int = 0  # batches carried over undecoded


@dataclass(slots=True)
class PassSummary:
    phases: dict[str, PhaseSummary] = field(default_factory=dict)
    retention_partitions: int = 0
    retention_batches: int = 0
    retention_bytes: int = 0
    objects_retired: int = 0
    objects_deleted: int = 0
    objects_leased: int = 0  # retired but held by a live read lease
    orphans: list[str] = field(default_factory=list)
    seconds: float = 0.0
    # level -> (objects waiting, trigger) when a merge level stayed below its trigger
    below_trigger: dict[int, tuple[int, int]] = field(default_factory=dict)

    def lines(self) -> list[str]:
        out = [
            f"retention: {self.retention_partitions} partition(s) advanced, "
            f"{self.retention_batches} batch row(s) / {self.retention_bytes} B removed"
        ]
        for name, p in self.phases.items():
            out.append(
                f"{name}: {p.tasks} task(s), {p.committed} committed, {p.conflicts} conflict(s), "
                f"{p.failed} failed, {p.batches} batch(es), read {p.bytes_read} B, "
                f"wrote {p.bytes_written} B, {p.records_dropped} record(s) compacted away"
                + (f", {p.poisoned} undecodable batch(es) carried over" if p.poisoned else "")
            )
        for level, (n, trigger) in sorted(self.below_trigger.items()):
            out.append(
                f"merge L{level}->L{level + 1}: {n} object(s) waiting, below the trigger of "
                f"{trigger} (nothing merged; --force merges them anyway)"
            )
        out.append(
            f"gc: {self.objects_retired} object(s) retired, {self.objects_deleted} deleted, "
            f"{self.objects_leased} held by read leases, "
            f"{len(self.orphans)} orphan(s); pass took {self.seconds:.2f}s"
        )
        return out


class Compactor:
    def __init__(
        self,
        meta: Metastore,
        store: ObjectStore,
        config: CompactorConfig | None = None,
        *,
        executor: TaskExecutor | None = None,
        now_ms: Clock | None = None,
        fail_point: Callable[[str], None] | None = None,
        progress: Progress | None = None,
        iceberg: IcebergSync | None = None,
    ) -> None:
        self.meta = meta
        self.store = store
        self.config = config or CompactorConfig()
        self.executor = executor or InProcessExecutor(store, self.config.concurrency)
        self.now_ms: Clock = now_ms or system_clock_ms
        metrics.LAST_PROGRESS.set(self.now_ms() / 1000.0)  # starting counts as progress
        self.fail_point = fail_point or (lambda _name: None)
        self.progress = progress
        self.iceberg = iceberg
        self._topic_names: dict[uuid.UUID, str] = {}
        self._topics_seen: dict[uuid.UUID, TopicInfo] = {}

    async def _topics(self) -> dict[uuid.UUID, TopicInfo]:
        topics = {t.id: t for t in await self.meta.list_topics()}
        self._topic_names = {t.id: t.name for t in topics.values()}
        self._topics_seen = topics
        return topics

    async def _plan_parquet(self, topics: dict[uuid.UUID, TopicInfo]) -> list[ParquetTask]:
        tasks = await plan_parquet(self.meta, self.config, topics, self.now_ms())
        if self.iceberg is None:
            return tasks
        out = []
        for t in tasks:
            topic = topics.get(t.topic_id)
            if topic is not None and iceberg_enabled(topic) and t.value_format == "json":
                # Known fields keep the table's types; new ones are inferred.
                t = dataclasses.replace(t, value_schema=await self.iceberg.task_value_schema(topic))
            out.append(t)
        return out

    async def _before_delete(self, keys: Sequence[str]) -> None:
        if self.iceberg is not None:
            await self.iceberg.expire_for(self._topics_seen.values(), keys)

    async def run_phase(
        self, name: str, plan: Callable[[], Awaitable[Sequence[Task]]], summary: PassSummary
    ) -> PhaseSummary:
        ps = summary.phases.setdefault(name, PhaseSummary())
        for _attempt in range(self.config.max_attempts):
            tasks = list(await plan())
            if not tasks:
                break
            ps.tasks += len(tasks)
            if self.progress:
                self.progress(name, 0, len(tasks))
            results = await self.executor.run(tasks)
            self.fail_point("after_put")
            if self.iceberg is not None and name == "parquet":
                await self.iceberg.commit_parquet(self._topics_seen, tasks, results)
                self.fail_point("after_snapshot")
            elif self.iceberg is not None and name == "parquet merge":
                await commit_merges(self.iceberg, self._topics_seen, tasks, results)
                self.fail_point("after_snapshot")
            conflicts = 0
            for i, (task, res) in enumerate(zip(tasks, results, strict=True), 1):
                if isinstance(res, BaseException):
                    ps.failed += 1
                    metrics.TASKS.labels(name, "failed").inc()
                    log.warning("compactor: %s task %s failed: %r", task.kind, task.task_id, res)
                    continue
                for pb in res.poisoned:
                    topic = self._topic_names.get(pb.topic_id, str(pb.topic_id))
                    metrics.POISONED.labels(topic).inc()
                    log.warning(
                        "compactor: batch %s-%d [%d..%d] cannot be decoded (%s); carried over "
                        "undecoded, the rest of the partition is compacted",
                        topic,
                        pb.partition,
                        pb.base_offset,
                        pb.last_offset,
                        pb.reason,
                    )
                swap = await self.meta.swap_batches(
                    task.rows, res.replacements, res.new_objects, res.parquet_files
                )
                if swap.ok:
                    ps.committed += 1
                    ps.poisoned += len(res.poisoned)
                    metrics.TASKS.labels(name, "committed").inc()
                    ps.batches += len(task.rows)
                    ps.bytes_read += res.bytes_read
                    ps.bytes_written += res.bytes_written
                    ps.records_dropped += res.records_dropped
                    summary.objects_retired += len(swap.objects_deleting)
                else:
                    conflicts += 1
                    metrics.TASKS.labels(name, "conflict").inc()
                    log.info(
                        "compactor: %s task %s conflicted: %s",
                        task.kind,
                        task.task_id,
                        swap.message,
                    )
                metrics.LAST_PROGRESS.set(self.now_ms() / 1000.0)
                if self.progress:
                    self.progress(name, i, len(tasks))
            ps.conflicts += conflicts
            self.fail_point("after_swap")
            if not conflicts:
                break
        return ps

    async def run_pass(self, *, force: bool = False, orphans: bool = True) -> PassSummary:
        """One full pass; ``force`` merges levels below their trigger too."""
        started = time.monotonic()
        cfg = self.config
        summary = PassSummary()
        topics = await self._topics()
        r = await retention_pass(self.meta, topics, self.now_ms(), cfg.retention_max_batches)
        summary.retention_partitions = r.partitions_advanced
        summary.retention_batches = r.batches_removed
        summary.retention_bytes = r.bytes_removed
        summary.objects_retired += len(r.objects_retired)
        if self.iceberg is not None:
            # Retention/DeleteRecords (and a crash's leftovers) first leave the table.
            await self.iceberg.reconcile(topics.values())

        await self.run_phase(
            "merge L0->L1",
            lambda: plan_merges(self.meta, 0, cfg, topics, self.now_ms(), force=force),
            summary,
        )
        await self.run_phase("parquet", lambda: self._plan_parquet(topics), summary)
        await self.run_phase(
            "parquet merge",
            lambda: plan_parquet_merges(self.meta, cfg, topics, self.now_ms()),
            summary,
        )
        if self.iceberg is not None:
            # Files whose swap conflicted leave the table again.
            await self.iceberg.reconcile(topics.values())
        await self.run_phase(
            "merge L1->L2",
            lambda: plan_merges(self.meta, 1, cfg, topics, self.now_ms(), force=force),
            summary,
        )
        deleted = await delete_retired(
            self.meta,
            self.store,
            self.now_ms(),
            cfg.delete_grace_ms,
            before_delete=self._before_delete,
        )
        summary.objects_deleted = len(deleted)
        metrics.DELETED.inc(len(deleted))
        summary.objects_leased = await self.meta.leased_object_count()
        metrics.LEASED.set(summary.objects_leased)
        if summary.objects_leased:
            log.info("compactor: %d retired object(s) held by read leases", summary.objects_leased)
        if orphans:
            found = await collect_orphans(
                self.meta,
                self.store,
                cfg.orphan_grace_ms,
                prefix=cfg.orphan_prefix,
                exclude=(WAREHOUSE_PREFIX,),
                before_delete=self._before_delete,
            )
            summary.orphans = [o.key for o in found]
            if self.iceberg is not None:
                # Manifests and manifest lists of expired snapshots (wall clock: the
                # store's mtimes are).
                summary.orphans += await self.iceberg.collect_metadata_orphans(
                    topics.values(), cfg.orphan_grace_ms, int(time.time() * 1000)
                )
        if not force:
            for level, trigger in ((0, cfg.l0_trigger), (1, cfg.l1_trigger)):
                waiting = len(await self.meta.list_compaction_objects(level, limit=trigger))
                if 0 < waiting < trigger:
                    summary.below_trigger[level] = (waiting, trigger)
        summary.seconds = time.monotonic() - started
        metrics.PASSES.inc()
        metrics.LAST_PROGRESS.set(self.now_ms() / 1000.0)
        return summary

    async def run_forever(
        self,
        *,
        on_pass: Callable[[PassSummary], None] | None = None,
        stop: asyncio.Event | None = None,
    ) -> None:
        stop = stop or asyncio.Event()
        while not stop.is_set():
            try:
                s = await self.run_pass()
                if on_pass:
                    on_pass(s)
            except Exception:  # keep running: the next pass re-plans from the metastore
                metrics.PASS_FAILURES.inc()
                log.exception("compactor pass failed")
            try:
                await asyncio.wait_for(stop.wait(), self.config.interval_ms / 1000.0)
            except TimeoutError:
                pass
