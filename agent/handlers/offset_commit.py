"""OffsetCommit (key 8).

Behavior: the coordinator checks the committer (group members must commit with
their member id and the current generation: UNKNOWN_MEMBER_ID,
ILLEGAL_GENERATION, REBALANCE_IN_PROGRESS while the group waits for the
leader's assignment, FENCED_INSTANCE_ID for a replaced static member). A commit
with generation -1 and an empty member id (v0 always) is a standalone commit,
allowed only while the group has no members; for an unknown group it creates an
Empty group. Per partition: unknown topics or partitions get
UNKNOWN_TOPIC_OR_PARTITION (v10: UNKNOWN_TOPIC_ID for unknown topic ids), a
metadata string longer than ``offset_metadata_max_bytes`` gets
OFFSET_METADATA_TOO_LARGE. The response is sent only after the metastore write;
a failed write answers COORDINATOR_NOT_AVAILABLE (retriable).
``commit_timestamp`` (v1) and ``retention_time_ms`` (v2-4) are stored as commit
and expire time; offsets do not expire yet.

Versions: 0-10 (v8+ flexible; v10 addresses topics by id). Min 0 (old clients).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agent.connection import Deferred
from agent.handlers.registry import handler
from agent.security.authorizer import RT, Op, allowed
from kafka_protocol.errors import ErrorCode
from kafka_protocol.messages import OffsetCommitRequest, OffsetCommitResponse
from metastore import MetastoreError
from metastore.types import GroupOffset

if TYPE_CHECKING:
    from agent.broker import Broker
    from agent.connection import RequestContext

RespTopic = OffsetCommitResponse.OffsetCommitResponseTopic
RespPartition = RespTopic.OffsetCommitResponsePartition


@handler(OffsetCommitRequest, min_version=0)
async def handle(broker: Broker, ctx: RequestContext, req: OffsetCommitRequest) -> Deferred:
    return Deferred(_commit(broker, ctx, req))


async def _commit(broker: Broker, ctx: RequestContext, req: OffsetCommitRequest) -> OffsetCommitResponse:
    v = ctx.header.api_version
    now = broker.clock.now_ms()
    generation = req.generation_id_or_member_epoch if v >= 1 else -1
    member_id = req.member_id if v >= 1 else ""
    instance = req.group_instance_id if v >= 7 else None
    expire = now + req.retention_time_ms if 2 <= v <= 4 and req.retention_time_ms >= 0 else None
    max_meta = broker.config.offset_metadata_max_bytes
    # errors[t][p] is None for partitions that passed validation (they get the group's answer)
    errors: list[list[int | None]] = []
    offsets: list[GroupOffset] = []
    # READ on the group (every partition refused), then READ on each topic.
    group_denied = not allowed(broker, ctx, Op.READ, RT.GROUP, req.group_id)
    for t in req.topics:
        info = await (broker.topic_by_id(t.topic_id) if v >= 10 else broker.topic(t.name))
        missing = ErrorCode.UNKNOWN_TOPIC_ID if v >= 10 else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        name = info.name if info is not None else (None if v >= 10 else t.name)
        topic_denied = name is not None and not allowed(broker, ctx, Op.READ, RT.TOPIC, name)
        row: list[int | None] = []
        for p in t.partitions:
            if group_denied:
                row.append(ErrorCode.GROUP_AUTHORIZATION_FAILED)
            elif topic_denied:
                row.append(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
            elif info is None:
                row.append(missing)
            elif not 0 <= p.partition_index < info.partitions:
                row.append(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
            elif p.committed_metadata is not None and len(p.committed_metadata.encode()) > max_meta:
                row.append(ErrorCode.OFFSET_METADATA_TOO_LARGE)
            else:
                row.append(None)
                offsets.append(
                    GroupOffset(
                        info.id,
                        p.partition_index,
                        p.committed_offset,
                        p.committed_leader_epoch if v >= 6 else -1,
                        p.committed_metadata or "",  # null is stored as "", as Kafka does
                        p.commit_timestamp if v == 1 and p.commit_timestamp >= 0 else now,
                        expire,
                    )
                )
        errors.append(row)
    consumer_error = await broker.consumer_groups.validate_commit(req.group_id, member_id, generation, v) if req.group_id else None
    if req.group_id == "":
        group_error: int = ErrorCode.INVALID_GROUP_ID
    elif consumer_error is not None:  # a KIP-848 consumer group: member id + member epoch
        group_error = consumer_error
        if consumer_error == ErrorCode.NONE and offsets:
            try:
                await broker.meta.commit_offsets(req.group_id, offsets)
            except MetastoreError:
                group_error = ErrorCode.COORDINATOR_NOT_AVAILABLE
    else:
        group_error = await broker.groups.commit_offsets(req.group_id, generation, member_id, instance, offsets)
    return OffsetCommitResponse(
        throttle_time_ms=0,
        topics=[
            RespTopic(
                name=t.name,
                topic_id=t.topic_id,
                partitions=[
                    RespPartition(partition_index=p.partition_index, error_code=int(group_error if e is None else e))
                    for p, e in zip(t.partitions, row, strict=True)
                ],
            )
            for t, row in zip(req.topics, errors, strict=True)
        ],
    )
