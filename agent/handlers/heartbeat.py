"""Heartbeat (key 12).

Behavior: keeps a member's session alive. NONE while Stable or
CompletingRebalance, REBALANCE_IN_PROGRESS while the group is rebalancing (the
member should rejoin), ILLEGAL_GENERATION for a stale generation,
UNKNOWN_MEMBER_ID for members the group does not know (expired, left, never
joined), FENCED_INSTANCE_ID for a replaced static member. A classic member of
a KIP-848 consumer group gets REBALANCE_IN_PROGRESS while it has to rejoin to
reconcile (online migration).

Versions: 0-4 (v4+ flexible). Min 0 for old librdkafka.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agent.handlers.registry import handler
from agent.security.authorizer import RT, Op, allowed
from kafka_protocol.errors import ErrorCode
from kafka_protocol.messages import HeartbeatRequest, HeartbeatResponse

if TYPE_CHECKING:
    from agent.broker import Broker
    from agent.connection import RequestContext


@handler(HeartbeatRequest, min_version=0)
async def handle(broker: Broker, ctx: RequestContext, req: HeartbeatRequest) -> HeartbeatResponse:
    if not allowed(broker, ctx, Op.READ, RT.GROUP, req.group_id):
        return HeartbeatResponse(throttle_time_ms=0, error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED)
    instance = req.group_instance_id if ctx.header.api_version >= 3 else None
    error = await broker.consumer_groups.classic_heartbeat(req.group_id, req.generation_id, req.member_id, instance)
    if error is None:  # not a consumer group: the classic coordinator's
        error = await broker.groups.heartbeat(req.group_id, req.generation_id, req.member_id, instance)
    return HeartbeatResponse(throttle_time_ms=0, error_code=int(error))
