"""The ``floe`` PySpark data source: Spark's Kafka source, reading Floe's storage directly.

::

    spark.dataSource.register(FloeDataSource)        # or auto-registered via pyspark_floe
    df = (spark.readStream.format("floe")
          .option("kafka.bootstrap.servers", "agent-1:9092")
          .option("subscribe", "events")
          .option("maxOffsetsPerTrigger", 100_000)
          .load())

Options and columns are those of ``format("kafka")`` (see
:mod:`spark_source.options` and ``docs/spark.md``). The driver plans through
the agents' planning API (or, with ``metastore`` + ``objects``, from the
metastore itself); every plan holds a read lease on its objects
(:mod:`spark_source.leases`); executors read segment byte ranges and Parquet
files from object storage (:mod:`spark_source.reader`). Readers are pickled
by Spark, so they hold only options and small state, never connections.
"""

from __future__ import annotations

import datetime as dt
import logging
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    EqualTo,
    Filter,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    InputPartition,
    LessThan,
    LessThanOrEqual,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    ReadMinRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from spark_source import driver
from spark_source.leases import StreamLeases, TaskLease, TaskLeaseKeeper, new_lease, wall_ms
from spark_source.offsets import Offsets, backlog, from_json, rate_limit, to_json
from spark_source.options import SourceOptions, parse_options
from spark_source.plan import ObjectRef, ReadTask
from spark_source.reader import RowFilter, read_tasks

log = logging.getLogger("spark_source")

SCHEMA_DDL = (
    "key binary, value binary, topic string, partition int, offset bigint, "
    "timestamp timestamp, timestampType int"
)
HEADERS_DDL = ", headers array<struct<key: string, value: binary>>"


def spark_schema(include_headers: bool) -> str:
    return SCHEMA_DDL + (HEADERS_DDL if include_headers else "")


class FloePartition(InputPartition):
    """One Spark task: read tasks (offset ranges with their spans) plus where to read."""

    def __init__(
        self,
        index: int,
        tasks: Sequence[ReadTask],
        objects: str | None,
        include_headers: bool,
        row_filter: RowFilter | None = None,
        refs: dict[str, ObjectRef] | None = None,
        lease: TaskLease | None = None,
        journal: Sequence[str] = (),
    ) -> None:
        super().__init__(index)
        self.index = index
        self.tasks = tuple(tasks)
        self.objects = objects
        self.include_headers = include_headers
        self.row_filter = row_filter
        self.refs = refs or {}
        self.lease = lease
        self.journal = tuple(journal)  # journal bucket URLs, for ``journal/`` keys

    def __repr__(self) -> str:
        ranges = ", ".join(f"{t.topic}-{t.partition}[{t.start},{t.end})" for t in self.tasks)
        return f"FloePartition({self.index}: {ranges})"


def _read(opts: SourceOptions, partition: InputPartition) -> Iterator[Any]:
    # Spark hands an empty plan one InputPartition(None): nothing to read.
    if not isinstance(partition, FloePartition) or not partition.tasks:
        return iter(())
    assert partition.objects is not None
    refs = dict(partition.refs)
    keeper = TaskLeaseKeeper(opts, partition.lease, refs)
    keeper.tick()

    def gen() -> Iterator[Any]:
        for batch in read_tasks(
            partition.tasks,
            partition.objects or "",
            include_headers=partition.include_headers,
            row_filter=partition.row_filter,
            refs=refs,
            timeout_ms=opts.poll_timeout_ms,
            journal=partition.journal,
        ):
            yield batch
            keeper.tick()

    return gen()


def _partitions(
    opts: SourceOptions,
    tasks: list[ReadTask],
    plan: driver.ReadPlan,
    flt: RowFilter | None = None,
    lease: TaskLease | None = None,
) -> list[FloePartition]:
    objects = plan.objects_url or opts.objects
    journal = opts.journal or plan.journal_urls
    out = []
    for i, t in enumerate(tasks):
        keys = {sp.key for sp in t.spans}
        refs = {k: plan.objects[k] for k in sorted(keys) if k in plan.objects}
        out.append(
            FloePartition(i, [t], objects, opts.include_headers, flt, refs, lease, journal)
        )
    if not out:
        # An empty read (empty or missing topic, start == end): one partition, no rows.
        out.append(FloePartition(0, [], objects, opts.include_headers))
    return out


