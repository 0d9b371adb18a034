"""ListGroups (key 16).

Behavior: every group this agent's coordinator knows, in memory or persisted
(all groups, since this agent coordinates all of them), except deleted ones.
v4+ ``states_filter`` and v5+ ``types_filter`` (``classic`` for JoinGroup
groups, ``consumer`` for KIP-848 groups, protocol type ``consumer``, ``share`` for KIP-932
share groups) match case-insensitively; an empty filter matches everything.

Versions: 0-5 (v3+ flexible).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agent.groups.share.coordinator import SHARE_TYPE, list_share_groups
from agent.handlers.registry import handler
from agent.security.authorizer import RT, Op, allowed, cluster_allowed
from kafka_protocol.errors import ErrorCode
from kafka_protocol.messages import ListGroupsRequest, ListGroupsResponse
from metastore import MetastoreError

if TYPE_CHECKING:
    from agent.broker import Broker
    from agent.connection import RequestContext

GROUP_TYPE = "classic"
CONSUMER_TYPE = "consumer"


@handler(ListGroupsRequest)
async def handle(broker: Broker, ctx: RequestContext, req: ListGroupsRequest) -> ListGroupsResponse:
    v = ctx.header.api_version
    states = {s.lower() for s in req.states_filter} if v >= 4 else set()
    types = {t.lower() for t in req.types_filter} if v >= 5 else set()
    try:
        listed = await broker.groups.list_groups()
        consumer = await broker.consumer_groups.listing()  # KIP-848 groups: id -> state
        shared = await list_share_groups(broker)  # KIP-932 share groups: (id, state)
    except MetastoreError:
        return ListGroupsResponse(throttle_time_ms=0, error_code=ErrorCode.COORDINATOR_NOT_AVAILABLE, groups=[])
    rows = {g.group_id: (g.protocol_type or "", g.state, GROUP_TYPE) for g in listed}
    # A consumer group's id may also have a classic row (offsets); the consumer group wins.
    rows.update({gid: ("consumer", state, CONSUMER_TYPE) for gid, state in consumer.items()})
    rows.update({gid: (SHARE_TYPE, state, SHARE_TYPE) for gid, state in shared})
    # DESCRIBE on the cluster lists every group, else those the caller may DESCRIBE.
    everything = cluster_allowed(broker, ctx, Op.DESCRIBE)
    return ListGroupsResponse(
        throttle_time_ms=0,
        error_code=0,
        groups=[
            ListGroupsResponse.ListedGroup(group_id=gid, protocol_type=ptype, group_state=state, group_type=gtype)
            for gid, (ptype, state, gtype) in sorted(rows.items())
            if (not states or state.lower() in states)
            and (not types or gtype in types)
            and (everything or allowed(broker, ctx, Op.DESCRIBE, RT.GROUP, gid))
        ],
    )
