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
- high_watermark, last_stable_offset, log_start_offset; preferred_read_replica -1.
- ``isolation_level`` 1 (read_committed): one metastore query per answer
  (``stable_offsets``) gives each partition's last stable offset and the
  aborted transactions from the fetch offset on; only batches below the LSO
  are returned (a batch lies wholly on one side of it), ``last_stable_offset``
  is the LSO and ``aborted_transactions`` lists (producer id, first offset) so
  the client drops those producers' records up to their ABORT markers. Records
  are never decoded for this. At width (:func:`_caught_up`) the watermark query
  also says whether the topic holds any transaction state; if not, the answers
  it settles are stable up to its high watermarks and skip that query.
  read_uncommitted: LSO = high watermark, no list.
- Long-poll: with fewer than ``min_bytes`` and ``max_wait_ms > 0`` the response
  waits (as a Deferred: the connection keeps reading) until a commit to one of
  the requested partitions (this agent's, or another's through
  ``agent.cluster``) or ``max_wait_ms``, then the fetch is planned again. Any
  partition error answers at once.
- Fetch sessions (KIP-227, v7+, ``agent.fetch_session``): a full request with
  epoch 0 creates a session (its id in the response, unless the cache is full:
  then 0); incremental requests (the session's next epoch) name only changed
  partitions and ``forgotten_topics_data``, and get only partitions with
  records, a changed high watermark / last stable / log start offset, or an
  error. Epoch -1 closes a session; an unknown session gets
  FETCH_SESSION_ID_NOT_FOUND, a wrong epoch INVALID_FETCH_SESSION_EPOCH
  (top-level errors). ``current_leader_epoch``, ``last_fetched_epoch``,
  ``rack_id`` are ignored (one leader epoch, 0).
- Every partition entry of every response is built by :func:`partition_data`.
- Width: partitions already read to their high watermark are answered from
  one watermark query per topic (:func:`_caught_up`), not one batch lookup each;
  partitions read at offsets this agent has just committed are answered from
  its own commits (:mod:`agent.tail_index`) with that query's log start and
  high watermark.
- Size: ``max_bytes`` is capped by the broker's ``fetch_max_bytes`` (Kafka's
  ``fetch.max.bytes``, 55 MiB) and, when built, by what is left of the agent's
  budget of unread responses (``queued_max_request_bytes``,
  :mod:`agent.security.limits`): a Fetch asking 2^31-1 gets at most that, and
  the first partition with data still gets its first whole batch (KIP-74).
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
import weakref
from collections import Counter
from collections.abc import Callable, Coroutine, Generator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from agent.connection import Deferred
from agent.fetch import FetchReader, PartitionFetch, reader_for, select_batches
from agent.fetch_session import (
    FINAL_EPOCH,
    INITIAL_EPOCH,
    FetchSession,
    FetchSessionCache,
    SessionKey,
    SessionPartition,
    next_epoch,
)
from agent.handlers.registry import handler
from agent.metrics import METRICS
from agent.security.authorizer import RT, Op, allowed
from kafka_protocol.errors import ErrorCode
from kafka_protocol.messages import FetchRequest, FetchResponse
from kafka_protocol.messages._runtime import ZERO_UUID
from metastore.types import ErrorCode as MetaError
from metastore.types import MetastoreError, PartitionOffsets

if TYPE_CHECKING:
    from agent.broker import Broker
    from agent.connection import RequestContext
    from metastore import TopicInfo

log = logging.getLogger(__name__)

TopicData = FetchResponse.FetchableTopicResponse
PartitionData = FetchResponse.FetchableTopicResponse.PartitionData
Aborted = PartitionData.AbortedTransaction

MIN_VERSION = 4
MAX_VERSION = 18
# A topic asked for at this many partitions: caught-up ones answered from one
# watermark query (_caught_up).
BULK_MIN = 8
# This many partitions left to look up: one metastore call for all of them
# (_lookup_many). A Fetch reaching one worker of several names only that worker's
# partitions (4 of a consumer's 8 with two workers): one lookup each cost a
# connection, BEGIN and COMMIT apiece, 2.3x the agent CPU of one worker at 5 MB/s.
LOOKUP_MANY_MIN = 2


