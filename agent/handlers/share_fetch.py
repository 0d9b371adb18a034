"""ShareFetch (key 78, KIP-932).

Behavior:

- Share session (``agent.groups.share.sessions``): epoch 0 opens one for the
  member with the listed partitions (acknowledgements then are INVALID_REQUEST);
  a later epoch must match (else INVALID_SHARE_SESSION_EPOCH; no session:
  SHARE_SESSION_NOT_FOUND), adds the listed partitions and drops
  ``forgotten_topics_data``; -1 applies the acknowledgements, releases what the
  member still holds in the session's partitions and closes it (no records).
- Acknowledgements piggybacked per partition (GAP, ACCEPT, RELEASE, REJECT) are
  applied and stored before anything is answered; the partition's
  ``acknowledge_error_code`` says how that went (INVALID_RECORD_STATE for
  records the member does not hold, e.g. after its lock expired).
- Then records are acquired from the session's partitions, up to
  ``max_records`` in all (500 if unset) and ``max_bytes``: each partition
  answers the whole batches holding its acquired offsets and the acquired
  ranges with their delivery counts; the client keeps only acquired offsets.
  ``acquisition_lock_timeout_ms`` is the group's ``share.record.lock.duration.ms``.
- Nothing acquired and ``max_wait_ms`` > 0: waits (a Deferred) for a commit to
  one of the partitions or the next acquisition-lock expiry, then tries again,
  until ``max_wait_ms``.
- Any agent serves any share partition: the state is in the metastore.
- Only partitions with records, an acknowledgement result or an error are in
  the response. Unknown topic ids: UNKNOWN_TOPIC_ID for that partition.

Versions: 1 (v2's ShareAcquireMode / renew acknowledgements are not served).
"""

from __future__ import annotations

import asyncio
import uuid
from typing import TYPE_CHECKING, Any

from agent.connection import Deferred
from agent.groups.share.manager import manager_for
from agent.groups.share.requests import ack_batches, apply_acks, partition_error, release_session
from agent.groups.share.sessions import FINAL_EPOCH, INITIAL_EPOCH, ShareSession, sessions_for
from agent.handlers.registry import handler
from agent.security.authorizer import RT, Op, allowed
from kafka_protocol.errors import ErrorCode
from kafka_protocol.messages import ShareFetchRequest, ShareFetchResponse
from metastore import MetastoreError

if TYPE_CHECKING:
    from agent.broker import Broker
    from agent.connection import RequestContext

R = ShareFetchResponse
PD = R.ShareFetchableTopicResponse.PartitionData
TP = tuple[uuid.UUID, int]
DEFAULT_MAX_RECORDS = 500


def _error(code: int, message: str | None = None) -> R:
    return R(throttle_time_ms=0, error_code=code, error_message=message)


@handler(ShareFetchRequest, min_version=1, max_version=1)
async def handle(broker: Broker, ctx: RequestContext, req: ShareFetchRequest) -> Any:
    if not req.group_id or not req.member_id:
        return _error(ErrorCode.INVALID_REQUEST, "group id and member id are required")
    # READ on the group and on every topic asked for (a refused topic refuses the request:
    # partitions enter a share session only through a request that passed this check).
    if not allowed(broker, ctx, Op.READ, RT.GROUP, req.group_id):
        return _error(ErrorCode.GROUP_AUTHORIZATION_FAILED, "Group authorization failed.")
    if broker.authorizer is not None:
        for t in req.topics:
            info = await broker.topic_by_id(t.topic_id)
            if info is not None and not allowed(broker, ctx, Op.READ, RT.TOPIC, info.name):
                return _error(ErrorCode.TOPIC_AUTHORIZATION_FAILED, f"Topic authorization failed: {info.name}")
    cache = sessions_for(broker)
    listed = [(t.topic_id, p.partition_index) for t in req.topics for p in t.partitions]
    acks = {
        (t.topic_id, p.partition_index): ack_batches(p.acknowledgement_batches)
        for t in req.topics
        for p in t.partitions
        if p.acknowledgement_batches
    }
    epoch = req.share_session_epoch
    session: ShareSession | None
    if epoch == INITIAL_EPOCH:
        if acks:
            return _error(ErrorCode.INVALID_REQUEST, "acknowledgements in a new share session")
        old = cache.get(req.group_id, req.member_id, ctx.conn)
        if old is not None:
            cache.close(old)
        session = cache.open(req.group_id, req.member_id, ctx.conn)
        if session is None:
            return _error(ErrorCode.SHARE_SESSION_LIMIT_REACHED)
        session.add(listed)
    else:
        err, session = cache.check(req.group_id, req.member_id, epoch, ctx.conn)
        if session is None:
            return _error(err)
        if epoch == FINAL_EPOCH:
            cache.close(session)
        else:
            cache.advance(session)
            session.add(listed)
            session.remove([(f.topic_id, p) for f in req.forgotten_topics_data for p in f.partitions])
    s = session
    return Deferred(_answer(broker, req, s, acks, final=epoch == FINAL_EPOCH))


