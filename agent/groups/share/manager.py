"""Share partitions on this agent: load, decide, compare-and-swap, answer.

Where it sits: the ShareFetch and ShareAcknowledge handlers call
:class:`SharePartitionManager` (one per broker, :func:`manager_for`). Every
share partition lives in the metastore (``metastore/share.py``); this agent
keeps the last version it read or wrote as a cache. A change is computed by
``agent.groups.share.partition`` on that copy and stored with
``share_partition_cas``: if another agent changed the partition meanwhile, the
write fails, the copy is re-read and the change decided again. Nothing is
answered before its write returned, so an acknowledged record is never handed
out again, and records a dead consumer held come back when their lock expires
(expiry is evaluated on every read, against the injected clock).

Group configs (``share.*``) come from the metastore, cached for a second.

/metrics: ``floe_share_group_records{group,state}`` counts the in-flight records
(available, acquired, acknowledged, archived between SPSO and SPEO) of the share
partitions this agent last wrote, updated on every write.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import uuid
import weakref
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from prometheus_client import Gauge

from agent.groups.share import partition as sp
from agent.metrics import METRICS
from kafka_protocol.errors import ErrorCode
from metastore import MetastoreError
from metastore.types import ErrorCode as MetaError
from metastore.types import SharePartitionState

if TYPE_CHECKING:
    from agent.broker import Broker

log = logging.getLogger(__name__)

T = TypeVar("T")
Key = tuple[str, uuid.UUID, int]

DEFAULTS: dict[str, str] = {
    "share.record.lock.duration.ms": "30000",
    "share.delivery.count.limit": "5",
    "share.partition.max.record.locks": "2000",
    "share.auto.offset.reset": "latest",
    "share.session.timeout.ms": "45000",
    "share.heartbeat.interval.ms": "5000",
    "share.isolation.level": "read_uncommitted",
}
INT_CONFIGS = {
    "share.record.lock.duration.ms": (1000, 3_600_000),
    "share.delivery.count.limit": (2, 10),
    "share.partition.max.record.locks": (100, 10_000),
    "share.session.timeout.ms": (1000, 3_600_000),
    "share.heartbeat.interval.ms": (500, 3_600_000),
}
ENUM_CONFIGS = {
    "share.auto.offset.reset": ("latest", "earliest"),
    "share.isolation.level": ("read_uncommitted",),
}


def validate_config(name: str, value: str | None) -> str | None:
    """None if ``name=value`` is a valid group config, else the reason."""
    if name not in DEFAULTS:
        return f"unknown group config {name}"
    if value is None:
        return None
    if name in INT_CONFIGS:
        lo, hi = INT_CONFIGS[name]
        try:
            v = int(value)
        except ValueError:
            return f"{name} must be an integer"
        if not lo <= v <= hi:
            return f"{name} must be in [{lo}, {hi}]"
    elif value not in ENUM_CONFIGS[name]:
        return f"{name} must be one of {', '.join(ENUM_CONFIGS[name])}"
    return None


@dataclass(slots=True)
class FetchResult:
    error: int = 0
    records: bytes = b""
    acquired: list[tuple[int, int, int]] = field(default_factory=list)


RECORDS = Gauge(
    "floe_share_group_records",
    "In-flight records of share groups by state (share partitions this agent last wrote)",
    ["group", "state"],
    registry=METRICS.registry,
)
STATE_NAMES = {sp.AVAILABLE: "available", sp.ACQUIRED: "acquired", sp.ACKNOWLEDGED: "acknowledged", sp.ARCHIVED: "archived"}


class Conflict(MetastoreError):
    """Too many agents changed one share partition at once; the client retries."""


class SharePartitionManager:
    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.meta = broker.meta
        self.clock = broker.clock
        self._states: dict[Key, SharePartitionState] = {}
        self._locks: dict[Key, asyncio.Lock] = {}
        self._configs: dict[str, tuple[float, dict[str, str]]] = {}

    # -- configs ------------------------------------------------------------------------

    async def configs(self, group_id: str) -> dict[str, str]:
        hit = self._configs.get(group_id)
        now = self.clock.monotonic()
        if hit is not None and now - hit[0] < 1.0:
            return hit[1]
        stored = await self.meta.group_config_get(group_id)
        merged = {**DEFAULTS, **stored}
        self._configs[group_id] = (now, merged)
        return merged

    def forget_configs(self, group_id: str) -> None:
        self._configs.pop(group_id, None)

    async def limits(self, group_id: str) -> sp.Limits:
        c = await self.configs(group_id)
        return sp.Limits(
            lock_ms=int(c["share.record.lock.duration.ms"]),
            delivery_limit=int(c["share.delivery.count.limit"]),
            max_locks=int(c["share.partition.max.record.locks"]),
        )

    # -- state --------------------------------------------------------------------------

    async def _load(self, key: Key) -> SharePartitionState:
        group_id, topic_id, partition = key
        found = await self.meta.share_partitions_load(group_id, [(topic_id, partition)])
        if found:
            return found[0]
        # First use by this group: start at the latest (default) or earliest offset.
        reset = (await self.configs(group_id))["share.auto.offset.reset"]
        offsets = {p.partition: p for p in await self.meta.partition_offsets(topic_id)}
        po = offsets.get(partition)
        start = 0 if po is None else (po.log_start_offset if reset == "earliest" else po.high_watermark)
        st = SharePartitionState(group_id, topic_id, partition, start, start, [])
        if await self.meta.share_partition_cas(st, 0):
            return dataclasses.replace(st, version=1)
        found = await self.meta.share_partitions_load(group_id, [(topic_id, partition)])
        if not found:
            raise MetastoreError("share partition vanished while initialising")
        return found[0]

    async def state(self, key: Key, *, fresh: bool = False) -> SharePartitionState:
        st = None if fresh else self._states.get(key)
        if st is None:
            st = await self._load(key)
            self._states[key] = st
        return st

    def _gauge(self, group_id: str) -> None:
        totals = dict.fromkeys(STATE_NAMES, 0)
        for k, st in self._states.items():
            if k[0] == group_id:
                for state, n in sp.counts(st).items():
                    totals[state] = totals.get(state, 0) + n
        for state, name in STATE_NAMES.items():
            RECORDS.labels(group_id, name).set(totals[state])

    def cached(self) -> dict[Key, SharePartitionState]:
        return dict(self._states)

    def forget(self, group_id: str) -> None:
        for k in [k for k in self._states if k[0] == group_id]:
            del self._states[k]

    async def _change(
        self, key: Key, decide: Callable[[SharePartitionState, bool], Awaitable[tuple[SharePartitionState, T]]]
    ) -> T:
        """Apply ``decide(state, fresh)`` and store its new state by compare-and-swap.

        ``decide`` may raise :class:`~agent.groups.share.partition.InvalidRecordState`;
        on a cached (possibly stale) copy that means: re-read and decide again."""
        lock = self._locks.setdefault(key, asyncio.Lock())
        async with lock:
            fresh = key not in self._states
            for _ in range(16):
                st = await self.state(key, fresh=fresh)
                try:
                    new, result = await decide(st, fresh)
                except sp.InvalidRecordState:
                    if fresh:
                        raise
                    fresh = True
                    continue
                if new is st or new == st:
                    return result
                if await self.meta.share_partition_cas(new, st.version):
                    self._states[key] = dataclasses.replace(new, version=st.version + 1)
                    self._gauge(key[0])
                    return result
                self._states.pop(key, None)
                fresh = True
            raise Conflict(f"share partition {key} kept changing under us")

    # -- operations ---------------------------------------------------------------------

    async def acknowledge(
        self, key: Key, member_id: str, batches: Sequence[tuple[int, int, Sequence[int]]]
    ) -> int:
        """Apply acknowledgements; the error code for the partition (0 when stored)."""
        limits = await self.limits(key[0])
        now = self.clock.now_ms()

        async def decide(st: SharePartitionState, fresh: bool) -> tuple[SharePartitionState, int]:
            st = sp.expire(st, now, limits)
            return sp.acknowledge(st, member_id, batches, limits), 0

        try:
            return await self._change(key, decide)
        except sp.InvalidRecordState:
            return int(ErrorCode.INVALID_RECORD_STATE)
        except MetastoreError as e:
            log.warning("share acknowledge %s failed: %s", key, e)
            return int(ErrorCode.KAFKA_STORAGE_ERROR)

    async def release(self, key: Key, member_id: str) -> None:
        limits = await self.limits(key[0])

        async def decide(st: SharePartitionState, fresh: bool) -> tuple[SharePartitionState, None]:
            return sp.release_member(st, member_id, limits), None

        try:
            await self._change(key, decide)
        except MetastoreError as e:
            log.warning("share release %s failed: %s", key, e)

    async def fetch(self, key: Key, member_id: str, max_records: int, max_bytes: int) -> FetchResult:
        """Acquire records for ``member_id`` and read them from the log."""
        group_id, topic_id, partition = key
        limits = await self.limits(group_id)
        reader = self.broker.fetch_reader
        read: dict[int, Any] = {}

        async def decide(st: SharePartitionState, fresh: bool) -> tuple[SharePartitionState, FetchResult]:
            now = self.clock.now_ms()
            st = sp.expire(st, now, limits)
            lo = sp.first_available(st)
            if lo >= st.start_offset + limits.max_locks and not any(r.state == sp.AVAILABLE for r in st.ranges):
                return st, FetchResult()
            if lo not in read:
                read.clear()
                read[lo] = await reader.find(topic_id, partition, lo, max(1, max_bytes), fresh=True)
            res = read[lo]
            if res.error == MetaError.OFFSET_OUT_OF_RANGE and res.log_start_offset > lo:
                # The records were deleted (retention): the SPSO follows the log start.
                st = sp._trim(st, list(st.ranges), res.log_start_offset)
                return st, FetchResult()
            if res.error != MetaError.NONE:
                return st, FetchResult(int(res.error))
            if not res.batches:
                return st, FetchResult()
            upto = res.batches[-1].last_offset + 1
            new, got = sp.acquire(
                st, member_id, now, limits, max_records=max_records, upto=upto, lo=lo,
                log_start=res.log_start_offset,
            )
            return new, FetchResult(0, b"", got)

        try:
            out = await self._change(key, decide)
        except MetastoreError as e:
            log.warning("share fetch %s failed: %s", key, e)
            return FetchResult(int(ErrorCode.KAFKA_STORAGE_ERROR))
        if out.acquired and read:
            res = next(iter(read.values()))
            lo_off, hi_off = out.acquired[0][0], out.acquired[-1][1]
            batches = [b for b in res.batches if b.last_offset >= lo_off and b.base_offset <= hi_off]
            try:
                out.records = await reader.read(batches)
            except Exception as e:  # the lock expires and the records go to someone else
                log.warning("share fetch read %s failed: %s", key, e)
                out.records = b""
        return out

    def next_expiry_ms(self, keys: Sequence[Key]) -> int | None:
        times = [t for k in keys if (st := self._states.get(k)) is not None and (t := sp.next_expiry(st)) is not None]
        return min(times) if times else None


_MANAGERS: weakref.WeakKeyDictionary[Any, SharePartitionManager] = weakref.WeakKeyDictionary()


def manager_for(broker: Broker) -> SharePartitionManager:
    m = _MANAGERS.get(broker)
    if m is None:
        m = _MANAGERS[broker] = SharePartitionManager(broker)
    return m


async def reset_start(broker: Broker, key: Key, offset: int) -> None:
    """Start the share partition over at ``offset`` (AlterShareGroupOffsets; the group is empty)."""
    mgr = manager_for(broker)

    async def decide(st: SharePartitionState, fresh: bool) -> tuple[SharePartitionState, None]:
        return dataclasses.replace(st, start_offset=offset, end_offset=offset, ranges=[], state_epoch=st.state_epoch + 1), None

    await mgr._change(key, decide)


def lag(st: SharePartitionState, high_watermark: int) -> int:
    """Records at or past the SPSO not yet acknowledged or archived."""
    done = sum(r.last - r.first + 1 for r in st.ranges if r.state in sp.DONE)
    return max(0, high_watermark - st.start_offset - done)
