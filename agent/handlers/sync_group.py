"""SyncGroup (key 14).

Behavior: the second half of the barrier. The leader's request carries every
member's assignment; the coordinator stores them (members it did not mention
get an empty assignment), moves the group to Stable and answers every waiting
member. Followers wait (a deferred response) until the leader has synced. Stale
generations get ILLEGAL_GENERATION, unknown members UNKNOWN_MEMBER_ID, a group
that started another rebalance REBALANCE_IN_PROGRESS; v5 protocol type/name
must match the group's (INCONSISTENT_GROUP_PROTOCOL). A classic member of a
KIP-848 consumer group gets its current assignment from the consumer-group
coordinator at once (REBALANCE_IN_PROGRESS when it must rejoin first).

Versions: 0-5 (v4+ flexible). Min 0 for old librdkafka.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from agent.connection import Deferred
from agent.handlers.registry import handler
from agent.security.authorizer import RT, Op, allowed
from kafka_protocol.errors import ErrorCode
from kafka_protocol.messages import SyncGroupRequest, SyncGroupResponse

if TYPE_CHECKING:
    from agent.broker import Broker
    from agent.connection import RequestContext


@handler(SyncGroupRequest, min_version=0)
async def handle(broker: Broker, ctx: RequestContext, req: SyncGroupRequest) -> Deferred | SyncGroupResponse:
    v = ctx.header.api_version
    if not allowed(broker, ctx, Op.READ, RT.GROUP, req.group_id):
        return SyncGroupResponse(throttle_time_ms=0, error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED, assignment=b"")
    assignments = {a.member_id: bytes(a.assignment) for a in req.assignments}

    async def run() -> SyncGroupResponse:
        res = await broker.consumer_groups.classic_sync(
            req.group_id, req.generation_id, req.member_id, req.group_instance_id if v >= 3 else None,
            req.protocol_type if v >= 5 else None, req.protocol_name if v >= 5 else None,
        ) or await broker.groups.sync(
            req.group_id,
            req.generation_id,
            req.member_id,
            req.group_instance_id if v >= 3 else None,
            assignments,
            req.protocol_type if v >= 5 else None,
            req.protocol_name if v >= 5 else None,
        )
        return SyncGroupResponse(
            throttle_time_ms=0,
            error_code=int(res.error),
            protocol_type=res.protocol_type,
            protocol_name=res.protocol_name,
            assignment=res.assignment,
        )

    return Deferred(asyncio.ensure_future(run()))