@dataclass(slots=True)
class _Want:
    """One requested partition, resolved against the topic table."""

    topic_index: int
    partition: int
    fetch_offset: int
    max_bytes: int
    topic_id: uuid.UUID | None  # None: unknown topic or partition
    error: int = 0


async def _resolve(broker: Broker, ctx: RequestContext, req: FetchRequest, by_id: bool) -> list[_Want]:
    wants: list[_Want] = []
    for ti, t in enumerate(req.topics):
        info: TopicInfo | None
        if by_id:
            info = await broker.topic_by_id(t.topic_id) if t.topic_id != ZERO_UUID else None
        else:
            info = await broker.topic(t.topic)
        # READ on the topic (a name is checked whether or not it exists; an id only once known).
        name = info.name if info is not None else (None if by_id else t.topic)
        denied = name is not None and not allowed(broker, ctx, Op.READ, RT.TOPIC, name)
        for p in t.partitions:
            w = _Want(ti, p.partition, p.fetch_offset, max(0, p.partition_max_bytes), None)
            if denied:
                w.error = ErrorCode.TOPIC_AUTHORIZATION_FAILED
            elif info is None:
                w.error = ErrorCode.UNKNOWN_TOPIC_ID if by_id else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            elif not 0 <= p.partition < info.partitions:
                w.error = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            else:
                w.topic_id = info.id
            wants.append(w)
    return wants


def _limit(w: _Want, max_bytes: int) -> int:
    """The bytes a lookup of ``w`` may return: its partition's limit within the
    request's, and at least 1 (the first batch is always sent)."""
    return max(1, min(w.max_bytes, max_bytes))


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


async def _lookup_many(
    reader: FetchReader, wants: list[_Want], max_bytes: int, fresh: bool
) -> list[PartitionFetch]:
    """:func:`_lookup` of many partitions in one metastore call."""
    keys = [
        (w.topic_id, w.partition, w.fetch_offset, _limit(w, max_bytes))
        for w in wants
        if w.topic_id is not None
    ]
    try:
        found = iter(await reader.find_many(keys, fresh=fresh))
    except MetastoreError as e:
        log.warning("fetch: batch lookup of %d partitions failed: %s", len(keys), e)
        return [PartitionFetch(w.error or ErrorCode.KAFKA_STORAGE_ERROR) for w in wants]
    out: list[PartitionFetch] = []
    for w in wants:
        if w.topic_id is None:
            out.append(PartitionFetch(w.error))
            continue
        res = next(found)
        if res.error != MetaError.NONE:
            out.append(PartitionFetch(int(res.error)))
        else:
            out.append(PartitionFetch(ErrorCode.NONE, res.log_start_offset, res.high_watermark, list(res.batches)))
    return out


async def _read_all(reader: FetchReader, wants: list[_Want], found: list[PartitionFetch]) -> None:
    """The bytes of every partition with batches to send, in one planned read."""
    todo = [(w, pf) for w, pf in zip(wants, found, strict=True) if pf.batches]
    if not todo:
        return
    datas = await reader.read_many([pf.batches for _, pf in todo])
    for (w, pf), data in zip(todo, datas, strict=True):
        if isinstance(data, Exception):
            # E.g. the compactor replaced the object after our (cached) lookup.
            log.warning("fetch: reading %s/%d at %d failed: %s", w.topic_id, w.partition, w.fetch_offset, data)
            if w.topic_id is not None:
                reader.forget(w.topic_id, w.partition)
            pf.error = ErrorCode.KAFKA_STORAGE_ERROR
            pf.batches = []
            pf.records = b""
        else:
            pf.records = data


async def _watermarks(
    reader: FetchReader, tid: uuid.UUID, read_committed: bool
) -> tuple[dict[int, PartitionOffsets], bool]:
    """A topic's offsets by partition and, for read_committed, whether it held no
    transaction state when they were read (``topic_offsets``; else False)."""
    if not read_committed:
        return {o.partition: o for o in await reader.meta.partition_offsets(tid)}, False
    got = await reader.meta.topic_offsets(tid)
    return {o.partition: o for o in got.partitions}, got.txn_free


