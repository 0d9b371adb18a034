"""ShareGroupHeartbeat (key 76, KIP-932).

Behavior: a share consumer joins (epoch 0, with its member id and subscribed
topic names), heartbeats (its current epoch; subscription only when changed) and
leaves (epoch -1) through ``agent.groups.share.coordinator``. The answer carries
the member epoch, the heartbeat interval (``share.heartbeat.interval.ms``) and,
when it changed, the assignment: every partition of every subscribed topic.
UNKNOWN_MEMBER_ID / FENCED_MEMBER_EPOCH make the client rejoin; a join without
topics is INVALID_REQUEST; a metastore failure COORDINATOR_NOT_AVAILABLE.

Versions: 1 (v0 was Kafka 4.0's early access and is gone from 4.1 on).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agent.groups.share.coordinator import coordinator_for
from agent.handlers.registry import handler
from agent.security.authorizer import RT, Op, allowed
from kafka_protocol.errors import ErrorCode
from kafka_protocol.messages import ShareGroupHeartbeatRequest, ShareGroupHeartbeatResponse
from metastore import MetastoreError

if TYPE_CHECKING:
    from agent.broker import Broker
    from agent.connection import RequestContext

R = ShareGroupHeartbeatResponse


@handler(ShareGroupHeartbeatRequest, min_version=1, max_version=1)
async def handle(broker: Broker, ctx: RequestContext, req: ShareGroupHeartbeatRequest) -> R:
    if not req.group_id:
        return R(error_code=ErrorCode.INVALID_GROUP_ID, error_message="empty group id", member_epoch=-1)
    # READ on the group; DESCRIBE on every subscribed topic.
    if not allowed(broker, ctx, Op.READ, RT.GROUP, req.group_id):
        return R(error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED, error_message="Group authorization failed.", member_epoch=-1)
    denied = sorted({t for t in req.subscribed_topic_names or () if not allowed(broker, ctx, Op.DESCRIBE, RT.TOPIC, t)})
    if denied:
        return R(
            error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED,
            error_message=f"The following topics are not authorized: {', '.join(denied)}",
            member_epoch=-1,
        )
    try:
        res = await coordinator_for(broker).heartbeat(
            req.group_id,
            req.member_id,
            req.member_epoch,
            req.rack_id,
            req.subscribed_topic_names,
            ctx.client_id,
            ctx.client_host,
        )
    except MetastoreError as e:
        return R(error_code=ErrorCode.COORDINATOR_NOT_AVAILABLE, error_message=str(e), member_epoch=-1)
    assignment = None
    if res.assignment is not None:
        assignment = R.Assignment(
            topic_partitions=[
                R.TopicPartitions(topic_id=t, partitions=ps) for t, ps in sorted(res.assignment.items())
            ]
        )
    return R(
        error_code=res.error,
        error_message=res.message,
        member_id=res.member_id,
        member_epoch=res.member_epoch,
        heartbeat_interval_ms=res.interval_ms,
        assignment=assignment,
    )
