"""ListGroups (key 16).

Behavior: every group this agent's coordinator knows, in memory or persisted
(all groups, since this agent coordinates all of them), except deleted ones.
v4+ ``states_filter`` and v5+ ``types_filter`` (every group here is
``classic``) match case-insensitively; an empty filter matches everything.

Versions: 0-5 (v3+ flexible).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agent.handlers.registry import handler
from kafka_protocol.errors import ErrorCode
from kafka_protocol.messages import ListGroupsRequest, ListGroupsResponse
from metastore import MetastoreError

if TYPE_CHECKING:
    from agent.broker import Broker
    from agent.connection import RequestContext

GROUP_TYPE = "classic"


@handler(ListGroupsRequest)
async def handle(broker: Broker, ctx: RequestContext, req: ListGroupsRequest) -> ListGroupsResponse:
    v = ctx.header.api_version
    states = {s.lower() for s in req.states_filter} if v >= 4 else set()
    types = {t.lower() for t in req.types_filter} if v >= 5 else set()
    if types and GROUP_TYPE not in types:
        return ListGroupsResponse(throttle_time_ms=0, error_code=0, groups=[])
    try:
        listed = await broker.groups.list_groups()
    except MetastoreError:
        return ListGroupsResponse(throttle_time_ms=0, error_code=ErrorCode.COORDINATOR_NOT_AVAILABLE, groups=[])
    return ListGroupsResponse(
        throttle_time_ms=0,
        error_code=0,
        groups=[
            ListGroupsResponse.ListedGroup(
                group_id=g.group_id, protocol_type=g.protocol_type or "", group_state=g.state, group_type=GROUP_TYPE
            )
            for g in listed
            if not states or g.state.lower() in states
        ],
    )
