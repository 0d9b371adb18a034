"""Fetch (key 1).

Behavior, as Kafka:

- Per partition: an unknown topic or partition gets UNKNOWN_TOPIC_OR_PARTITION
  (UNKNOWN_TOPIC_ID when addressed by id, v13+); a fetch offset outside
  ``[log_start_offset, high_watermark]`` gets OFFSET_OUT_OF_RANGE; at the high
  watermark the partition answers with an empty record set (never null).
- Records: the whole batch holding the fetch offset first (clients skip the
  leading records), then the following batches while they fit in
  ``min(partition_max_bytes, bytes left of max_bytes)``. The first partition
  with data always gets at least one whole batch, however large (KIP-74), so
  big messages make progress; later partitions whose next batch does not fit
  get nothing this time.
- high_watermark, last_stable_offset (= high watermark: no transactions yet),
  log_start_offset; aborted_transactions empty; preferred_read_replica -1.
- Long-poll: with fewer than ``min_bytes`` and ``max_wait_ms > 0`` the response
  waits (as a Deferred: the connection keeps reading) until a local commit to
  one of the requested partitions or ``max_wait_ms``, then the fetch is planned
  again. Any partition error answers at once. Commits by other agents are seen
  at the next fetch (no cross-agent wake-up yet).
- Fetch sessions (KIP-227) are not implemented: full requests (epoch -1 or 0)
  are answered sessionless (session_id 0), which tells clients to keep sending
  full requests; an incremental request (epoch > 0) gets
  FETCH_SESSION_ID_NOT_FOUND, as Kafka answers for a session it does not have.
  ``forgotten_topics_data``, ``current_leader_epoch``, ``last_fetched_epoch``,
  ``rack_id`` and ``isolation_level`` are ignored (one leader epoch, 0; no
  transactions).
- A storage failure while reading a partition answers KAFKA_STORAGE_ERROR for
  that partition (retriable) instead of closing the connection.

Versions: 4-18. v4 must be in range (librdkafka only produces magic 2 once it
sees Fetch v4) and so must v10 (librdkafka 2.0); v12+ are flexible, v13+ name
topics by id. v0-3 (magic 0/1 message sets) are not served.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Callable, Coroutine, Generator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from agent.connection import Deferred
from agent.fetch import BatchReadError, FetchReader, PartitionFetch, reader_for, select_batches
from agent.handlers.registry import handler
from agent.metrics import METRICS
from kafka_protocol.errors import ErrorCode
from kafka_protocol.messages import FetchRequest, FetchResponse
from kafka_protocol.messages._runtime import ZERO_UUID
from metastore.types import ErrorCode as MetaError
from metastore.types import MetastoreError
from objectstore.errors import ObjectStoreError

if TYPE_CHECKING:
    from agent.broker import Broker
    from agent.connection import RequestContext
    from metastore import TopicInfo

log = logging.getLogger(__name__)

TopicData = FetchResponse.FetchableTopicResponse
PartitionData = FetchResponse.FetchableTopicResponse.PartitionData

MIN_VERSION = 4
MAX_VERSION = 18


@dataclass(slots=True)
class _Want:
    """One requested partition, resolved against the topic table."""

    topic_index: int
    partition: int
    fetch_offset: int
    max_bytes: int
    topic_id: uuid.UUID | None  # None: unknown topic or partition
    error: int = 0


async def _resolve(broker: Broker, req: FetchRequest, by_id: bool) -> list[_Want]:
    wants: list[_Want] = []
    for ti, t in enumerate(req.topics):
        info: TopicInfo | None
        if by_id:
            info = await broker.topic_by_id(t.topic_id) if t.topic_id != ZERO_UUID else None
        else:
            info = await broker.topic(t.topic)
        for p in t.partitions:
            w = _Want(ti, p.partition, p.fetch_offset, max(0, p.partition_max_bytes), None)
            if info is None:
                w.error = ErrorCode.UNKNOWN_TOPIC_ID if by_id else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            elif not 0 <= p.partition < info.partitions:
                w.error = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            else:
                w.topic_id = info.id
            wants.append(w)
    return wants


async def _lookup(reader: FetchReader, w: _Want, limit: int, fresh: bool) -> PartitionFetch:
    if w.topic_id is None:
        return PartitionFetch(w.error)
    try:
        res = await reader.find(w.topic_id, w.partition, w.fetch_offset, limit, fresh=fresh)
    except MetastoreError as e:
        log.warning("fetch: batch lookup of %s/%d failed: %s", w.topic_id, w.partition, e)
        return PartitionFetch(ErrorCode.KAFKA_STORAGE_ERROR)
    if res.error != MetaError.NONE:
        return PartitionFetch(int(res.error))
    return PartitionFetch(ErrorCode.NONE, res.log_start_offset, res.high_watermark, list(res.batches))


async def _read(reader: FetchReader, w: _Want, pf: PartitionFetch) -> None:
    try:
        pf.records = await reader.read(pf.batches)
    except (ObjectStoreError, BatchReadError, OSError) as e:
        # E.g. the compactor replaced the object after our (cached) lookup.
        log.warning("fetch: reading %s/%d at %d failed: %s", w.topic_id, w.partition, w.fetch_offset, e)
        if w.topic_id is not None:
            reader.forget(w.topic_id, w.partition)
        pf.error = ErrorCode.KAFKA_STORAGE_ERROR
        pf.batches = []
        pf.records = b""


async def fetch_once(
    reader: FetchReader, wants: list[_Want], max_bytes: int, *, fresh: bool = False
) -> list[PartitionFetch]:
    """Plan and read one answer for ``wants`` (in request order)."""
    found = await asyncio.gather(
        *(_lookup(reader, w, max(1, min(w.max_bytes, max_bytes)), fresh) for w in wants)
    )
    # Budget the response in request order, like Kafka: each partition gets at most
    # min(partition_max_bytes, what is left), and the first one with data at least
    # one whole batch.
    left = max(0, max_bytes)
    min_one = True
    for w, pf in zip(wants, found, strict=True):
        if pf.error or not pf.batches:
            continue
        pf.batches = select_batches(pf.batches, min(w.max_bytes, left), min_one=min_one)
        if pf.batches:
            min_one = False
            left = max(0, left - pf.nbytes)
    await asyncio.gather(*(_read(reader, w, pf) for w, pf in zip(wants, found, strict=True) if pf.batches))
    return list(found)


def _response(req: FetchRequest, wants: list[_Want], results: list[PartitionFetch]) -> FetchResponse:
    topics = [TopicData(topic=t.topic, topic_id=t.topic_id, partitions=[]) for t in req.topics]
    for w, pf in zip(wants, results, strict=True):
        if pf.error:
            pd = PartitionData(
                partition_index=w.partition, error_code=pf.error,
                high_watermark=-1, last_stable_offset=-1, log_start_offset=-1,
                aborted_transactions=[], preferred_read_replica=-1, records=b"",
            )
        else:
            pd = PartitionData(
                partition_index=w.partition, error_code=0,
                high_watermark=pf.high_watermark, last_stable_offset=pf.high_watermark,
                log_start_offset=pf.log_start_offset,
                aborted_transactions=[], preferred_read_replica=-1, records=pf.records,
            )
        topics[w.topic_index].partitions.append(pd)
    return FetchResponse(throttle_time_ms=0, error_code=0, session_id=0, responses=topics)


@handler(FetchRequest, min_version=MIN_VERSION, max_version=MAX_VERSION)
async def handle(broker: Broker, ctx: RequestContext, req: FetchRequest) -> Any:
    v = ctx.header.api_version
    if v >= 7 and req.session_epoch > 0:
        # An incremental fetch in a session we never created.
        return FetchResponse(error_code=ErrorCode.FETCH_SESSION_ID_NOT_FOUND, session_id=0, responses=[])
    wants = await _resolve(broker, req, by_id=v >= 13)
    reader = reader_for(broker)
    clock = broker.clock
    start = clock.monotonic()
    max_bytes = req.max_bytes

    def done(results: list[PartitionFetch]) -> bool:
        # Kafka answers at once on any partition error or with min_bytes gathered.
        return any(r.error for r in results) or sum(len(r.records) for r in results) >= req.min_bytes

    async def run() -> FetchResponse:
        results = await fetch_once(reader, wants, max_bytes)
        keys = [(w.topic_id, w.partition) for w in wants if w.topic_id is not None]
        deadline = start + req.max_wait_ms / 1000.0
        while keys and not done(results):
            remaining = deadline - clock.monotonic()
            if remaining <= 0:
                break
            with broker.notifier.watch(keys) as ev:
                # Registered first, then re-checked: a commit landing in between wakes us.
                results = await fetch_once(reader, wants, max_bytes, fresh=True)
                if done(results):
                    break
                try:
                    await asyncio.wait_for(ev.wait(), timeout=remaining)
                except TimeoutError:
                    break
            results = await fetch_once(reader, wants, max_bytes, fresh=True)
        METRICS.fetched_bytes.inc(sum(len(r.records) for r in results))
        return _response(req, wants, results)

    return Deferred(_Lazy(run))


class _Lazy:
    """An awaitable that creates its coroutine when first awaited, so a response
    dropped with its connection leaves no "never awaited" coroutine behind."""

    __slots__ = ("_factory",)

    def __init__(self, factory: Callable[[], Coroutine[Any, Any, FetchResponse]]) -> None:
        self._factory = factory

    def __await__(self) -> Generator[Any, None, FetchResponse]:
        return self._factory().__await__()