async def _caught_up(
    reader: FetchReader, wants: list[_Want], max_bytes: int, read_committed: bool = False
) -> dict[int, PartitionFetch]:
    """The answers that one watermark query per topic asked at >= ``BULK_MIN``
    partitions settles, by index in ``wants``: partitions read up to their high
    watermark (a consumer of 10,000 mostly idle partitions - librdkafka sends every
    assigned partition in every Fetch: no sessions - costs one query, not 10,000
    batch lookups), and partitions read at offsets this agent has just committed,
    answered from its own commits (:meth:`FetchReader.find_tail`) with the log
    start and high watermark just read. The others are left to :func:`_lookup`.

    read_committed: when the same query saw the topic free of transaction state,
    everything below those high watermarks is stable and nothing is aborted, so a
    tail answer is cut there and settled (``stable``): :func:`_stable` asks the
    metastore nothing for it. Batches committed after the query wait for the next
    Fetch, as they would for a last stable offset read then."""
    per_topic = Counter(w.topic_id for w in wants if w.topic_id is not None)
    states: dict[uuid.UUID, dict[int, PartitionOffsets]] = {}
    txn_free: set[uuid.UUID] = set()
    for tid, n in per_topic.items():
        if tid is None or n < BULK_MIN:
            continue
        try:
            states[tid], free = await _watermarks(reader, tid, read_committed)
        except MetastoreError as e:
            log.warning("fetch: watermarks of %s failed: %s", tid, e)
            continue
        if free:
            txn_free.add(tid)
    out: dict[int, PartitionFetch] = {}
    if not states:
        return out
    for i, w in enumerate(wants):
        topic = states.get(w.topic_id) if w.topic_id is not None else None
        o = topic.get(w.partition) if topic is not None else None
        if o is None or w.topic_id is None:
            continue
        if o.log_start_offset <= w.fetch_offset == o.high_watermark:
            out[i] = PartitionFetch(ErrorCode.NONE, o.log_start_offset, o.high_watermark)
            continue
        found = reader.find_tail(w.topic_id, w.partition, w.fetch_offset, _limit(w, max_bytes), o.log_start_offset)
        if found is None:
            continue
        if w.topic_id in txn_free:
            # The batch holding the fetch offset starts below the high watermark.
            stable = [b for b in found if b.base_offset < o.high_watermark]
            out[i] = PartitionFetch(ErrorCode.NONE, o.log_start_offset, o.high_watermark, stable, stable=True)
        else:
            hw = max(o.high_watermark, found[-1].last_offset + 1)
            out[i] = PartitionFetch(ErrorCode.NONE, o.log_start_offset, hw, found)
    return out


async def _stable(reader: FetchReader, wants: list[_Want], found: list[PartitionFetch]) -> None:
    """read_committed: cut each partition's batches at its last stable offset and
    attach the aborted transactions (one metastore query for the whole answer)."""
    # Only partitions with data to cut: idle ones (at their high watermark) keep the
    # one-query-per-topic width path cheap and report LSO = high watermark.
    live = [
        (w, pf) for w, pf in zip(wants, found, strict=True) if pf.batches and w.topic_id is not None and not pf.stable
    ]
    if not live:
        return
    try:
        views = await reader.meta.stable_offsets([(w.topic_id, w.partition, w.fetch_offset) for w, _ in live])  # type: ignore[misc]
    except MetastoreError as e:
        log.warning("fetch: last stable offsets failed: %s", e)
        for _, pf in live:
            pf.error, pf.batches = ErrorCode.KAFKA_STORAGE_ERROR, []
        return
    for (_, pf), view in zip(live, views, strict=True):
        if view.error:
            pf.error, pf.batches = int(view.error), []
            continue
        lso = min(view.last_stable_offset, pf.high_watermark)
        pf.last_stable_offset = lso
        pf.aborted = [a for a in view.aborted if a[1] < lso]
        pf.batches = [b for b in pf.batches if b.base_offset < lso]


