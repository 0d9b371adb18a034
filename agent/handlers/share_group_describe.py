"""ShareGroupDescribe (key 77, KIP-932).

Behavior: per requested group id, the share group as its coordinator knows it:
state (Empty/Stable), group and assignment epochs, the ``simple`` assignor and
each member (id, epoch, client id and host, rack, subscription, assignment with
topic names). A group never seen is GROUP_ID_NOT_FOUND; an empty id
INVALID_GROUP_ID; a metastore failure COORDINATOR_NOT_AVAILABLE.

Versions: 1.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agent.groups.share.coordinator import Assignment, coordinator_for
from agent.handlers.registry import handler
from agent.security.authorizer import RT, Op, allowed
from kafka_protocol.errors import ErrorCode
from kafka_protocol.messages import ShareGroupDescribeRequest, ShareGroupDescribeResponse
from metastore import MetastoreError

if TYPE_CHECKING:
    from agent.broker import Broker
    from agent.connection import RequestContext

R = ShareGroupDescribeResponse
G = R.DescribedGroup


async def _assignment(broker: Broker, a: Assignment) -> R.Assignment:
    tps = []
    for topic_id, parts in sorted(a.items()):
        info = await broker.topic_by_id(topic_id)
        tps.append(R.TopicPartitions(topic_id=topic_id, topic_name=info.name if info else "", partitions=parts))
    return R.Assignment(topic_partitions=tps)


async def _describe(broker: Broker, group_id: str) -> G:
    if not group_id:
        return G(error_code=ErrorCode.INVALID_GROUP_ID, group_id=group_id)
    try:
        g = await coordinator_for(broker).describe(group_id)
    except MetastoreError as e:
        return G(error_code=ErrorCode.COORDINATOR_NOT_AVAILABLE, error_message=str(e), group_id=group_id)
    if g is None:
        return G(error_code=ErrorCode.GROUP_ID_NOT_FOUND, error_message=f"share group {group_id} not found", group_id=group_id)
    members = [
        G.Member(
            member_id=m.member_id,
            rack_id=m.rack_id,
            member_epoch=m.epoch,
            client_id=m.client_id,
            client_host=m.client_host,
            subscribed_topic_names=list(m.subscribed),
            assignment=await _assignment(broker, m.assignment),
        )
        for m in g.members.values()
    ]
    return G(
        error_code=0,
        group_id=group_id,
        group_state=g.state,
        group_epoch=g.epoch,
        assignment_epoch=g.assignment_epoch,
        assignor_name="simple",
        members=members,
    )


@handler(ShareGroupDescribeRequest, min_version=1, max_version=1)
async def handle(broker: Broker, ctx: RequestContext, req: ShareGroupDescribeRequest) -> R:
    return R(throttle_time_ms=0, groups=[
        await _describe(broker, gid) if allowed(broker, ctx, Op.DESCRIBE, RT.GROUP, gid)
        else G(error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED, error_message="Group authorization failed.", group_id=gid)
        for gid in req.group_ids
    ])  # fmt: skip
