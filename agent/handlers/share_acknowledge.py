"""ShareAcknowledge (key 79, KIP-932).

Behavior: acknowledges records a member acquired with ShareFetch, per
partition, without fetching: GAP (0, no record there) and REJECT (3) archive
them, ACCEPT (1) acknowledges them, RELEASE (2) makes them available again (or
archives them at ``share.delivery.count.limit``). Every acknowledgement is
stored in the metastore before the answer, so an accepted record is never
delivered again. Records the member does not hold (never acquired, someone
else's, lock expired) answer INVALID_RECORD_STATE for that partition.

The share session must exist (SHARE_SESSION_NOT_FOUND) and the epoch be its
current one (INVALID_SHARE_SESSION_EPOCH; 0 is INVALID_SHARE_SESSION_EPOCH too:
acknowledging needs an open session); it then advances. Epoch -1 acknowledges,
releases what the member still holds in the session and closes the session
(the consumer's close()).

Versions: 1 (v2's renew acknowledgements are not served).
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING

from agent.groups.share.requests import ack_batches, apply_acks, release_session
from agent.groups.share.sessions import FINAL_EPOCH, INITIAL_EPOCH, sessions_for
from agent.handlers.registry import handler
from agent.security.authorizer import RT, Op, allowed
from kafka_protocol.errors import ErrorCode
from kafka_protocol.messages import ShareAcknowledgeRequest, ShareAcknowledgeResponse

if TYPE_CHECKING:
    from agent.broker import Broker
    from agent.connection import RequestContext

R = ShareAcknowledgeResponse
T = R.ShareAcknowledgeTopicResponse
PD = T.PartitionData


@handler(ShareAcknowledgeRequest, min_version=1, max_version=1)
async def handle(broker: Broker, ctx: RequestContext, req: ShareAcknowledgeRequest) -> R:
    if not req.group_id or not req.member_id:
        return R(error_code=ErrorCode.INVALID_REQUEST, error_message="group id and member id are required")
    if not allowed(broker, ctx, Op.READ, RT.GROUP, req.group_id):
        return R(error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED, error_message="Group authorization failed.")
    cache = sessions_for(broker)
    epoch = req.share_session_epoch
    if epoch == INITIAL_EPOCH:
        return R(error_code=ErrorCode.INVALID_SHARE_SESSION_EPOCH, error_message="no share session to acknowledge in")
    err, session = cache.check(req.group_id, req.member_id, epoch, ctx.conn)
    if session is None:
        return R(error_code=err)
    if epoch == FINAL_EPOCH:
        cache.close(session)
    else:
        cache.advance(session)
    topics: dict[uuid.UUID, T] = {}
    for t in req.topics:
        for p in t.partitions:
            code = await apply_acks(
                broker, req.group_id, req.member_id, t.topic_id, p.partition_index, ack_batches(p.acknowledgement_batches)
            )
            topics.setdefault(t.topic_id, T(topic_id=t.topic_id)).partitions.append(
                PD(partition_index=p.partition_index, error_code=code, current_leader=PD.LeaderIdAndEpoch(broker.node_id, 0))
            )
    if epoch == FINAL_EPOCH:
        await release_session(broker, session)
    return R(throttle_time_ms=0, error_code=0, responses=list(topics.values()))
