"""DescribeTransactions (key 65).

Behavior: per transactional id, its state as the metastore holds it (Kafka's
state names: Empty, Ongoing, PrepareCommit, PrepareAbort, CompleteCommit,
CompleteAbort), timeout, start time, producer id and epoch, and the partitions
in the open transaction by topic. Ids this agent does not coordinate get
NOT_COORDINATOR; unknown ids TRANSACTIONAL_ID_NOT_FOUND.

Versions: 0 (flexible).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agent.handlers.registry import handler
from agent.security.authorizer import RT, Op, allowed
from kafka_protocol.errors import ErrorCode
from kafka_protocol.messages import DescribeTransactionsRequest, DescribeTransactionsResponse
from metastore.types import MetastoreError

if TYPE_CHECKING:
    from agent.broker import Broker
    from agent.connection import RequestContext

State = DescribeTransactionsResponse.TransactionState


@handler(DescribeTransactionsRequest)
async def handle(
    broker: Broker, ctx: RequestContext, req: DescribeTransactionsRequest
) -> DescribeTransactionsResponse:
    out = []
    for tid in req.transactional_ids:
        if not allowed(broker, ctx, Op.DESCRIBE, RT.TRANSACTIONAL_ID, tid):
            out.append(State(error_code=ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, transactional_id=tid, producer_id=-1, producer_epoch=-1))
            continue
        if not broker.cluster.owns_group(tid):
            out.append(State(error_code=ErrorCode.NOT_COORDINATOR, transactional_id=tid, producer_id=-1, producer_epoch=-1))
            continue
        try:
            rec = await broker.meta.txn_get(tid)
        except MetastoreError:
            out.append(State(error_code=ErrorCode.COORDINATOR_NOT_AVAILABLE, transactional_id=tid, producer_id=-1, producer_epoch=-1))
            continue
        if rec is None:
            out.append(State(error_code=ErrorCode.TRANSACTIONAL_ID_NOT_FOUND, transactional_id=tid, producer_id=-1, producer_epoch=-1))
            continue
        topics: dict[str, list[int]] = {}
        for p in rec.partitions:
            info = await broker.topic_by_id(p.topic_id)
            if info is not None and not allowed(broker, ctx, Op.DESCRIBE, RT.TOPIC, info.name):
                continue  # Kafka leaves out the partitions of topics the caller may not describe
            topics.setdefault(info.name if info else str(p.topic_id), []).append(p.partition)
        out.append(
            State(
                error_code=0,
                transactional_id=tid,
                transaction_state=rec.state,
                transaction_timeout_ms=rec.timeout_ms,
                transaction_start_time_ms=rec.started_at_ms,
                producer_id=rec.producer_id,
                producer_epoch=rec.producer_epoch,
                topics=[State.TopicData(topic=name, partitions=parts) for name, parts in sorted(topics.items())],
            )
        )
    return DescribeTransactionsResponse(throttle_time_ms=0, transaction_states=out)
