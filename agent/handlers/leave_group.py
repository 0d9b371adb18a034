"""LeaveGroup (key 13).

Behavior: removes members and starts a rebalance for the rest. v0-2 name one
member (its error is the top-level error); v3+ a batch of members, each by
member id and/or ``group_instance_id`` (a static member leaves only when its
instance id is given; a member id that does not match the instance's current
one gets FENCED_INSTANCE_ID). Unknown members get UNKNOWN_MEMBER_ID.

Versions: 0-5 (v4+ flexible). Min 0 for old librdkafka.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agent.handlers.registry import handler
from agent.security.authorizer import RT, Op, allowed
from kafka_protocol.errors import ErrorCode
from kafka_protocol.messages import LeaveGroupRequest, LeaveGroupResponse

if TYPE_CHECKING:
    from agent.broker import Broker
    from agent.connection import RequestContext

MemberResponse = LeaveGroupResponse.MemberResponse


@handler(LeaveGroupRequest, min_version=0)
async def handle(broker: Broker, ctx: RequestContext, req: LeaveGroupRequest) -> LeaveGroupResponse:
    v = ctx.header.api_version
    if not allowed(broker, ctx, Op.READ, RT.GROUP, req.group_id):
        return LeaveGroupResponse(throttle_time_ms=0, error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED, members=[])
    wanted = [(req.member_id, None)] if v < 3 else [(m.member_id, m.group_instance_id) for m in req.members]
    # Classic members of a KIP-848 consumer group leave through its coordinator.
    left = await broker.consumer_groups.classic_leave(req.group_id, wanted)
    top, errors = left if left is not None else await broker.groups.leave(req.group_id, wanted)
    if v < 3:
        return LeaveGroupResponse(throttle_time_ms=0, error_code=int(top or errors[0]))
    return LeaveGroupResponse(
        throttle_time_ms=0,
        error_code=int(top),
        members=[
            MemberResponse(member_id=mid, group_instance_id=iid, error_code=int(err))
            for (mid, iid), err in zip(wanted, errors, strict=True)
        ],
    )
