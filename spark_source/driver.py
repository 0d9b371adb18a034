"""Driver-side planning: offsets, ranges and read tasks, over a planning backend.

Where it sits: the Spark driver (its Python planner worker) calls these
functions from the source's ``partitions()`` / ``latestOffset()``. They talk
to a :class:`~spark_source.backend.Backend`: the agents' planning API (:mod:`spark_source.agents`,
``kafka.bootstrap.servers``) or the metastore itself (:mod:`spark_source.direct`,
``metastore`` + ``objects``). Each call opens the backend, does its work and
closes it again, so the readers Spark pickles carry options, never connections.
Executors receive :class:`~spark_source.plan.ReadTask`\\ s.

Kafka's semantics live here: offsets and timestamps resolved per partition
(the first *record* whose timestamp is >= T), JSON offsets that must name
every partition, data loss reported through ``failOnDataLoss``.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping
from typing import TypeVar

from metastore.types import MetastoreError
from spark_source.backend import (
    Backend,
    LeaseSpec,
    PartitionState,
    PlanningError,
    ReadPlan,
    State,
    data_loss,
)
from spark_source.offsets import Offsets, TopicPartition
from spark_source.options import EARLIEST, LATEST, OffsetSpec, OptionError, SourceOptions
from spark_source.plan import ReadTask, records_per_task, split_range

log = logging.getLogger("spark_source")

T = TypeVar("T")


def run_sync(fn: Callable[[], Awaitable[T]]) -> T:
    """Run a coroutine from synchronous Spark callbacks (in a thread if a loop runs here)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(fn())  # type: ignore[arg-type]
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(lambda: asyncio.run(fn())).result()  # type: ignore[arg-type]


async def open_backend(opts: SourceOptions) -> Backend:
    # Imported here, not at the top: executors import this module (through the
    # source) but never plan, so they need not load aiohttp or the metastore client.
    if opts.direct:
        from spark_source.direct import MetastoreBackend

        return await MetastoreBackend.open(opts)
    from spark_source.agents import AgentBackend

    return await AgentBackend.open(opts)


def plan_sync(opts: SourceOptions, fn: Callable[[Backend], Awaitable[T]]) -> T:
    """``fn(backend)`` on a fresh backend, retried ``fetchOffset.numRetries`` times
    (``fetchOffset.retryIntervalMs`` apart) when the backend fails, as Kafka's
    source retries its offset fetches. Option and data-loss errors are not retried."""

    async def once() -> T:
        backend = await open_backend(opts)
        try:
            return await fn(backend)
        finally:
            await backend.close()

    attempt = 0
    while True:
        try:
            return run_sync(once)
        except (PlanningError, MetastoreError, OSError) as e:
            if attempt >= opts.fetch_offset_retries:
                raise
            attempt += 1
            log.warning("floe source: planning failed (%s); retry %d", e, attempt)
            time.sleep(opts.fetch_offset_retry_interval_ms / 1000.0)


def _must_name_all(name: str, spec: OffsetSpec, state: State) -> None:
    """Kafka's source requires JSON offsets/timestamps for exactly the assigned partitions."""
    specified = {(t, p) for t, ps in spec.per_partition.items() for p in ps}
    assigned = set(state)
    if specified != assigned:
        raise OptionError(
            f"If {name} contains specific offsets, you must specify all TopicPartitions. "
            "Use -1 for latest, -2 for earliest. "
            f"Specified: {_tps(specified)} Assigned: {_tps(assigned)}"
        )


def _tps(tps: set[TopicPartition]) -> str:
    return "{" + ", ".join(f"{t}-{p}" for t, p in sorted(tps)) + "}"