async def fetch_once(
    reader: FetchReader,
    wants: list[_Want],
    max_bytes: int,
    *,
    fresh: bool = False,
    read_committed: bool = False,
) -> list[PartitionFetch]:
    """Plan and read one answer for ``wants`` (in request order)."""
    idle = await _caught_up(reader, wants, max_bytes, read_committed) if len(wants) >= BULK_MIN else {}
    rest = [(i, w) for i, w in enumerate(wants) if i not in idle]
    if len(rest) >= LOOKUP_MANY_MIN:
        looked = iter(await _lookup_many(reader, [w for _, w in rest], max_bytes, fresh))
    else:
        looked = iter(
            await asyncio.gather(
                *(_lookup(reader, w, _limit(w, max_bytes), fresh) for _, w in rest)
            )
        )
    found = [idle[i] if i in idle else next(looked) for i in range(len(wants))]
    if read_committed:
        await _stable(reader, wants, found)
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
    await _read_all(reader, wants, found)
    return list(found)


# The tagged fields' defaults, one instance each for every entry: the fetch path
# never sets or mutates them, and three fresh objects per partition were half the
# cost of building a response of 500 partitions (a sessionless consumer at width).
_NO_EPOCH = PartitionData.EpochEndOffset()
_NO_LEADER = PartitionData.LeaderIdAndEpoch()
_NO_SNAPSHOT = PartitionData.SnapshotId()


def partition_data(partition: int, pf: PartitionFetch) -> PartitionData:
    """The response entry of one partition (every Fetch response is built here)."""
    if pf.error:
        return PartitionData(
            partition_index=partition, error_code=pf.error,
            high_watermark=-1, last_stable_offset=-1, log_start_offset=-1,
            diverging_epoch=_NO_EPOCH, current_leader=_NO_LEADER, snapshot_id=_NO_SNAPSHOT,
            aborted_transactions=[], preferred_read_replica=-1, records=b"",
        )  # fmt: skip
    return PartitionData(
        partition_index=partition, error_code=0,
        high_watermark=pf.high_watermark, last_stable_offset=pf.lso,
        log_start_offset=pf.log_start_offset,
        diverging_epoch=_NO_EPOCH, current_leader=_NO_LEADER, snapshot_id=_NO_SNAPSHOT,
        aborted_transactions=[Aborted(producer_id=a[0], first_offset=a[1]) for a in pf.aborted],
        preferred_read_replica=-1, records=pf.records,
    )  # fmt: skip


def _response(
    req: FetchRequest, wants: list[_Want], results: list[PartitionFetch], session_id: int = 0
) -> FetchResponse:
    topics = [TopicData(topic=t.topic, topic_id=t.topic_id, partitions=[]) for t in req.topics]
    for w, pf in zip(wants, results, strict=True):
        topics[w.topic_index].partitions.append(partition_data(w.partition, pf))
    return FetchResponse(throttle_time_ms=0, error_code=0, session_id=session_id, responses=topics)


def _enough(results: list[PartitionFetch], min_bytes: int) -> bool:
    # Kafka answers at once on any partition error or with min_bytes gathered.
    return any(r.error for r in results) or sum(len(r.records) for r in results) >= min_bytes


def _session_error(code: int, session_id: int = 0) -> FetchResponse:
    return FetchResponse(error_code=code, session_id=session_id, responses=[])


@handler(FetchRequest, min_version=MIN_VERSION, max_version=MAX_VERSION)
async def handle(broker: Broker, ctx: RequestContext, req: FetchRequest) -> Any:
    v = ctx.header.api_version
    by_id = v >= 13
    if v < 7 or (req.session_id == 0 and req.session_epoch == FINAL_EPOCH):
        return Deferred(_Lazy(lambda: _full_fetch(broker, ctx, _cap(broker, ctx, req), by_id, None)))
    cache = sessions_for(broker)
    if req.session_epoch in (INITIAL_EPOCH, FINAL_EPOCH):  # a full request
        if req.session_id:
            cache.remove(req.session_id)
        session = None
        if req.session_epoch == INITIAL_EPOCH:
            session = cache.create(sum(len(t.partitions) for t in req.topics), by_id)
        return Deferred(_Lazy(lambda: _full_fetch(broker, ctx, _cap(broker, ctx, req), by_id, session)))
    session = cache.get(req.session_id)
    if session is None:
        return _session_error(ErrorCode.FETCH_SESSION_ID_NOT_FOUND)
    if req.session_epoch != session.epoch or session.by_id != by_id or session.busy:
        return _session_error(ErrorCode.INVALID_FETCH_SESSION_EPOCH)
    session.epoch = next_epoch(session.epoch)
    await _update_session(broker, ctx, session, req, by_id)
    return Deferred(_Lazy(lambda: _incremental_fetch(broker, _cap(broker, ctx, req), session)))


