"""AddPartitionsToTxn (key 24).

Behavior: the transaction coordinator (the ring owner of the transactional id;
others answer NOT_COORDINATOR) adds the partitions to the producer's
transaction, which becomes Ongoing; each partition's high watermark at that
moment bounds where the transaction's data can start (the last stable offset
is held back from its first batch on). A wrong producer id gets
INVALID_PRODUCER_ID_MAPPING, an old epoch PRODUCER_FENCED (INVALID_PRODUCER_EPOCH
before v2), a transaction being ended CONCURRENT_TRANSACTIONS (retriable). An
unknown topic or partition fails the whole request: it gets
UNKNOWN_TOPIC_OR_PARTITION, the others OPERATION_NOT_ATTEMPTED, as Kafka.

v4+ (KIP-890 part 1, broker to broker) batch several transactions;
``verify_only`` answers whether the partitions are already in the transaction
(INVALID_TXN_STATE per partition when not) without adding them. Floe's own
produce path verifies through the metastore instead of this request.

Versions: 0-5 (v3+ flexible).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from agent.connection import Deferred
from agent.handlers.registry import handler
from agent.security.authorizer import RT, Op, allowed, cluster_allowed
from kafka_protocol.errors import ErrorCode
from kafka_protocol.messages import AddPartitionsToTxnRequest, AddPartitionsToTxnResponse
from metastore.types import TXN_ONGOING, MetastoreError

if TYPE_CHECKING:
    from agent.broker import Broker
    from agent.connection import RequestContext

Resp = AddPartitionsToTxnResponse
TopicResult = Resp.AddPartitionsToTxnTopicResult
PartitionResult = Resp.AddPartitionsToTxnPartitionResult


def fenced_code(code: int, version: int, first_version: int) -> int:
    """PRODUCER_FENCED is INVALID_PRODUCER_EPOCH for versions before ``first_version``."""
    if code == ErrorCode.PRODUCER_FENCED and version < first_version:
        return ErrorCode.INVALID_PRODUCER_EPOCH
    return code


def _results(topics: Any, code_of: Any) -> list[Any]:
    return [
        TopicResult(
            name=t.name,
            results_by_partition=[
                PartitionResult(partition_index=p, partition_error_code=code_of(t.name, p)) for p in t.partitions
            ],
        )
        for t in topics
    ]


async def _one(
    broker: Broker, ctx: RequestContext, tid: str, pid: int, epoch: int, topics: Any, verify_only: bool
) -> list[Any]:
    v = ctx.header.api_version
    # WRITE on the transactional id, then on each topic (the others: OPERATION_NOT_ATTEMPTED).
    if not allowed(broker, ctx, Op.WRITE, RT.TRANSACTIONAL_ID, tid):
        return _results(topics, lambda _t, _p: ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    denied = {t.name for t in topics if not allowed(broker, ctx, Op.WRITE, RT.TOPIC, t.name)}
    if denied:
        return _results(
            topics,
            lambda t, _p: ErrorCode.TOPIC_AUTHORIZATION_FAILED if t in denied else ErrorCode.OPERATION_NOT_ATTEMPTED,
        )
    if not broker.cluster.owns_group(tid):
        return _results(topics, lambda _t, _p: ErrorCode.NOT_COORDINATOR)
    refs: dict[tuple[str, int], Any] = {}
    unknown: set[tuple[str, int]] = set()
    for t in topics:
        info = await broker.topic(t.name)
        for p in t.partitions:
            if info is None or not 0 <= p < info.partitions:
                unknown.add((t.name, p))
            else:
                refs[(t.name, p)] = (info.id, p)
    if unknown:
        return _results(
            topics,
            lambda t, p: ErrorCode.UNKNOWN_TOPIC_OR_PARTITION if (t, p) in unknown else ErrorCode.OPERATION_NOT_ATTEMPTED,
        )
    try:
        if verify_only:
            rec = await broker.meta.txn_get(tid)
            if rec is None or rec.producer_id != pid:
                return _results(topics, lambda _t, _p: ErrorCode.INVALID_PRODUCER_ID_MAPPING)
            if rec.producer_epoch != epoch:
                return _results(topics, lambda _t, _p: ErrorCode.PRODUCER_FENCED)
            have = {(x.topic_id, x.partition) for x in rec.partitions} if rec.state == TXN_ONGOING else set()
            return _results(
                topics, lambda t, p: ErrorCode.NONE if refs[(t, p)] in have else ErrorCode.INVALID_TXN_STATE
            )
        res = await broker.txn.add_partitions(tid, pid, epoch, list(refs.values()))
    except MetastoreError:
        return _results(topics, lambda _t, _p: ErrorCode.COORDINATOR_NOT_AVAILABLE)
    code = fenced_code(int(res.error), v, 2)
    return _results(topics, lambda _t, _p: code)


@handler(AddPartitionsToTxnRequest)
async def handle(broker: Broker, ctx: RequestContext, req: AddPartitionsToTxnRequest) -> Deferred:
    return Deferred(_handle(broker, ctx, req))


async def _handle(broker: Broker, ctx: RequestContext, req: AddPartitionsToTxnRequest) -> AddPartitionsToTxnResponse:
    v = ctx.header.api_version
    if v <= 3:
        results = await _one(
            broker, ctx, req.v3_and_below_transactional_id, req.v3_and_below_producer_id,
            req.v3_and_below_producer_epoch, req.v3_and_below_topics, False,
        )  # fmt: skip
        return Resp(throttle_time_ms=0, results_by_topic_v3_and_below=results)
    if not cluster_allowed(broker, ctx, Op.CLUSTER_ACTION):  # v4+ is broker-to-broker
        return Resp(throttle_time_ms=0, error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED, results_by_transaction=[])
    out = []
    for txn in req.transactions:
        results = await _one(
            broker, ctx, txn.transactional_id, txn.producer_id, txn.producer_epoch, txn.topics, txn.verify_only
        )
        out.append(Resp.AddPartitionsToTxnResult(transactional_id=txn.transactional_id, topic_results=results))
    return Resp(throttle_time_ms=0, error_code=0, results_by_transaction=out)