async def _answer(broker: Broker, req: ShareFetchRequest, session: ShareSession, acks: dict[TP, list[Any]], *, final: bool) -> R:
    mgr = manager_for(broker)
    try:
        limits = await mgr.limits(session.group_id)
    except MetastoreError as e:
        return _error(ErrorCode.COORDINATOR_NOT_AVAILABLE, str(e))
    parts: dict[TP, PD] = {}

    def pd(tp: TP) -> PD:
        p = parts.get(tp)
        if p is None:
            p = parts[tp] = PD(partition_index=tp[1], current_leader=PD.LeaderIdAndEpoch(broker.node_id, 0), records=b"")
        return p

    for tp, batches in acks.items():
        pd(tp).acknowledge_error_code = await apply_acks(broker, session.group_id, session.member_id, tp[0], tp[1], batches)
    if final:
        await release_session(broker, session)
    else:
        await _acquire(broker, req, session, pd, waiting=not acks)
    topics: dict[uuid.UUID, R.ShareFetchableTopicResponse] = {}
    for (topic_id, _), p in parts.items():
        topics.setdefault(topic_id, R.ShareFetchableTopicResponse(topic_id=topic_id)).partitions.append(p)
    return R(
        throttle_time_ms=0,
        error_code=0,
        acquisition_lock_timeout_ms=limits.lock_ms,
        responses=list(topics.values()),
    )


async def _acquire(broker: Broker, req: ShareFetchRequest, session: ShareSession, pd: Any, *, waiting: bool) -> None:
    mgr = manager_for(broker)
    clock = broker.clock
    deadline = clock.monotonic() + max(0, req.max_wait_ms) / 1000.0
    valid: list[TP] = []
    for tp in list(session.partitions):
        err = await partition_error(broker, *tp)
        if err:
            pd(tp).error_code = err
        else:
            valid.append(tp)
    keys = [(session.group_id, t, p) for t, p in valid]
    while True:
        budget = req.max_records if req.max_records > 0 else DEFAULT_MAX_RECORDS
        bytes_left = req.max_bytes if req.max_bytes > 0 else 0x7FFFFFFF
        got_any = False
        with broker.notifier.watch(valid) as ev:
            for key in keys:
                if budget <= 0 or bytes_left <= 0:
                    break
                res = await mgr.fetch(key, session.member_id, budget, bytes_left)
                if res.error:
                    pd(key[1:]).error_code = res.error
                if res.acquired:
                    got_any = True
                    p = pd(key[1:])
                    p.records = res.records
                    p.acquired_records = [PD.AcquiredRecords(f, last, dc) for f, last, dc in res.acquired]
                    budget -= sum(last - f + 1 for f, last, _ in res.acquired)
                    bytes_left -= len(res.records)
            remaining = deadline - clock.monotonic()
            if got_any or not waiting or remaining <= 0 or not keys:
                return
            expiry = mgr.next_expiry_ms(keys)
            if expiry is not None:
                remaining = min(remaining, max(0.0, (expiry - clock.now_ms()) / 1000.0) + 0.01)
            try:
                await asyncio.wait_for(ev.wait(), timeout=remaining)
            except TimeoutError:
                pass
