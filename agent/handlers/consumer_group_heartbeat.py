"""ConsumerGroupHeartbeat (key 68): the KIP-848 consumer protocol.

Behavior: one request joins (epoch 0), heartbeats, changes the subscription
(topic names or an RE2 regex), reports the partitions the member owns and
leaves (epoch -1; -2 for a static member that will come back). The coordinator
(:mod:`agent.groups.consumer.coordinator`) answers the member's epoch and, when
it changed, the partitions it may use now; a partition is handed to a member
only after its previous owner reported it revoked. Errors as in Kafka:
INVALID_REQUEST (bad fields), UNKNOWN_MEMBER_ID, FENCED_MEMBER_EPOCH,
UNRELEASED_INSTANCE_ID, UNSUPPORTED_ASSIGNOR, INVALID_REGULAR_EXPRESSION (v1),
GROUP_ID_NOT_FOUND (a non-empty classic group of that id), GROUP_MAX_SIZE_REACHED,
NOT_COORDINATOR (another agent owns the group on the ring).

Versions: 0-1 (flexible). v1 adds SubscribedTopicRegex and requires the client
to choose its member id (KIP-1082); v0 gets one from the coordinator.
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING

from agent.groups.consumer import Heartbeat
from agent.handlers.registry import handler
from agent.security.authorizer import RT, Op, allowed
from kafka_protocol.errors import ErrorCode
from kafka_protocol.messages import ConsumerGroupHeartbeatRequest, ConsumerGroupHeartbeatResponse

if TYPE_CHECKING:
    from agent.broker import Broker
    from agent.connection import RequestContext

Resp = ConsumerGroupHeartbeatResponse
MAX_OWNED = 1_000_000  # partitions reported owned; more is a malformed request



def _undescribable(broker: Broker, ctx: RequestContext, topics: list[str] | None) -> list[str]:
    """The subscribed topics the caller may not DESCRIBE (Kafka answers TOPIC_AUTHORIZATION_FAILED)."""
    return sorted({t for t in topics or () if not allowed(broker, ctx, Op.DESCRIBE, RT.TOPIC, t)})


@handler(ConsumerGroupHeartbeatRequest)
async def handle(broker: Broker, ctx: RequestContext, req: ConsumerGroupHeartbeatRequest) -> Resp:
    v = ctx.header.api_version
    # READ on the group; DESCRIBE on every subscribed topic.
    if not allowed(broker, ctx, Op.READ, RT.GROUP, req.group_id):
        return Resp(error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED, error_message="Group authorization failed.")
    denied = _undescribable(broker, ctx, req.subscribed_topic_names)
    if denied:
        return Resp(
            error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED,
            error_message=f"The following topics are not authorized: {', '.join(denied)}",
        )
    owned: dict[uuid.UUID, set[int]] | None = None
    if req.topic_partitions is not None:
        owned = {}
        n = 0
        for tp in req.topic_partitions:
            owned.setdefault(tp.topic_id, set()).update(tp.partitions)
            n += len(tp.partitions)
        if n > MAX_OWNED or any(p < 0 for ps in owned.values() for p in ps):
            return Resp(error_code=ErrorCode.INVALID_REQUEST, error_message="TopicPartitions is invalid.")
    hb = Heartbeat(
        group_id=req.group_id,
        member_id=req.member_id,
        member_epoch=req.member_epoch,
        instance_id=req.instance_id,
        rack_id=req.rack_id,
        rebalance_timeout_ms=req.rebalance_timeout_ms,
        subscribed_topic_names=req.subscribed_topic_names,
        subscribed_topic_regex=req.subscribed_topic_regex if v >= 1 else None,
        server_assignor=req.server_assignor,
        owned=owned,
        client_id=ctx.client_id,
        client_host=f"/{ctx.client_host}",
        version=v,
    )
    res = await broker.consumer_groups.heartbeat(hb)
    return Resp(
        throttle_time_ms=0,
        error_code=res.error,
        error_message=res.message,
        member_id=res.member_id,
        member_epoch=res.member_epoch,
        heartbeat_interval_ms=res.heartbeat_interval_ms,
        assignment=None
        if res.assignment is None
        else Resp.Assignment(
            topic_partitions=[
                Resp.TopicPartitions(topic_id=t, partitions=sorted(ps))
                for t, ps in sorted(res.assignment.items(), key=lambda kv: str(kv[0]))
            ]
        ),
    )
