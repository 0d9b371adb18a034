"""Driver-side planning against the metastore: topics, offset bounds, batch lookup.

Only the Spark driver (its Python planner worker) talks to the metastore; each
call opens it, does its work and closes it again, so the readers Spark pickles
carry a URL and never a connection. Executors receive :class:`~spark_source.plan.ReadTask`\\ s.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import TypeVar

from metastore import Metastore, open_metastore
from metastore.types import BatchLocation, ErrorCode, TopicInfo
from spark_source.offsets import Offsets, TopicPartition
from spark_source.options import EARLIEST, LATEST, OffsetSpec, OptionError, SourceOptions
from spark_source.plan import ReadTask, records_per_task, split_range

log = logging.getLogger("spark_source")

T = TypeVar("T")
FIND_PAGE_BATCHES = 5000
FIND_PAGE_BYTES = 1 << 40


class DataLossError(RuntimeError):
    """Offsets the query needs are gone (retention, DeleteRecords, deleted topic)."""


@dataclass(frozen=True, slots=True)
class PartitionState:
    topic_id: uuid.UUID
    log_start: int
    high_watermark: int


State = dict[TopicPartition, PartitionState]


def run_sync(fn: Callable[[], Awaitable[T]]) -> T:
    """Run a coroutine from synchronous Spark callbacks (in a thread if a loop runs here)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(fn())  # type: ignore[arg-type]
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(lambda: asyncio.run(fn())).result()  # type: ignore[arg-type]


async def with_metastore(url: str, fn: Callable[[Metastore], Awaitable[T]]) -> T:
    ms = await open_metastore(url, auto_migrate=False)
    try:
        return await fn(ms)
    finally:
        await ms.close()


async def topics_for(ms: Metastore, opts: SourceOptions) -> dict[str, TopicInfo]:
    """The topics the source reads now, by name."""
    if opts.subscribe or opts.assign is not None:
        names = opts.subscribe or tuple(sorted(opts.assign or {}))
        out: dict[str, TopicInfo] = {}
        for name in names:
            t = await ms.get_topic(name)
            if t is not None:
                out[name] = t
        return out
    return {t.name: t for t in await ms.list_topics() if opts.matches(t.name)}


async def partition_state(ms: Metastore, opts: SourceOptions) -> State:
    """Log start and high watermark of every partition the source reads."""
    topics = await topics_for(ms, opts)
    by_id = {t.id: t for t in topics.values()}
    state: State = {}
    for s in await ms.partition_summaries():
        t = by_id.get(s.topic_id)
        if t is None or s.partition >= t.partitions:
            continue
        if opts.assign is not None and s.partition not in opts.assign.get(t.name, ()):
            continue
        state[(t.name, s.partition)] = PartitionState(t.id, s.log_start_offset, s.high_watermark)
    return state


