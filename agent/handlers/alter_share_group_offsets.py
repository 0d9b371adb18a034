"""AlterShareGroupOffsets (key 91, KIP-932).

Behavior: sets the share-partition start offset of the listed partitions of an
empty share group (a group with members: NON_EMPTY_GROUP); the in-flight state
is dropped, delivery restarts at the new offset. Unknown topics or partitions:
UNKNOWN_TOPIC_OR_PARTITION; a negative offset INVALID_REQUEST. A group not seen
before is created (so it lists and describes).

Versions: 0.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agent.groups.share.coordinator import coordinator_for
from agent.groups.share.manager import manager_for, reset_start
from agent.handlers.registry import handler
from agent.security.authorizer import RT, Op, allowed
from kafka_protocol.errors import ErrorCode
from kafka_protocol.messages import AlterShareGroupOffsetsRequest, AlterShareGroupOffsetsResponse
from metastore import MetastoreError

if TYPE_CHECKING:
    from agent.broker import Broker
    from agent.connection import RequestContext

R = AlterShareGroupOffsetsResponse
T = R.AlterShareGroupOffsetsResponseTopic
P = T.AlterShareGroupOffsetsResponsePartition


@handler(AlterShareGroupOffsetsRequest)
async def handle(broker: Broker, ctx: RequestContext, req: AlterShareGroupOffsetsRequest) -> R:
    if not req.group_id:
        return R(error_code=ErrorCode.INVALID_GROUP_ID, error_message="empty group id")
    # READ on the group and on every topic (Kafka's rule for AlterShareGroupOffsets).
    if not allowed(broker, ctx, Op.READ, RT.GROUP, req.group_id):
        return R(error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED, error_message="Group authorization failed.")
    if any(not allowed(broker, ctx, Op.READ, RT.TOPIC, t.topic_name) for t in req.topics):
        return R(error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED, error_message="Topic authorization failed.")
    try:
        if not await coordinator_for(broker).is_empty(req.group_id):
            return R(error_code=ErrorCode.NON_EMPTY_GROUP, error_message="the share group has members")
        await broker.meta.share_group_save(req.group_id, 0)
        out = []
        for t in req.topics:
            info = await broker.topic(t.topic_name)
            parts = []
            for p in t.partitions:
                if info is None or not 0 <= p.partition_index < info.partitions:
                    parts.append(P(partition_index=p.partition_index, error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION))
                elif p.start_offset < 0:
                    parts.append(P(partition_index=p.partition_index, error_code=ErrorCode.INVALID_REQUEST, error_message="negative start offset"))
                else:
                    await reset_start(broker, (req.group_id, info.id, p.partition_index), p.start_offset)
                    parts.append(P(partition_index=p.partition_index))
            out.append(T(topic_name=t.topic_name, topic_id=info.id if info else T().topic_id, partitions=parts))
        manager_for(broker).forget(req.group_id)
        return R(throttle_time_ms=0, responses=out)
    except MetastoreError as e:
        return R(error_code=ErrorCode.COORDINATOR_NOT_AVAILABLE, error_message=str(e))
