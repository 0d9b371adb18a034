"""Fetch (key 1).

Behavior, as Kafka:

- Per partition: an unknown topic or partition gets UNKNOWN_TOPIC_OR_PARTITION
  (UNKNOWN_TOPIC_ID when addressed by id, v13+); a fetch offset outside
  ``[log_start_offset, high_watermark]`` gets OFFSET_OUT_OF_RANGE; at the high
  watermark the partition answers with an empty record set (never null).
- Records, read_committed (last stable offset and aborted transactions), the
  width path and storage errors: :mod:`agent.fetch_answer`, which plans and
  reads every answer and builds every partition entry (:func:`partition_data`).
- high_watermark, last_stable_offset, log_start_offset; preferred_read_replica -1.
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
- Incremental requests of a session: :mod:`agent.fetch_incremental`.
- Size: ``max_bytes`` is capped by the broker's ``fetch_max_bytes`` (Kafka's
  ``fetch.max.bytes``, 55 MiB) and, when built, by what is left of the agent's
  budget of unread responses (``queued_max_request_bytes``,
  :mod:`agent.security.limits`): a Fetch asking 2^31-1 gets at most that, and
  the first partition with data still gets its first whole batch (KIP-74).

Versions: 4-18. v4 must be in range (librdkafka only produces magic 2 once it
sees Fetch v4) and so must v10 (librdkafka 2.0); v12+ are flexible, v13+ name
topics by id. v0-3 (magic 0/1 message sets) are not served.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine, Generator
from typing import TYPE_CHECKING, Any

from agent.connection import Deferred
from agent.fetch import PartitionFetch, reader_for
from agent.fetch_answer import Want, enough, fetch_once, offsets_sent, partition_data, resolve
from agent.fetch_incremental import (
    incremental_fetch,
    session_partition,
    sessions_for,
    update_session,
)
from agent.fetch_session import FINAL_EPOCH, INITIAL_EPOCH, FetchSession, SessionKey, next_epoch
from agent.handlers.registry import handler
from agent.metrics import METRICS
from kafka_protocol.errors import ErrorCode
from kafka_protocol.messages import FetchRequest, FetchResponse

if TYPE_CHECKING:
    from agent.broker import Broker
    from agent.connection import RequestContext

__all__ = ["fetch_once", "handle", "partition_data", "sessions_for"]

TopicData = FetchResponse.FetchableTopicResponse

MIN_VERSION = 4
MAX_VERSION = 18

_SESSIONLESS = METRICS.fetch_forms.labels("sessionless")
_FULL = METRICS.fetch_forms.labels("full")
_INCREMENTAL = METRICS.fetch_forms.labels("incremental")


def _response(
    req: FetchRequest, wants: list[Want], results: list[PartitionFetch], session_id: int = 0
) -> FetchResponse:
    topics = [TopicData(topic=t.topic, topic_id=t.topic_id, partitions=[]) for t in req.topics]
    for w, pf in zip(wants, results, strict=True):
        topics[w.topic_index].partitions.append(partition_data(w.partition, pf))
    return FetchResponse(throttle_time_ms=0, error_code=0, session_id=session_id, responses=topics)


def _session_error(code: int, session_id: int = 0) -> FetchResponse:
    return FetchResponse(error_code=code, session_id=session_id, responses=[])


@handler(FetchRequest, min_version=MIN_VERSION, max_version=MAX_VERSION)
async def handle(broker: Broker, ctx: RequestContext, req: FetchRequest) -> Any:
    v = ctx.header.api_version
    by_id = v >= 13
    if v < 7 or (req.session_id == 0 and req.session_epoch == FINAL_EPOCH):
        _SESSIONLESS.inc()
        return Deferred(_Lazy(lambda: _full_fetch(broker, ctx, _cap(broker, ctx, req), by_id, None)))
    cache = sessions_for(broker)
    if req.session_epoch in (INITIAL_EPOCH, FINAL_EPOCH):  # a full request
        (_FULL if req.session_epoch == INITIAL_EPOCH else _SESSIONLESS).inc()
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
    _INCREMENTAL.inc()
    await update_session(broker, ctx, session, req, by_id)
    return Deferred(_Lazy(lambda: incremental_fetch(broker, _cap(broker, ctx, req), session)))


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
    broker: Broker, req: FetchRequest, wants: list[Want], *, fresh: bool
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
        while not enough(results, req.min_bytes):
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
    wants = await resolve(broker, ctx, req, by_id)
    keys: list[SessionKey] = []
    if session is not None:
        # Subscribed before the (fresh) lookups: a commit landing meanwhile stays
        # marked, so the next incremental fetch looks again.
        for w in wants:
            t = req.topics[w.topic_index]
            key: SessionKey = (t.topic_id if by_id else t.topic, w.partition)
            session.upsert(key, session_partition(t, w))
            keys.append(key)
        session.take_candidates()
    results = await _fetch_waiting(broker, req, wants, fresh=session is not None)
    METRICS.fetched_bytes.inc(sum(len(r.records) for r in results))
    if session is None:
        return _response(req, wants, results)
    for skey, pf in zip(keys, results, strict=True):
        hwm, lso, log_start = offsets_sent(pf)
        session.observed(skey, pf.error, hwm)
        session.sent(skey, hwm, lso, log_start, bool(pf.records))
    return _response(req, wants, results, session.id)


class _Lazy:
    """An awaitable that creates its coroutine when first awaited, so a response
    dropped with its connection leaves no "never awaited" coroutine behind."""

    __slots__ = ("_factory",)

    def __init__(self, factory: Callable[[], Coroutine[Any, Any, FetchResponse]]) -> None:
        self._factory = factory

    def __await__(self) -> Generator[Any, None, FetchResponse]:
        return self._factory().__await__()