async def resolve(
    ms: Metastore,
    spec: OffsetSpec,
    state: State,
    *,
    starting: bool,
    strategy: str = "error",
) -> Offsets:
    """Concrete offsets of ``spec`` for every partition in ``state``.

    ``earliest``/``latest`` are the log start and high watermark; a timestamp
    resolves, like Kafka's ListOffsets, to the first offset whose timestamp is at
    or after it (none: the high watermark as an ending; as a starting point an
    error unless ``startingOffsetsByTimestampStrategy`` is ``latest``).
    Partitions a JSON spec does not name: earliest when starting, latest when
    ending (Kafka requires them all; we are lenient and say so in a warning).
    """
    out: Offsets = {}
    for tp, st in sorted(state.items()):
        topic, part = tp
        if spec.kind == "earliest":
            out[tp] = st.log_start
        elif spec.kind == "latest":
            out[tp] = st.high_watermark
        elif spec.kind == "offsets":
            off = spec.per_partition.get(topic, {}).get(part)
            if off is None:
                log.warning(
                    "no %s offset given for %s-%d", "starting" if starting else "ending", *tp
                )
                off = EARLIEST if starting else LATEST
            out[tp] = (
                st.log_start if off == EARLIEST else st.high_watermark if off == LATEST else off
            )
        else:
            ts = spec.timestamp
            if spec.kind == "timestamps":
                ts = spec.per_partition.get(topic, {}).get(part)
            if ts is None:
                out[tp] = st.log_start if starting else st.high_watermark
                continue
            r = await ms.list_offsets(st.topic_id, part, ts)
            if r.error != ErrorCode.NONE:
                raise OptionError(
                    f"cannot resolve timestamp {ts} on {topic}-{part}: {r.error.name}"
                )
            if r.offset < 0:
                if starting and strategy == "error":
                    raise OptionError(
                        f"no offset of {topic}-{part} has a timestamp >= {ts} "
                        "(set startingOffsetsByTimestampStrategy=latest to start at the end)"
                    )
                out[tp] = st.high_watermark
            else:
                out[tp] = r.offset
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
        _data_loss(f"{tp[0]}-{tp[1]} no longer exists (topic deleted?)", fail_on_data_loss)
        return start, start
    if end > st.high_watermark:
        _data_loss(
            f"{tp[0]}-{tp[1]}: offset {end} is beyond the log end {st.high_watermark} "
            "(topic recreated?)",
            fail_on_data_loss,
        )
        end = st.high_watermark
    if start < st.log_start:
        _data_loss(
            f"{tp[0]}-{tp[1]}: offsets {start}..{st.log_start - 1} were deleted before they "
            "were read; skipping to the log start",
            fail_on_data_loss,
        )
        start = min(st.log_start, end) if end >= start else st.log_start
    return start, max(start, end)


def _data_loss(msg: str, fail: bool) -> None:
    if fail:
        raise DataLossError(
            msg + ". Set failOnDataLoss=false to skip lost offsets with a warning instead."
        )
    log.warning("data loss: %s", msg)


async def find_range(
    ms: Metastore,
    topic_id: uuid.UUID,
    partition: int,
    start: int,
    end: int,
    *,
    fail_on_data_loss: bool = True,
) -> list[BatchLocation]:
    """Every batch row holding an offset of ``[start, end)``."""
    out: list[BatchLocation] = []
    offset = start
    while offset < end:
        r = await ms.find_batches(
            topic_id, partition, offset, FIND_PAGE_BYTES, max_batches=FIND_PAGE_BATCHES
        )
        if r.error == ErrorCode.OFFSET_OUT_OF_RANGE and offset < r.log_start_offset:
            # Retention moved the log start since the offsets were checked.
            _data_loss(
                f"partition {partition}: offsets {offset}..{r.log_start_offset - 1} deleted "
                "while planning",
                fail_on_data_loss,
            )
            offset = r.log_start_offset
            continue
        if r.error != ErrorCode.NONE:
            raise DataLossError(
                f"partition {partition}: offset {offset} unreadable ({r.error.name}, log "
                f"start {r.log_start_offset}, end {r.high_watermark})"
            )
        if not r.batches:
            break
        for b in r.batches:
            if b.base_offset >= end:
                return out
            out.append(b)
        offset = r.batches[-1].last_offset + 1
    return out


async def plan_tasks(
    ms: Metastore,
    opts: SourceOptions,
    ranges: Mapping[TopicPartition, tuple[int, int]],
    state: State,
) -> list[ReadTask]:
    """Read tasks for ``ranges`` (already clamped), deterministic for given metastore state."""
    total = sum(max(0, e - s) for s, e in ranges.values())
    cap = records_per_task(total, opts.min_partitions, opts.max_records_per_partition)
    tasks: list[ReadTask] = []
    for tp in sorted(ranges):
        start, end = ranges[tp]
        if end <= start:
            continue
        batches = await find_range(
            ms, state[tp].topic_id, tp[1], start, end, fail_on_data_loss=opts.fail_on_data_loss
        )
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
    return tasks
