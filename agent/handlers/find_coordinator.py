"""FindCoordinator (key 10).

Behavior: a group (key type 0) or transactional id (key type 1) is coordinated
by its ring owner over all live agents (agent.cluster): the answer is that
agent's node id, host and port; the other agents answer group requests for it
with NOT_COORDINATOR. Other key types get INVALID_REQUEST. v4+ asks for a batch of
``coordinator_keys`` and gets one entry per key.

Versions: 0-6 (v3+ flexible; v4+ batched). Min 0 on purpose: old librdkafka
enables its group consumer only when v0 lies in our range.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agent.handlers.registry import handler
from agent.security.authorizer import RT, Op, allowed
from kafka_protocol.errors import ErrorCode
from kafka_protocol.messages import FindCoordinatorRequest, FindCoordinatorResponse

if TYPE_CHECKING:
    from agent.broker import Broker
    from agent.connection import RequestContext

GROUP_KEY, TRANSACTION_KEY = 0, 1
Coordinator = FindCoordinatorResponse.Coordinator


@handler(FindCoordinatorRequest, min_version=0)
async def handle(
    broker: Broker, ctx: RequestContext, req: FindCoordinatorRequest
) -> FindCoordinatorResponse:
    v = ctx.header.api_version
    cluster = broker.cluster
    listener = ctx.listener_name
    ok = req.key_type in (GROUP_KEY, TRANSACTION_KEY)
    message = None if ok else f"unsupported coordinator key type {req.key_type}"
    # DESCRIBE on the group or transactional id.
    rtype, denied_code = (RT.GROUP, ErrorCode.GROUP_AUTHORIZATION_FAILED) if req.key_type == GROUP_KEY else (
        RT.TRANSACTIONAL_ID, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)  # fmt: skip

    def denied(key: str) -> bool:
        return ok and not allowed(broker, ctx, Op.DESCRIBE, rtype, key)

    if v >= 4:
        return FindCoordinatorResponse(
            throttle_time_ms=0,
            coordinators=[
                Coordinator(key=k, node_id=-1, host="", port=-1, error_code=denied_code, error_message="Authorization failed.")
                if denied(k)
                else Coordinator(key=k, node_id=node.node_id, host=ep[0], port=ep[1], error_code=0, error_message=None)
                if ok and (node := cluster.coordinator(k)) and (ep := node.endpoint(listener))
                else Coordinator(key=k, node_id=-1, host="", port=-1, error_code=ErrorCode.INVALID_REQUEST, error_message=message)
                for k in req.coordinator_keys
            ],
        )
    if not ok:
        return FindCoordinatorResponse(
            throttle_time_ms=0, error_code=ErrorCode.INVALID_REQUEST, error_message=message, node_id=-1, host="", port=-1
        )
    if denied(req.key):
        return FindCoordinatorResponse(
            throttle_time_ms=0, error_code=denied_code, error_message="Authorization failed.", node_id=-1, host="", port=-1
        )
    node = cluster.coordinator(req.key)
    host, port = node.endpoint(listener)
    return FindCoordinatorResponse(
        throttle_time_ms=0, error_code=0, error_message=None, node_id=node.node_id, host=host, port=port
    )
