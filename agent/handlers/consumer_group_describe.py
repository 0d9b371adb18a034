"""ConsumerGroupDescribe (key 69): KIP-848 consumer groups as the admin sees them.

Behavior: per group id, the state (Empty, Assigning, Reconciling, Stable), group
and assignment epochs, the assignor and each member's epoch, subscription,
current and target assignment (topic ids and names). A group this agent does not
own answers NOT_COORDINATOR; an unknown id or a classic group GROUP_ID_NOT_FOUND;
an empty id INVALID_GROUP_ID.

Versions: 0-1 (flexible); v1 adds MemberType (1: a consumer-protocol member).
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING

from agent.groups.consumer.assignors import Assignment
from agent.handlers.registry import handler
from agent.security.authorizer import RT, Op, allowed
from kafka_protocol.errors import ErrorCode
from kafka_protocol.messages import ConsumerGroupDescribeRequest, ConsumerGroupDescribeResponse
from metastore import MetastoreError

if TYPE_CHECKING:
    from agent.broker import Broker
    from agent.connection import RequestContext

Resp = ConsumerGroupDescribeResponse
Group = Resp.DescribedGroup
MAX_GROUPS = 10_000


async def _assignment(broker: Broker, a: Assignment) -> Resp.Assignment:
    out = []
    for tid, ps in sorted(a.items(), key=lambda kv: str(kv[0])):
        info = await broker.topic_by_id(tid) if isinstance(tid, uuid.UUID) else None
        out.append(Resp.TopicPartitions(topic_id=tid, topic_name=info.name if info else "", partitions=sorted(ps)))
    return Resp.Assignment(topic_partitions=out)


async def _describe(broker: Broker, group_id: str) -> Group:
    if not group_id:
        return Group(error_code=ErrorCode.INVALID_GROUP_ID, group_id=group_id)
    cg = broker.consumer_groups
    if not cg.owns(group_id):
        cg.release(group_id)
        return Group(error_code=ErrorCode.NOT_COORDINATOR, group_id=group_id)
    try:
        g = await cg.group(group_id)
    except MetastoreError:
        return Group(error_code=ErrorCode.COORDINATOR_NOT_AVAILABLE, group_id=group_id)
    if g is None:
        return Group(
            error_code=ErrorCode.GROUP_ID_NOT_FOUND,
            error_message=f"Group {group_id} not found.",
            group_id=group_id,
        )
    members = []
    for m in sorted(g.members.values(), key=lambda m: m.member_id):
        members.append(
            Group.Member(
                member_id=m.member_id,
                instance_id=m.instance_id,
                rack_id=m.rack_id,
                member_epoch=m.member_epoch,
                client_id=m.client_id,
                client_host=m.client_host,
                subscribed_topic_names=list(m.subscribed_topic_names),
                subscribed_topic_regex=m.subscribed_topic_regex,
                assignment=await _assignment(broker, m.assigned),
                target_assignment=await _assignment(broker, m.target),
                member_type=0 if m.classic else 1,  # KIP-1099: 0 classic, 1 consumer
            )
        )
    return Group(
        error_code=0,
        group_id=group_id,
        group_state=g.state().value,
        group_epoch=g.group_epoch,
        assignment_epoch=g.assignment_epoch,
        assignor_name=g.assignor or "uniform",
        members=members,
    )


@handler(ConsumerGroupDescribeRequest)
async def handle(broker: Broker, ctx: RequestContext, req: ConsumerGroupDescribeRequest) -> Resp:
    if len(req.group_ids) > MAX_GROUPS:
        return Resp(groups=[Group(error_code=ErrorCode.INVALID_REQUEST, group_id=g) for g in req.group_ids[:1]])
    return Resp(throttle_time_ms=0, groups=[
        await _describe(broker, gid) if allowed(broker, ctx, Op.DESCRIBE, RT.GROUP, gid)
        else Group(error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED, error_message="Group authorization failed.", group_id=gid)
        for gid in req.group_ids
    ])  # fmt: skip
