"""The incremental Fetch of a session (KIP-227): look only at what changed, answer only what has news.

Where it sits: the Fetch handler (:mod:`agent.handlers.fetch`) sends here every
request of a session after its first (epoch 1, 2, ...): :func:`update_session`
applies the partitions the request adds, moves or forgets to the
:class:`~agent.fetch_session.FetchSession`, and :func:`incremental_fetch`
plans answers (:func:`agent.fetch_answer.fetch_once`) only for the partitions
that changed, have unfetched data or an error, long-polling on the session's
event. :func:`sessions_for` gives the agent's session cache.
"""

from __future__ import annotations

import asyncio
import weakref
from typing import TYPE_CHECKING, Any

from agent.fetch import PartitionFetch, reader_for
from agent.fetch_answer import Want, enough, fetch_once, offsets_sent, partition_data, resolve
from agent.fetch_session import FetchSession, FetchSessionCache, SessionKey, SessionPartition
from agent.metrics import METRICS
from kafka_protocol.messages import FetchRequest, FetchResponse

if TYPE_CHECKING:
    from agent.broker import Broker
    from agent.connection import RequestContext

TopicData = FetchResponse.FetchableTopicResponse


def session_partition(t: Any, w: Want) -> SessionPartition:
    """What a session keeps of one requested partition."""
    return SessionPartition(
        topic=t.topic, topic_ref=t.topic_id, topic_id=w.topic_id, partition=w.partition,
        fetch_offset=w.fetch_offset, max_bytes=w.max_bytes, error=w.error,
    )  # fmt: skip


async def update_session(
    broker: Broker, ctx: RequestContext, session: FetchSession, req: FetchRequest, by_id: bool
) -> None:
    """Apply an incremental request: new or moved partitions, then forgotten ones."""
    for w in await resolve(broker, ctx, req, by_id):
        t = req.topics[w.topic_index]
        session.upsert((t.topic_id if by_id else t.topic, w.partition), session_partition(t, w))
    for f in req.forgotten_topics_data:
        ref = f.topic_id if by_id else f.topic
        for p in f.partitions:
            session.remove((ref, p))


async def incremental_fetch(broker: Broker, req: FetchRequest, session: FetchSession) -> FetchResponse:
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
                w = Want(ti, part.partition, part.fetch_offset, part.max_bytes, part.topic_id, part.error)
                wants.append(w)
            results = await fetch_once(reader, wants, req.max_bytes, fresh=True, read_committed=req.isolation_level == 1)
            for (key, part), pf in zip(candidates, results, strict=True):
                hwm, lso, log_start = offsets_sent(pf)
                session.observed(key, pf.error, hwm)
                if session.must_respond(part, pf.error, hwm, lso, log_start, len(pf.records)):
                    answer[key] = pf
            if enough(list(answer.values()), req.min_bytes):
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
        hwm, lso, log_start = offsets_sent(pf)
        session.sent(key, hwm, lso, log_start, bool(pf.records))
    METRICS.fetched_bytes.inc(sum(len(pf.records) for pf in answer.values()))
    return FetchResponse(
        throttle_time_ms=0, error_code=0, session_id=session.id, responses=list(topics.values())
    )


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