class FloeDataSource(DataSource):
    """``format("floe")``: batch and streaming reads of Floe topics."""

    @classmethod
    def name(cls) -> str:
        return "floe"

    def schema(self) -> str:
        include = str(self.options.get("includeHeaders", "false")).strip().lower() == "true"
        return spark_schema(include)

    def reader(self, schema: StructType) -> DataSourceReader:
        opts = parse_options(self.options, streaming=False)
        if opts.pushdown_filters:
            return FloePushdownBatchReader(opts)
        return FloeBatchReader(opts)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return FloeStreamReader(parse_options(self.options, streaming=True))


# -- batch ----------------------------------------------------------------------------


class FloeBatchReader(DataSourceReader):
    """``spark.read``: offsets from ``startingOffsets``/timestamps to ``endingOffsets``."""

    def __init__(self, options: SourceOptions) -> None:
        self.opts = options
        self.partition_filter: frozenset[int] | None = None
        self.offset_bounds: tuple[int, int] | None = None  # [lo, hi)
        self.ts_min_ms: int | None = None
        self.row_filter: RowFilter | None = None

    def plan(self) -> tuple[list[ReadTask], driver.ReadPlan, TaskLease]:
        opts = self.opts
        lease = new_lease(opts, "batch", streaming=False)

        async def go(b: driver.Backend) -> tuple[list[ReadTask], driver.ReadPlan]:
            state = await b.partition_state(opts)
            if self.partition_filter is not None:
                state = {tp: s for tp, s in state.items() if tp[1] in self.partition_filter}
            start = await driver.resolve(
                b, opts.starting, state, starting=True, strategy=opts.starting_strategy
            )
            end = await driver.resolve(b, opts.ending, state, starting=False)
            if self.ts_min_ms is not None:
                pushed = await driver.resolve(
                    b,
                    driver.OffsetSpec("timestamp", timestamp=self.ts_min_ms),
                    state,
                    starting=True,
                    strategy="latest",
                )
                start = {tp: max(o, pushed[tp]) for tp, o in start.items()}
            ranges: dict[tuple[str, int], tuple[int, int]] = {}
            for tp in sorted(state):
                s, e = start[tp], end[tp]
                if self.offset_bounds is not None:
                    s, e = max(s, self.offset_bounds[0]), min(e, self.offset_bounds[1])
                if e <= s:
                    continue
                ranges[tp] = driver.check_range(tp, s, e, state[tp], opts.fail_on_data_loss)
            return await driver.plan_tasks(b, opts, ranges, state, lease)

        planned_at = wall_ms()
        tasks, plan = driver.plan_sync(opts, go)
        return tasks, plan, TaskLease(lease, planned_at)

    def partitions(self) -> Sequence[FloePartition]:
        tasks, plan, lease = self.plan()
        return _partitions(self.opts, tasks, plan, self.row_filter, lease)

    def read(self, partition: InputPartition) -> Iterator[Any]:
        return _read(self.opts, partition)


def _col(f: Filter) -> str | None:
    attr: tuple[str, ...] = tuple(getattr(f, "attribute", ()))
    return attr[0].lower() if len(attr) == 1 else None


def _micros(v: Any) -> int | None:
    if isinstance(v, dt.datetime):
        if v.tzinfo is None:
            v = v.replace(tzinfo=dt.UTC)
        return int(v.timestamp() * 1_000_000)
    return None


