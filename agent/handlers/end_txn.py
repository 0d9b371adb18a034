"""EndTxn (key 26).

Behavior: the transaction coordinator (ring owner of the transactional id, else
NOT_COORDINATOR) prepares the commit or abort in the metastore, writes a COMMIT
or ABORT marker to every partition of the transaction through the produce
pipeline, then completes it (last stable offsets move; aborted ranges and the
transaction's group offsets land) and only then answers, so the answer takes
about one flush interval. A retry of the same decision answers NONE; the other
decision INVALID_TXN_STATE; an old epoch PRODUCER_FENCED (INVALID_PRODUCER_EPOCH
before v2); a transaction whose markers could not be written stays prepared
and answers CONCURRENT_TRANSACTIONS (retriable: the retry finishes it).

v5 (KIP-890 part 2, clients on ``transaction.version`` 2, see ApiVersions):
the coordinator bumps the producer epoch as it prepares (the markers carry the
new epoch, fencing anything older) and answers the producer id and epoch the
producer goes on with (a new producer id at epoch 0 once the epoch is
exhausted). A retry with the epoch from before the bump answers the current
pair. An abort with no transaction open (nothing written since the last one
ended) still bumps the epoch, as Kafka's does.

Versions: 0-5 (v3+ flexible).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agent.connection import Deferred
from agent.handlers.add_partitions_to_txn import fenced_code
from agent.handlers.registry import handler
from agent.security.authorizer import RT, Op, allowed
from kafka_protocol.errors import ErrorCode
from kafka_protocol.messages import EndTxnRequest, EndTxnResponse
from metastore.types import MetastoreError

if TYPE_CHECKING:
    from agent.broker import Broker
    from agent.connection import RequestContext


@handler(EndTxnRequest, max_version=5)
async def handle(broker: Broker, ctx: RequestContext, req: EndTxnRequest) -> Deferred:
    return Deferred(_handle(broker, ctx, req))


async def _handle(broker: Broker, ctx: RequestContext, req: EndTxnRequest) -> EndTxnResponse:
    v = ctx.header.api_version
    if not allowed(broker, ctx, Op.WRITE, RT.TRANSACTIONAL_ID, req.transactional_id):
        return EndTxnResponse(throttle_time_ms=0, error_code=ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    if not broker.cluster.owns_group(req.transactional_id):
        return EndTxnResponse(throttle_time_ms=0, error_code=ErrorCode.NOT_COORDINATOR)
    try:
        res = await broker.txn.end_txn(
            req.transactional_id, req.producer_id, req.producer_epoch, req.committed, bump_epoch=v >= 5
        )
    except MetastoreError:
        return EndTxnResponse(throttle_time_ms=0, error_code=ErrorCode.COORDINATOR_NOT_AVAILABLE)
    code = fenced_code(int(res.error), v, 2)
    if v >= 5 and code == ErrorCode.NONE and res.txn is not None:
        return EndTxnResponse(
            throttle_time_ms=0, error_code=0, producer_id=res.txn.producer_id, producer_epoch=res.txn.producer_epoch
        )
    return EndTxnResponse(throttle_time_ms=0, error_code=code)