async def resolve(
    backend: Backend,
    spec: OffsetSpec,
    state: State,
    *,
    starting: bool,
    strategy: str = "error",
) -> Offsets:
    """Concrete offsets of ``spec`` for every partition in ``state``.

    ``earliest``/``latest`` are the log start and high watermark; a timestamp
    resolves, like Kafka's ListOffsets, to the first offset whose record
    timestamp is at or after it (none: the high watermark as an ending; as a
    starting point an error unless ``startingOffsetsByTimestampStrategy`` is
    ``latest``). JSON specs must name every partition, as in Kafka's source.
    """
    which = "starting" if starting else "ending"
    out: Offsets = {}
    if spec.kind in ("offsets", "timestamps"):
        name = f"{which}Offsets" + ("ByTimestamp" if spec.kind == "timestamps" else "")
        _must_name_all(name, spec, state)
    queries: dict[TopicPartition, tuple[uuid.UUID, int]] = {}
    for tp, st in sorted(state.items()):
        topic, part = tp
        if spec.kind == "earliest":
            out[tp] = st.log_start
        elif spec.kind == "latest":
            out[tp] = st.high_watermark
        elif spec.kind == "offsets":
            off = spec.per_partition[topic][part]
            out[tp] = (
                st.log_start if off == EARLIEST else st.high_watermark if off == LATEST else off
            )
        else:
            ts = spec.timestamp if spec.kind == "timestamp" else spec.per_partition[topic][part]
            assert ts is not None
            queries[tp] = (st.topic_id, ts)
    if queries:
        found = await backend.offsets_for_times(queries)
        for tp, (_, ts) in sorted(queries.items()):
            off = found.get(tp, -1)
            if off < 0:
                if starting and strategy == "error":
                    raise OptionError(
                        f"No offset matched from request of topic-partition {tp[0]}-{tp[1]} and "
                        f"timestamp {ts} (no offset of it has a timestamp >= {ts}; set "
                        "startingOffsetsByTimestampStrategy=latest to start at the end)"
                    )
                off = state[tp].high_watermark
            out[tp] = off
    return out


def check_range(
    tp: TopicPartition,
    start: int,
    end: int,
    st: PartitionState | None,
    fail_on_data_loss: bool,
) -> tuple[int, int]:
    """Clamp ``[start, end)`` to the log; report data loss Kafka's way."""
    if st is None:
        data_loss(f"{tp[0]}-{tp[1]} no longer exists (topic deleted?)", fail_on_data_loss)
        return start, start
    if end > st.high_watermark:
        data_loss(
            f"{tp[0]}-{tp[1]}: offset {end} is beyond the log end {st.high_watermark} "
            "(topic recreated?)",
            fail_on_data_loss,
        )
        end = st.high_watermark
    if start < st.log_start:
        data_loss(
            f"{tp[0]}-{tp[1]}: offsets {start}..{st.log_start - 1} were deleted before they "
            "were read; skipping to the log start",
            fail_on_data_loss,
        )
        start = min(st.log_start, end) if end >= start else st.log_start
    return start, max(start, end)


async def plan_tasks(
    backend: Backend,
    opts: SourceOptions,
    ranges: Mapping[TopicPartition, tuple[int, int]],
    state: State,
    lease: LeaseSpec | None = None,
) -> tuple[list[ReadTask], ReadPlan]:
    """Read tasks for ``ranges`` (already clamped), deterministic for given log state;
    with ``lease``, the objects they read are leased before this returns."""
    wanted = {
        tp: (state[tp].topic_id, s, e) for tp, (s, e) in sorted(ranges.items()) if e > s
    }
    if not wanted:
        return [], ReadPlan()
    plan = await backend.read_plan(wanted, fail_on_data_loss=opts.fail_on_data_loss, lease=lease)
    total = sum(e - s for _, s, e in wanted.values())
    cap = records_per_task(total, opts.min_partitions, opts.max_records_per_partition)
    tasks: list[ReadTask] = []
    for tp, (_, start, end) in wanted.items():
        # Retention may have moved the log start while planning (failOnDataLoss said so).
        start = max(start, plan.starts.get(tp, start))
        batches = plan.batches.get(tp, [])
        tasks.extend(
            split_range(
                tp[0],
                tp[1],
                start,
                end,
                batches,
                max_bytes=opts.max_bytes_per_split,
                max_records=cap,
            )
        )
    if any(state[tp].aborted for tp in wanted):
        tasks = [_with_aborted(t, state[(t.topic, t.partition)].aborted) for t in tasks]
    return tasks, plan


def _with_aborted(task: ReadTask, aborted: tuple[tuple[int, int, int], ...]) -> ReadTask:
    mine = tuple(a for a in aborted if a[2] >= task.start and a[1] < task.end)
    return dataclasses.replace(task, aborted=mine) if mine else task