class FloePushdownBatchReader(FloeBatchReader):
    """Batch reader that prunes by ``partition``, ``offset`` and ``timestamp`` predicates.

    Opt-in (``pushdownFilters=true``) because PySpark refuses a reader with
    ``pushFilters`` unless ``spark.sql.python.filterPushdown.enabled`` is set.
    Every filter is handed back to Spark, which evaluates it again: pushdown
    can only skip data, never change a result.
    """

    def pushFilters(self, filters: list[Filter]) -> Iterable[Filter]:
        lo, hi = 0, 1 << 62
        ts_lo: int | None = None
        ts_hi: int | None = None
        parts: set[int] | None = None
        for f in filters:
            col = _col(f)
            value = getattr(f, "value", None)
            if col == "partition":
                if isinstance(f, EqualTo) and isinstance(value, int):
                    got = {value}
                elif isinstance(f, In) and all(isinstance(x, int) for x in f.value):
                    got = set(f.value)
                else:
                    got = None
                if got is not None:
                    parts = got if parts is None else parts & got
            elif col == "offset" and isinstance(value, int):
                if isinstance(f, EqualTo):
                    lo, hi = max(lo, value), min(hi, value + 1)
                elif isinstance(f, GreaterThan):
                    lo = max(lo, value + 1)
                elif isinstance(f, GreaterThanOrEqual):
                    lo = max(lo, value)
                elif isinstance(f, LessThan):
                    hi = min(hi, value)
                elif isinstance(f, LessThanOrEqual):
                    hi = min(hi, value + 1)
            elif col == "timestamp":
                us = _micros(value)
                if us is None:
                    continue
                if isinstance(f, GreaterThan):
                    ts_lo = max(ts_lo or us + 1, us + 1)
                elif isinstance(f, GreaterThanOrEqual):
                    ts_lo = max(ts_lo or us, us)
                elif isinstance(f, LessThan):
                    ts_hi = min(ts_hi if ts_hi is not None else us - 1, us - 1)
                elif isinstance(f, LessThanOrEqual):
                    ts_hi = min(ts_hi if ts_hi is not None else us, us)
                elif isinstance(f, EqualTo):
                    ts_lo, ts_hi = us, us
        self.partition_filter = frozenset(parts) if parts is not None else None
        self.offset_bounds = (lo, hi) if (lo, hi) != (0, 1 << 62) else None
        self.ts_min_ms = ts_lo // 1000 if ts_lo is not None else None
        if ts_lo is not None or ts_hi is not None:
            self.row_filter = RowFilter(ts_lo, ts_hi)
        return filters


# -- streaming ------------------------------------------------------------------------


def wall_clock_ms() -> int:
    return int(time.time() * 1000)


class FloeStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batch reader with admission control and ``Trigger.AvailableNow``.

    Offsets are Kafka's checkpoint JSON. ``maxOffsetsPerTrigger`` caps a batch
    (spread over partitions by backlog); ``minOffsetsPerTrigger`` holds a batch
    back until enough records arrived or ``maxTriggerDelay`` passed since the
    last one (``clock`` is injectable for tests). New partitions start at 0
    (earliest); offsets below the log start are data loss (``failOnDataLoss``).
    """

    def __init__(self, options: SourceOptions, clock: Callable[[], int] = wall_clock_ms) -> None:
        self.opts = options
        self.clock = clock
        self.last_trigger_ms = 0
        self.available_now: Offsets | None = None
        self.latest: Offsets | None = None
        self._leases: StreamLeases | None = None

    # offsets

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_leases"] = None  # a thread and a lock: driver-side only
        return state

    def _lease_keeper(self) -> StreamLeases:
        if self._leases is None:
            self._leases = StreamLeases(self.opts)
        return self._leases

    def _state(self) -> driver.State:
        return driver.plan_sync(self.opts, lambda b: b.partition_state(self.opts))

    def initialOffset(self) -> dict:
        opts = self.opts

        async def go(b: driver.Backend) -> Offsets:
            state = await b.partition_state(opts)
            return await driver.resolve(
                b, opts.starting, state, starting=True, strategy=opts.starting_strategy
            )

        return to_json(driver.plan_sync(opts, go))

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.opts.max_offsets_per_trigger is not None:
            return ReadMaxRows(self.opts.max_offsets_per_trigger)
        if self.opts.min_offsets_per_trigger is not None:
            return ReadMinRows(self.opts.min_offsets_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self.available_now = {tp: s.high_watermark for tp, s in self._state().items()}

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        state = self._state()
        return to_json(self.next_end(from_json(start), state, limit))

    def next_end(self, start: Offsets, state: driver.State, limit: ReadLimit) -> Offsets:
        """The end offset of the next batch (pure given ``state`` and the clock)."""
        latest = {tp: s.high_watermark for tp, s in state.items()}
        self.latest = dict(latest)
        if self.available_now is not None:
            # Never beyond what existed when the query began; partitions created
            # since then are read up to where they were when first seen.
            for tp in latest:
                if tp in self.available_now:
                    latest[tp] = min(latest[tp], self.available_now[tp])
                else:
                    self.available_now[tp] = latest[tp]
        for tp in sorted(set(start) - set(state)):
            driver.data_loss(f"{tp[0]}-{tp[1]} no longer exists", self.opts.fail_on_data_loss)
        # Where each partition really starts: new ones at 0 (earliest), lost ones skip.
        begin: Offsets = {}
        for tp, st in state.items():
            b = start.get(tp, 0)
            if b < st.log_start and not self.opts.fail_on_data_loss:
                b = st.log_start  # partitions() warns about the skipped offsets
            if latest[tp] < b:
                driver.data_loss(
                    f"{tp[0]}-{tp[1]}: the log ends at {latest[tp]}, before offset {b} already "
                    "read (topic recreated?)",
                    self.opts.fail_on_data_loss,
                )
                b = latest[tp]
            begin[tp] = b
        if isinstance(limit, ReadAllAvailable):
            return latest
        max_rows = limit.max_rows if isinstance(limit, ReadMaxRows) else None
        min_rows = self.opts.min_offsets_per_trigger
        if isinstance(limit, ReadMinRows):
            min_rows = limit.min_rows
        if min_rows is not None and self.available_now is None:
            now = self.clock()
            if now - self.last_trigger_ms < self.opts.max_trigger_delay_ms and (
                backlog(begin, latest) < min_rows
            ):
                return dict(start)  # hold the batch back: same offsets, no new batch
            self.last_trigger_ms = now
        if max_rows is not None:
            return rate_limit(begin, latest, max_rows)
        return latest

    def reportLatestOffset(self) -> dict | None:
        return to_json(self.latest) if self.latest is not None else None

    # planning and reading

    def partitions(self, start: dict, end: dict) -> Sequence[FloePartition]:
        s_off, e_off = from_json(start), from_json(end)
        opts = self.opts
        keeper = self._lease_keeper()
        lease = keeper.new()

        async def go(b: driver.Backend) -> tuple[list[ReadTask], driver.ReadPlan]:
            state = await b.partition_state(opts)
            ranges: dict[tuple[str, int], tuple[int, int]] = {}
            for tp, e in sorted(e_off.items()):
                s = s_off.get(tp)
                if s is None:
                    s = 0  # a partition new in this batch starts at the beginning
                    st = state.get(tp)
                    if st is not None and st.log_start > 0:
                        driver.data_loss(
                            f"added partition {tp[0]}-{tp[1]} starts at {st.log_start}, not 0",
                            opts.fail_on_data_loss,
                        )
                if e <= s:
                    continue
                ranges[tp] = driver.check_range(tp, s, e, state.get(tp), opts.fail_on_data_loss)
            return await driver.plan_tasks(b, opts, ranges, state, lease)

        tasks, plan = driver.plan_sync(opts, go)
        if plan.objects:
            keeper.hold(lease, sorted(plan.objects), e_off)  # renewed by the driver until commit
        return _partitions(opts, tasks, plan)

    def read(self, partition: InputPartition) -> Iterator[Any]:
        return _read(self.opts, partition)

    def commit(self, end: dict) -> None:
        # Spark is done with every batch ending at or before ``end``.
        self._lease_keeper().release_all(from_json(end))

    def stop(self) -> None:
        if self._leases is not None:
            self._leases.release_all()
            self._leases.stop()
