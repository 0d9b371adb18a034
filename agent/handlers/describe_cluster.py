"""DescribeCluster (key 60).

Behavior: ``cluster_id`` from the agent's config, the controller is this node,
the brokers are the live agents (agent.cluster), each as its
``virtual_brokers`` node ids, with their advertised host, port and rack (zone),
never fenced. v1+ ``endpoint_type`` 1
(brokers) is served; anything else (2 = controllers) gets
UNSUPPORTED_ENDPOINT_TYPE, as a Kafka broker answers. With
``include_cluster_authorized_operations`` every cluster operation is reported
allowed (there is no authorizer), otherwise the "not requested" sentinel.

Versions: 0-2 (all flexible).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agent.handlers.registry import handler
from agent.security.authorizer import RT, authorized_operations
from kafka_protocol.errors import ErrorCode
from kafka_protocol.messages import DescribeClusterRequest, DescribeClusterResponse

if TYPE_CHECKING:
    from agent.broker import Broker
    from agent.connection import RequestContext

ENDPOINT_BROKERS = 1
NOT_REQUESTED = -(2**31)
# AclOperation codes valid on the CLUSTER resource: CREATE(5), ALTER(7),
# DESCRIBE(8), CLUSTER_ACTION(9), DESCRIBE_CONFIGS(10), ALTER_CONFIGS(11),
# IDEMPOTENT_WRITE(12).
CLUSTER_OPERATIONS = sum(1 << op for op in (5, 7, 8, 9, 10, 11, 12))


@handler(DescribeClusterRequest)
async def handle(
    broker: Broker, ctx: RequestContext, req: DescribeClusterRequest
) -> DescribeClusterResponse:
    v = ctx.header.api_version
    endpoint_type = req.endpoint_type if v >= 1 else ENDPOINT_BROKERS
    if endpoint_type != ENDPOINT_BROKERS:
        return DescribeClusterResponse(
            throttle_time_ms=0,
            error_code=ErrorCode.UNSUPPORTED_ENDPOINT_TYPE,
            error_message=f"Endpoint type {endpoint_type} is not served here: only brokers (1)",
            endpoint_type=endpoint_type,
            cluster_id=broker.config.cluster_id,
            controller_id=-1,
            brokers=[],
        )
    node = broker.advertised
    return DescribeClusterResponse(
        throttle_time_ms=0,
        error_code=0,
        error_message=None,
        endpoint_type=ENDPOINT_BROKERS,
        cluster_id=broker.config.cluster_id,
        controller_id=node.node_id,
        brokers=[
            DescribeClusterResponse.DescribeClusterBroker(
                broker_id=n, host=ep[0], port=ep[1], rack=p.zone, is_fenced=False
            )
            for n, p in broker.cluster.nodes()  # the live agents' (virtual) node ids
            if (ep := p.endpoint(ctx.listener_name))
        ],
        cluster_authorized_operations=(
            (CLUSTER_OPERATIONS if broker.authorizer is None else authorized_operations(broker, ctx, RT.CLUSTER, "kafka-cluster"))
            if req.include_cluster_authorized_operations
            else NOT_REQUESTED
        ),
    )
