"""DescribeGroups (key 15).

Behavior: state, protocol type, and members (id, instance id, client id and
host). Only a Stable group shows its chosen protocol and each member's metadata
and assignment bytes; in other states they are empty, as in Kafka. An unknown
group is reported as state ``Dead`` with no error before v6, and
GROUP_ID_NOT_FOUND from v6 (KIP-1043). ``include_authorized_operations``
(v3+) reports READ, DELETE and DESCRIBE (no ACLs here).

Versions: 0-6 (v5+ flexible).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agent.handlers.registry import handler
from agent.security.authorizer import RT, Op, allowed, authorized_operations
from kafka_protocol.errors import ErrorCode
from kafka_protocol.messages import DescribeGroupsRequest, DescribeGroupsResponse
from metastore import MetastoreError

if TYPE_CHECKING:
    from agent.broker import Broker
    from agent.connection import RequestContext

Described = DescribeGroupsResponse.DescribedGroup
DescribedMember = Described.DescribedGroupMember
NOT_REQUESTED = -(2**31)
GROUP_OPERATIONS = (1 << 3) | (1 << 6) | (1 << 8)  # READ, DELETE, DESCRIBE


@handler(DescribeGroupsRequest)
async def handle(broker: Broker, ctx: RequestContext, req: DescribeGroupsRequest) -> DescribeGroupsResponse:
    v = ctx.header.api_version
    ops = GROUP_OPERATIONS if v >= 3 and req.include_authorized_operations else NOT_REQUESTED
    out: list[Described] = []
    requested_ops = ops
    for group_id in req.groups:
        ops = requested_ops
        if not group_id:
            out.append(Described(error_code=ErrorCode.INVALID_GROUP_ID, group_id=group_id, authorized_operations=ops))
            continue
        if not allowed(broker, ctx, Op.DESCRIBE, RT.GROUP, group_id):
            out.append(Described(error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED, group_id=group_id, authorized_operations=ops))
            continue
        if ops != NOT_REQUESTED and broker.authorizer is not None:
            ops = authorized_operations(broker, ctx, RT.GROUP, group_id)
        try:
            if await broker.consumer_groups.group(group_id) is not None:
                # A KIP-848 group is not a classic group (ConsumerGroupDescribe describes it).
                out.append(
                    Described(
                        error_code=ErrorCode.GROUP_ID_NOT_FOUND,
                        error_message=f"Group {group_id} is not a classic group." if v >= 6 else None,
                        group_id=group_id,
                        group_state="Dead",
                        authorized_operations=ops,
                    )
                )
                continue
            d = await broker.groups.describe(group_id)
        except MetastoreError:
            out.append(Described(error_code=ErrorCode.COORDINATOR_NOT_AVAILABLE, group_id=group_id))
            continue
        if d is None:
            if v >= 6:
                out.append(
                    Described(
                        error_code=ErrorCode.GROUP_ID_NOT_FOUND,
                        error_message=f"Group {group_id} not found.",
                        group_id=group_id,
                        group_state="Dead",
                        authorized_operations=ops,
                    )
                )
            else:
                out.append(Described(error_code=0, group_id=group_id, group_state="Dead", authorized_operations=ops))
            continue
        out.append(
            Described(
                error_code=0,
                group_id=d.group_id,
                group_state=d.state,
                protocol_type=d.protocol_type,
                protocol_data=d.protocol,
                members=[
                    DescribedMember(
                        member_id=m.member_id,
                        group_instance_id=m.group_instance_id,
                        client_id=m.client_id,
                        client_host=m.client_host,
                        member_metadata=m.metadata,
                        member_assignment=m.assignment,
                    )
                    for m in d.members
                ],
                authorized_operations=ops,
            )
        )
    return DescribeGroupsResponse(throttle_time_ms=0, groups=out)
