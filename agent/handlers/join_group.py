"""JoinGroup (key 11).

Behavior: the classic group protocol's join barrier (see
:mod:`agent.groups.coordinator`). The response is deferred until the rebalance
completes, so the connection keeps reading meanwhile. v4+ members joining
without a member id first get MEMBER_ID_REQUIRED with their new id (KIP-394);
v5+ ``group_instance_id`` makes a static member (KIP-345). Session timeouts
outside the agent's ``group_min/max_session_timeout_ms`` get
INVALID_SESSION_TIMEOUT; v0 (no rebalance timeout) uses the session timeout as
rebalance timeout. The leader gets every member's metadata for the chosen
protocol; the others an empty list. ``skip_assignment`` (v9) is set only for a
static leader that rejoined without changes. For a (non-empty) KIP-848
consumer group of that id the consumer-group coordinator answers (a classic
member of a consumer group: its member epoch as generation, no leader).

Versions: 0-9 (v6+ flexible). Min 0 for old librdkafka.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from agent.connection import Deferred
from agent.groups import JoinRequest, JoinResult
from agent.handlers.registry import handler
from agent.security.authorizer import RT, Op, allowed
from kafka_protocol.errors import ErrorCode
from kafka_protocol.messages import JoinGroupRequest, JoinGroupResponse

if TYPE_CHECKING:
    from agent.broker import Broker
    from agent.connection import RequestContext

Member = JoinGroupResponse.JoinGroupResponseMember


def _response(res: JoinResult, v: int) -> JoinGroupResponse:
    return JoinGroupResponse(
        throttle_time_ms=0,
        error_code=int(res.error),
        generation_id=res.generation,
        protocol_type=res.protocol_type,
        protocol_name=res.protocol_name if (res.protocol_name is not None or v >= 7) else "",
        leader=res.leader_id,
        skip_assignment=res.skip_assignment,
        member_id=res.member_id,
        members=[Member(member_id=mid, group_instance_id=iid, metadata=meta) for mid, iid, meta in res.members],
    )


async def _denied(v: int, member_id: str) -> JoinGroupResponse:
    return JoinGroupResponse(
        throttle_time_ms=0, error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED, generation_id=-1,
        protocol_type=None, protocol_name=None if v >= 7 else "", leader="", member_id=member_id, members=[],
    )  # fmt: skip


@handler(JoinGroupRequest, min_version=0)
async def handle(broker: Broker, ctx: RequestContext, req: JoinGroupRequest) -> Deferred:
    v = ctx.header.api_version
    if not allowed(broker, ctx, Op.READ, RT.GROUP, req.group_id):
        return Deferred(_denied(v, req.member_id or ""))
    rebalance_ms = req.rebalance_timeout_ms if v >= 1 and req.rebalance_timeout_ms > 0 else req.session_timeout_ms
    join = JoinRequest(
        group_id=req.group_id,
        member_id=req.member_id or "",
        group_instance_id=req.group_instance_id if v >= 5 else None,
        client_id=ctx.client_id,
        client_host=f"/{ctx.client_host}",
        session_timeout_ms=req.session_timeout_ms,
        rebalance_timeout_ms=rebalance_ms,
        protocol_type=req.protocol_type,
        protocols=[(p.name, bytes(p.metadata)) for p in req.protocols],
        require_known_member_id=v >= 4,
    )

    async def run() -> JoinGroupResponse:
        cfg = broker.groups.config
        if join.group_id and not cfg.min_session_timeout_ms <= join.session_timeout_ms <= cfg.max_session_timeout_ms:
            return _response(JoinResult(ErrorCode.INVALID_SESSION_TIMEOUT, join.member_id), v)
        # A consumer group of this id answers classic members itself (online migration).
        res = await broker.consumer_groups.classic_join(join)
        return _response(res if res is not None else await broker.groups.join(join), v)

    # A task, not a bare coroutine: the member must enter the barrier now, even
    # while earlier responses of this connection are still pending.
    return Deferred(asyncio.ensure_future(run()))
