"""TxnOffsetCommit (key 28).

Behavior: sent to the group's coordinator (ring owner of the group id, else
NOT_COORDINATOR). The offsets are stored pending in the metastore, invisible to
OffsetFetch until the transaction commits (they become the group's offsets in
the same metastore transaction that completes it) and dropped if it aborts.
The producer must have added the group with AddOffsetsToTxn in an ongoing
transaction (INVALID_TXN_STATE otherwise) with its current id and epoch
(INVALID_PRODUCER_ID_MAPPING, PRODUCER_FENCED; INVALID_PRODUCER_EPOCH before
v3). Unknown topics or partitions get UNKNOWN_TOPIC_OR_PARTITION per partition.
The v3+ generation, member id and group instance id are checked against the
group like Kafka's classic group does (ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID,
FENCED_INSTANCE_ID; ``GroupCoordinator.validate_txn_commit``), so a consumer
that lost its partitions in a rebalance cannot commit their offsets in a
transaction (KIP-447). For a KIP-848 consumer group the generation is the
member epoch (UNKNOWN_MEMBER_ID, FENCED_MEMBER_EPOCH, STALE_MEMBER_EPOCH); a
commit naming no member at all is accepted, as Kafka's ConsumerGroup does.

v5 comes from clients on transaction version 2 (KIP-890 part 2), which send no
AddOffsetsToTxn: the group joins the producer's transaction here first.

Versions: 0-5 (v3+ flexible).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agent.connection import Deferred
from agent.handlers.add_partitions_to_txn import fenced_code
from agent.handlers.registry import handler
from agent.security.authorizer import RT, Op, allowed
from kafka_protocol.errors import ErrorCode
from kafka_protocol.messages import TxnOffsetCommitRequest, TxnOffsetCommitResponse
from metastore.types import GroupOffset, MetastoreError

if TYPE_CHECKING:
    from agent.broker import Broker
    from agent.connection import RequestContext

RespTopic = TxnOffsetCommitResponse.TxnOffsetCommitResponseTopic
RespPartition = RespTopic.TxnOffsetCommitResponsePartition


async def _check_committer(broker: Broker, group_id: str, generation: int, member: str, instance: str | None) -> int:
    consumer = await broker.consumer_groups.group(group_id)
    if consumer is None:
        return await broker.groups.validate_txn_commit(group_id, generation, member, instance)
    if generation < 0 and not member and instance is None:
        return ErrorCode.NONE  # TxnOffsetCommit v0-2 carry no member
    code = await broker.consumer_groups.validate_commit(group_id, member, generation, 9)
    return ErrorCode.NONE if code is None else code


@handler(TxnOffsetCommitRequest)
async def handle(broker: Broker, ctx: RequestContext, req: TxnOffsetCommitRequest) -> Deferred:
    return Deferred(_handle(broker, ctx, req))


async def _handle(broker: Broker, ctx: RequestContext, req: TxnOffsetCommitRequest) -> TxnOffsetCommitResponse:
    v = ctx.header.api_version
    codes: dict[tuple[str, int], int] = {}
    offsets: list[GroupOffset] = []
    top: int = ErrorCode.NONE
    # WRITE on the transactional id, READ on the group, READ on each topic.
    if not allowed(broker, ctx, Op.WRITE, RT.TRANSACTIONAL_ID, req.transactional_id):
        top = ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    elif not allowed(broker, ctx, Op.READ, RT.GROUP, req.group_id):
        top = ErrorCode.GROUP_AUTHORIZATION_FAILED
    elif not broker.cluster.owns_group(req.group_id):
        top = ErrorCode.NOT_COORDINATOR
    for t in req.topics:
        info = await broker.topic(t.name)
        topic_denied = top == ErrorCode.NONE and not allowed(broker, ctx, Op.READ, RT.TOPIC, t.name)
        for p in t.partitions:
            if topic_denied:
                codes[(t.name, p.partition_index)] = ErrorCode.TOPIC_AUTHORIZATION_FAILED
                continue
            if info is None or not 0 <= p.partition_index < info.partitions:
                codes[(t.name, p.partition_index)] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                continue
            offsets.append(
                GroupOffset(info.id, p.partition_index, p.committed_offset, p.committed_leader_epoch, p.committed_metadata)
            )
    if top == ErrorCode.NONE:
        instance = req.group_instance_id if v >= 3 else None
        generation, member = (req.generation_id, req.member_id) if v >= 3 else (-1, "")
        top = await _check_committer(broker, req.group_id, generation, member, instance)
    if top == ErrorCode.NONE and offsets:
        try:
            if v >= 5:
                added = await broker.meta.txn_add_group(req.transactional_id, req.producer_id, req.producer_epoch, req.group_id)
                if added.error:
                    top = int(added.error)
        except MetastoreError:
            top = ErrorCode.COORDINATOR_NOT_AVAILABLE
    if top == ErrorCode.NONE and offsets:
        try:
            res = await broker.meta.txn_commit_offsets(
                req.transactional_id, req.group_id, req.producer_id, req.producer_epoch, offsets
            )
            top = fenced_code(int(res.error), v, 3)
        except MetastoreError:
            top = ErrorCode.COORDINATOR_NOT_AVAILABLE
    return TxnOffsetCommitResponse(
        throttle_time_ms=0,
        topics=[
            RespTopic(
                name=t.name,
                partitions=[
                    RespPartition(partition_index=p.partition_index, error_code=codes.get((t.name, p.partition_index), top))
                    for p in t.partitions
                ],
            )
            for t in req.topics
        ],
    )