def _cap(broker: Broker, ctx: RequestContext, req: FetchRequest) -> FetchRequest:
    """Bound ``req.max_bytes`` by fetch_max_bytes and, at build time, by the
    budget of unread responses left (never below 0: one batch still goes)."""
    cap = broker.config.fetch_max_bytes
    budget = getattr(ctx.conn, "response_budget", None)
    if budget is not None:
        cap = min(cap, budget.available())
    if req.max_bytes > cap:
        req.max_bytes = cap
    return req


async def _fetch_waiting(
    broker: Broker, req: FetchRequest, wants: list[_Want], *, fresh: bool
) -> list[PartitionFetch]:
    """One answer for ``wants``, long-polling (re-planned on commits to the wanted
    partitions) until enough or ``max_wait_ms``.

    The commit watch is registered before the first look, so a look that found
    nothing was already current and the wait starts at once (a consumer caught up
    on many partitions pays one look per commit, not two). Only answers with
    batches are ever served from the lookup cache, so a first look that found
    data but not ``min_bytes`` is repeated fresh before waiting."""
    reader, clock = reader_for(broker), broker.clock
    committed = req.isolation_level == 1
    deadline = clock.monotonic() + req.max_wait_ms / 1000.0
    keys = [(w.topic_id, w.partition) for w in wants if w.topic_id is not None]
    if not keys or req.max_wait_ms <= 0:
        return await fetch_once(reader, wants, req.max_bytes, fresh=fresh, read_committed=committed)
    with broker.notifier.watch(keys) as ev:
        results = await fetch_once(reader, wants, req.max_bytes, fresh=fresh, read_committed=committed)
        again = not fresh and any(r.records for r in results)
        while not _enough(results, req.min_bytes):
            if not again:
                remaining = deadline - clock.monotonic()
                if remaining <= 0:
                    break
                try:
                    await asyncio.wait_for(ev.wait(), timeout=remaining)
                except TimeoutError:
                    break
            again = False
            ev.clear()  # before looking: a commit landing during the look wakes the next wait
            results = await fetch_once(reader, wants, req.max_bytes, fresh=True, read_committed=committed)
    return results


async def _full_fetch(
    broker: Broker, ctx: RequestContext, req: FetchRequest, by_id: bool, session: FetchSession | None
) -> FetchResponse:
    """Sessionless, or the first request of a new session (which then holds every
    requested partition and what this response told about it)."""
    wants = await _resolve(broker, ctx, req, by_id)
    keys: list[SessionKey] = []
    if session is not None:
        # Subscribed before the (fresh) lookups: a commit landing meanwhile stays
        # marked, so the next incremental fetch looks again.
        for w in wants:
            t = req.topics[w.topic_index]
            key: SessionKey = (t.topic_id if by_id else t.topic, w.partition)
            session.upsert(key, _session_partition(t, w))
            keys.append(key)
        session.take_candidates()
    results = await _fetch_waiting(broker, req, wants, fresh=session is not None)
    METRICS.fetched_bytes.inc(sum(len(r.records) for r in results))
    if session is None:
        return _response(req, wants, results)
    for skey, pf in zip(keys, results, strict=True):
        hwm, lso, log_start = _offsets(pf)
        session.observed(skey, pf.error, hwm)
        session.sent(skey, hwm, lso, log_start, bool(pf.records))
    return _response(req, wants, results, session.id)


def _offsets(pf: PartitionFetch) -> tuple[int, int, int]:
    """High watermark, last stable offset and log start offset as sent."""
    if pf.error:
        return -1, -1, -1
    return pf.high_watermark, pf.lso, pf.log_start_offset


