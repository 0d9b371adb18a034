"""OffsetDelete (key 47).

Behavior: forgets committed offsets of a group. An empty group loses any
partition asked for. A group with members may lose only partitions of topics
no member subscribes to (parsed from the members' "consumer" protocol
subscriptions); the others get GROUP_SUBSCRIBED_TO_TOPIC. A non-empty group of
another protocol type gets NON_EMPTY_GROUP, an unknown group
GROUP_ID_NOT_FOUND, unknown topics or partitions UNKNOWN_TOPIC_OR_PARTITION.

Versions: 0.
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING

from agent.handlers.registry import handler
from agent.security.authorizer import RT, Op, allowed
from kafka_protocol.errors import ErrorCode
from kafka_protocol.messages import OffsetDeleteRequest, OffsetDeleteResponse
from metastore import MetastoreError

if TYPE_CHECKING:
    from agent.broker import Broker
    from agent.connection import RequestContext

RespTopic = OffsetDeleteResponse.OffsetDeleteResponseTopic
RespPartition = RespTopic.OffsetDeleteResponsePartition


@handler(OffsetDeleteRequest)
async def handle(broker: Broker, ctx: RequestContext, req: OffsetDeleteRequest) -> OffsetDeleteResponse:
    if not req.group_id:
        return OffsetDeleteResponse(error_code=ErrorCode.INVALID_GROUP_ID, throttle_time_ms=0)
    if not allowed(broker, ctx, Op.DELETE, RT.GROUP, req.group_id):
        return OffsetDeleteResponse(error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED, throttle_time_ms=0)
    errors: dict[tuple[str, int], int] = {}
    valid: list[tuple[str, uuid.UUID, int]] = []
    for t in req.topics:
        info = await broker.topic(t.name)
        topic_denied = not allowed(broker, ctx, Op.READ, RT.TOPIC, t.name)
        for p in t.partitions:
            if topic_denied:
                errors[(t.name, p.partition_index)] = ErrorCode.TOPIC_AUTHORIZATION_FAILED
            elif info is None or not 0 <= p.partition_index < info.partitions:
                errors[(t.name, p.partition_index)] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            else:
                valid.append((t.name, info.id, p.partition_index))
    try:
        top, results = await broker.groups.delete_offsets(req.group_id, valid)
    except MetastoreError:
        top, results = ErrorCode.COORDINATOR_NOT_AVAILABLE, []
    if top:
        return OffsetDeleteResponse(error_code=int(top), throttle_time_ms=0)
    for (name, _, partition), err in zip(valid, results, strict=True):
        errors[(name, partition)] = err
    return OffsetDeleteResponse(
        error_code=0,
        throttle_time_ms=0,
        topics=[
            RespTopic(
                name=t.name,
                partitions=[
                    RespPartition(partition_index=p.partition_index, error_code=int(errors[(t.name, p.partition_index)]))
                    for p in t.partitions
                ],
            )
            for t in req.topics
        ],
    )
