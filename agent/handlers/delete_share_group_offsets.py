"""DeleteShareGroupOffsets (key 92, KIP-932).

Behavior: forgets the share-partition state of the listed topics for an empty
share group (members: NON_EMPTY_GROUP); the next fetch starts the partitions
over from ``share.auto.offset.reset``. An unknown topic answers
UNKNOWN_TOPIC_OR_PARTITION for that topic; an unknown group GROUP_ID_NOT_FOUND.

Versions: 0.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agent.groups.share.coordinator import coordinator_for
from agent.groups.share.manager import manager_for
from agent.handlers.registry import handler
from agent.security.authorizer import RT, Op, allowed
from kafka_protocol.errors import ErrorCode
from kafka_protocol.messages import DeleteShareGroupOffsetsRequest, DeleteShareGroupOffsetsResponse
from metastore import MetastoreError

if TYPE_CHECKING:
    from agent.broker import Broker
    from agent.connection import RequestContext

R = DeleteShareGroupOffsetsResponse
T = R.DeleteShareGroupOffsetsResponseTopic


@handler(DeleteShareGroupOffsetsRequest)
async def handle(broker: Broker, ctx: RequestContext, req: DeleteShareGroupOffsetsRequest) -> R:
    if not req.group_id:
        return R(error_code=ErrorCode.INVALID_GROUP_ID, error_message="empty group id")
    # DELETE on the group, READ on every topic.
    if not allowed(broker, ctx, Op.DELETE, RT.GROUP, req.group_id):
        return R(error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED, error_message="Group authorization failed.")
    if any(not allowed(broker, ctx, Op.READ, RT.TOPIC, t.topic_name) for t in req.topics):
        return R(error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED, error_message="Topic authorization failed.")
    try:
        coord = coordinator_for(broker)
        if await coord.describe(req.group_id) is None:
            return R(error_code=ErrorCode.GROUP_ID_NOT_FOUND, error_message=f"share group {req.group_id} not found")
        if not await coord.is_empty(req.group_id):
            return R(error_code=ErrorCode.NON_EMPTY_GROUP, error_message="the share group has members")
        out = []
        for t in req.topics:
            info = await broker.topic(t.topic_name)
            if info is None:
                out.append(T(topic_name=t.topic_name, error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION))
                continue
            await broker.meta.share_partitions_delete(req.group_id, [(info.id, p) for p in range(info.partitions)])
            out.append(T(topic_name=t.topic_name, topic_id=info.id))
        manager_for(broker).forget(req.group_id)
        return R(throttle_time_ms=0, responses=out)
    except MetastoreError as e:
        return R(error_code=ErrorCode.COORDINATOR_NOT_AVAILABLE, error_message=str(e))