def _session_partition(t: Any, w: _Want) -> SessionPartition:
    return SessionPartition(
        topic=t.topic, topic_ref=t.topic_id, topic_id=w.topic_id, partition=w.partition,
        fetch_offset=w.fetch_offset, max_bytes=w.max_bytes, error=w.error,
    )  # fmt: skip


async def _update_session(
    broker: Broker, ctx: RequestContext, session: FetchSession, req: FetchRequest, by_id: bool
) -> None:
    """Apply an incremental request: new or moved partitions, then forgotten ones."""
    for w in await _resolve(broker, ctx, req, by_id):
        t = req.topics[w.topic_index]
        session.upsert((t.topic_id if by_id else t.topic, w.partition), _session_partition(t, w))
    for f in req.forgotten_topics_data:
        ref = f.topic_id if by_id else f.topic
        for p in f.partitions:
            session.remove((ref, p))


async def _incremental_fetch(broker: Broker, req: FetchRequest, session: FetchSession) -> FetchResponse:
    """Look only at the partitions that changed, have unfetched data or an error;
    answer only those with something to say."""
    reader, clock = reader_for(broker), broker.clock
    deadline = clock.monotonic() + req.max_wait_ms / 1000.0
    answer: dict[SessionKey, PartitionFetch] = {}
    session.busy = True
    try:
        while True:
            candidates = session.take_candidates()
            topic_refs: dict[object, int] = {}
            wants = []
            for key, part in candidates:
                ti = topic_refs.setdefault(key[0], len(topic_refs))
                w = _Want(ti, part.partition, part.fetch_offset, part.max_bytes, part.topic_id, part.error)
                wants.append(w)
            results = await fetch_once(reader, wants, req.max_bytes, fresh=True, read_committed=req.isolation_level == 1)
            for (key, part), pf in zip(candidates, results, strict=True):
                hwm, lso, log_start = _offsets(pf)
                session.observed(key, pf.error, hwm)
                if session.must_respond(part, pf.error, hwm, lso, log_start, len(pf.records)):
                    answer[key] = pf
            if _enough(list(answer.values()), req.min_bytes):
                break
            remaining = deadline - clock.monotonic()
            if remaining <= 0 or not session.partitions:
                break
            if not session.changed_keys:
                try:
                    await asyncio.wait_for(session.event.wait(), timeout=remaining)
                except TimeoutError:
                    break
    finally:
        session.busy = False
    topics: dict[object, TopicData] = {}
    parts = session.partitions
    for key, pf in sorted(answer.items(), key=lambda kv: parts[kv[0]].order if kv[0] in parts else 0):
        entry = parts.get(key)
        if entry is None:  # forgotten meanwhile
            continue
        part = entry
        td = topics.get(key[0])
        if td is None:
            td = topics[key[0]] = TopicData(topic=part.topic, topic_id=part.topic_ref, partitions=[])
        td.partitions.append(partition_data(part.partition, pf))
        hwm, lso, log_start = _offsets(pf)
        session.sent(key, hwm, lso, log_start, bool(pf.records))
    METRICS.fetched_bytes.inc(sum(len(pf.records) for pf in answer.values()))
    return FetchResponse(
        throttle_time_ms=0, error_code=0, session_id=session.id, responses=list(topics.values())
    )


class _Lazy:
    """An awaitable that creates its coroutine when first awaited, so a response
    dropped with its connection leaves no "never awaited" coroutine behind."""

    __slots__ = ("_factory",)

    def __init__(self, factory: Callable[[], Coroutine[Any, Any, FetchResponse]]) -> None:
        self._factory = factory

    def __await__(self) -> Generator[Any, None, FetchResponse]:
        return self._factory().__await__()


_SESSIONS: weakref.WeakKeyDictionary[Broker, FetchSessionCache] = weakref.WeakKeyDictionary()


def sessions_for(broker: Broker) -> FetchSessionCache:
    """The broker's fetch session cache (created on first use)."""
    cache = _SESSIONS.get(broker)
    if cache is None:
        cache = FetchSessionCache(
            broker.notifier, broker.clock.monotonic, slots=broker.config.fetch_session_cache_slots
        )
        _SESSIONS[broker] = cache
    return cache
