"""AddOffsetsToTxn (key 25).

Behavior: the transaction coordinator (ring owner of the transactional id, else
NOT_COORDINATOR) records that the transaction commits offsets of ``group_id``;
the offsets themselves come with TxnOffsetCommit to the group's coordinator and
become visible only when the transaction commits. Errors as AddPartitionsToTxn:
INVALID_PRODUCER_ID_MAPPING, PRODUCER_FENCED (INVALID_PRODUCER_EPOCH before
v2), CONCURRENT_TRANSACTIONS while the previous transaction is being ended.

Versions: 0-4 (v3+ flexible).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agent.connection import Deferred
from agent.handlers.add_partitions_to_txn import fenced_code
from agent.handlers.registry import handler
from agent.security.authorizer import RT, Op, allowed
from kafka_protocol.errors import ErrorCode
from kafka_protocol.messages import AddOffsetsToTxnRequest, AddOffsetsToTxnResponse
from metastore.types import MetastoreError

if TYPE_CHECKING:
    from agent.broker import Broker
    from agent.connection import RequestContext


@handler(AddOffsetsToTxnRequest)
async def handle(broker: Broker, ctx: RequestContext, req: AddOffsetsToTxnRequest) -> Deferred:
    return Deferred(_handle(broker, ctx, req))


async def _handle(broker: Broker, ctx: RequestContext, req: AddOffsetsToTxnRequest) -> AddOffsetsToTxnResponse:
    v = ctx.header.api_version
    if not allowed(broker, ctx, Op.WRITE, RT.TRANSACTIONAL_ID, req.transactional_id):
        return AddOffsetsToTxnResponse(throttle_time_ms=0, error_code=ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    if not allowed(broker, ctx, Op.READ, RT.GROUP, req.group_id):
        return AddOffsetsToTxnResponse(throttle_time_ms=0, error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED)
    if not broker.cluster.owns_group(req.transactional_id):
        return AddOffsetsToTxnResponse(throttle_time_ms=0, error_code=ErrorCode.NOT_COORDINATOR)
    if not req.group_id:
        return AddOffsetsToTxnResponse(throttle_time_ms=0, error_code=ErrorCode.INVALID_GROUP_ID)
    try:
        res = await broker.txn.add_group(req.transactional_id, req.producer_id, req.producer_epoch, req.group_id)
    except MetastoreError:
        return AddOffsetsToTxnResponse(throttle_time_ms=0, error_code=ErrorCode.COORDINATOR_NOT_AVAILABLE)
    return AddOffsetsToTxnResponse(throttle_time_ms=0, error_code=fenced_code(int(res.error), v, 2))
