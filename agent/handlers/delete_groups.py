"""DeleteGroups (key 42).

Behavior: deletes groups with no members, with their committed offsets
(NON_EMPTY_GROUP while any member is in the group, GROUP_ID_NOT_FOUND for
unknown groups, INVALID_GROUP_ID for an empty id). A share group (KIP-932) is
deleted with its share-partition state and group configs.

Versions: 0-2 (v2+ flexible).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agent.groups.share.coordinator import coordinator_for
from agent.handlers.registry import handler
from agent.security.authorizer import RT, Op, allowed
from kafka_protocol.errors import ErrorCode
from kafka_protocol.messages import DeleteGroupsRequest, DeleteGroupsResponse
from metastore import MetastoreError

if TYPE_CHECKING:
    from agent.broker import Broker
    from agent.connection import RequestContext

Result = DeleteGroupsResponse.DeletableGroupResult


@handler(DeleteGroupsRequest)
async def handle(broker: Broker, ctx: RequestContext, req: DeleteGroupsRequest) -> DeleteGroupsResponse:
    results: list[Result] = []
    for group_id in req.groups_names:
        if not group_id:
            results.append(Result(group_id=group_id, error_code=ErrorCode.INVALID_GROUP_ID))
            continue
        if not allowed(broker, ctx, Op.DELETE, RT.GROUP, group_id):
            results.append(Result(group_id=group_id, error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED))
            continue
        try:
            shared = await coordinator_for(broker).delete(group_id)  # a KIP-932 share group
            if shared is not None:
                results.append(Result(group_id=group_id, error_code=shared))
                continue
            error = await broker.consumer_groups.delete(group_id)  # a KIP-848 group: checked here
            if error in (None, ErrorCode.NONE):
                error = await broker.groups.delete_group(group_id)
        except MetastoreError:
            error = ErrorCode.COORDINATOR_NOT_AVAILABLE
        results.append(Result(group_id=group_id, error_code=int(error)))
    return DeleteGroupsResponse(throttle_time_ms=0, results=results)
