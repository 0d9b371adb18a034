"""InitProducerId (key 22).

Behavior: an idempotent producer (null ``transactional_id``) gets a fresh
producer id with epoch 0 from the metastore. A v3+ request carrying its current
producer id and epoch (KIP-360, after UNKNOWN_PRODUCER_ID or an epoch
overflow) also gets a fresh id with epoch 0: that is what Kafka's coordinator
does for non-transactional producers, and sequence state is per producer id, so
the new id starts clean. This is all kafka-python 3 and Java clients >= 3.0
(idempotence on by default) need to produce.

A transactional id goes to the transaction coordinator (the ring owner of the
id; other agents answer NOT_COORDINATOR, agent.txn): the epoch is bumped
(fencing older instances; a new producer id at epoch 0 once the epoch is
exhausted); an open transaction is aborted first (with its markers), a
prepared one finished. v3+ with the producer's current id and epoch (KIP-360)
bumps it; with the id and epoch from before the last bump (a retry, or a
producer fenced by a timeout abort) returns the current ones; any other epoch
gets PRODUCER_FENCED (INVALID_PRODUCER_EPOCH before v4).
``transaction_timeout_ms`` must be in (0, ``transaction_max_timeout_ms``]
(INVALID_TRANSACTION_TIMEOUT otherwise). v6 two-phase commit (``enable2_pc``)
gets INVALID_REQUEST; ``keep_prepared_txn`` reports no ongoing transaction.

Metric: ``floe_producer_epoch_bumps_total{kind}`` counts the v3+ requests that
named their producer (KIP-360) and were answered with a new epoch or id
(``idempotent``: always a new id; ``transactional``: the bump, or the current
epoch when a retry names the one before it). A climbing count means producers
keep losing their sequence state (UNKNOWN_PRODUCER_ID, delivery timeouts).

Versions: 0-6 (v2+ flexible).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from agent.connection import Deferred
from agent.handlers.registry import handler
from agent.metrics import METRICS
from agent.security.authorizer import RT, Op, allowed, allowed_any, cluster_allowed
from kafka_protocol.errors import ErrorCode
from kafka_protocol.messages import InitProducerIdRequest, InitProducerIdResponse
from metastore.types import MetastoreError

if TYPE_CHECKING:
    from agent.broker import Broker
    from agent.connection import RequestContext

log = logging.getLogger(__name__)

_BUMPS_IDEMPOTENT = METRICS.producer_epoch_bumps.labels("idempotent")
_BUMPS_TRANSACTIONAL = METRICS.producer_epoch_bumps.labels("transactional")


def _error(code: int) -> InitProducerIdResponse:
    return InitProducerIdResponse(throttle_time_ms=0, error_code=code, producer_id=-1, producer_epoch=-1)


@handler(InitProducerIdRequest)
async def handle(
    broker: Broker, ctx: RequestContext, req: InitProducerIdRequest
) -> InitProducerIdResponse | Deferred:
    v = ctx.header.api_version
    txn_id = req.transactional_id or None  # "" is treated like null, as Kafka does
    if v >= 6 and req.enable2_pc:
        return _error(ErrorCode.INVALID_REQUEST)
    if txn_id is not None and not 0 < req.transaction_timeout_ms <= broker.config.transaction_max_timeout_ms:
        return _error(ErrorCode.INVALID_TRANSACTION_TIMEOUT)
    if v >= 3 and (req.producer_id == -1) != (req.producer_epoch == -1):
        return _error(ErrorCode.INVALID_REQUEST)
    # WRITE on the transactional id; an idempotent producer needs IDEMPOTENT_WRITE on
    # the cluster or WRITE on some topic (Kafka's authorizeByResourceType).
    if txn_id is not None and not allowed(broker, ctx, Op.WRITE, RT.TRANSACTIONAL_ID, txn_id):
        return _error(ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    if (
        txn_id is None
        and broker.authorizer is not None
        and not cluster_allowed(broker, ctx, Op.IDEMPOTENT_WRITE)
        and not allowed_any(broker, ctx, Op.WRITE, RT.TOPIC)
    ):
        return _error(ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
    if txn_id is not None:
        if not broker.cluster.owns_group(txn_id):
            return _error(ErrorCode.NOT_COORDINATOR)
        return Deferred(_transactional(broker, v, req, txn_id))
    if v >= 3 and req.producer_id != -1:
        log.debug(
            "producer %d epoch %d asked for a new epoch; giving it a new producer id",
            req.producer_id,
            req.producer_epoch,
        )
    res = await broker.meta.init_producer_id(None, req.transaction_timeout_ms)
    if res.error:
        return _error(int(res.error))
    if v >= 3 and req.producer_id != -1:
        _BUMPS_IDEMPOTENT.inc()
    return InitProducerIdResponse(
        throttle_time_ms=0,
        error_code=0,
        producer_id=res.producer_id,
        producer_epoch=res.producer_epoch,
        ongoing_txn_producer_id=-1,
        ongoing_txn_producer_epoch=-1,
    )


async def _transactional(
    broker: Broker, v: int, req: InitProducerIdRequest, txn_id: str
) -> InitProducerIdResponse:
    pid, epoch = (req.producer_id, req.producer_epoch) if v >= 3 else (-1, -1)
    try:
        res = await broker.txn.init_producer_id(txn_id, req.transaction_timeout_ms, pid, epoch)
    except MetastoreError as e:
        log.warning("InitProducerId of %r failed: %s", txn_id, e)
        return _error(ErrorCode.COORDINATOR_NOT_AVAILABLE)
    if res.error or res.txn is None:
        code = int(res.error) or ErrorCode.COORDINATOR_NOT_AVAILABLE
        if code == ErrorCode.PRODUCER_FENCED and v < 4:
            code = ErrorCode.INVALID_PRODUCER_EPOCH
        return _error(code)
    if pid != -1 and (res.txn.producer_id, res.txn.producer_epoch) != (pid, epoch):
        _BUMPS_TRANSACTIONAL.inc()
    return InitProducerIdResponse(
        throttle_time_ms=0,
        error_code=0,
        producer_id=res.txn.producer_id,
        producer_epoch=res.txn.producer_epoch,
        ongoing_txn_producer_id=-1,
        ongoing_txn_producer_epoch=-1,
    )
