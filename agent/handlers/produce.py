"""Produce (key 0).

Behavior: every partition's record set must be exactly one RecordBatch v2
(magic 2, as Kafka requires for v3+) with a valid CRC32C and no larger than the
topic's ``max.message.bytes``; otherwise that partition alone gets an error code
(CORRUPT_MESSAGE, UNSUPPORTED_FOR_MESSAGE_FORMAT, INVALID_RECORD,
MESSAGE_TOO_LARGE, UNKNOWN_TOPIC_OR_PARTITION). Valid batches go to the produce
pipeline unchanged (record batches stay bytes); the response is sent after the
segment holding them is durable and committed. ``acks=0`` sends no response.
Transactional batches are verified first (KIP-890 part 1, through the
metastore rather than an AddPartitionsToTxn round trip): the producer must be
the current epoch of its transactional id (else INVALID_PRODUCER_EPOCH; an
unknown producer id INVALID_PRODUCER_ID_MAPPING) with the partition added to
its ongoing transaction (else INVALID_TXN_STATE). A zombie whose verified batch
lands after a fencing marker is refused by the sequencer (the marker carries
the bumped epoch). Produce v12+ (clients on transaction version 2, KIP-890 part
2) sends no AddPartitionsToTxn: a partition not yet in the producer's ongoing
(or next) transaction is added to it here, before the append (the transaction
starts with it); a coordinator busy ending the previous one answers
NOT_ENOUGH_REPLICAS (retriable), as Kafka does.

A compacted topic (``cleanup.policy`` containing ``compact``) refuses a batch with a
record without a key: INVALID_RECORD, as Kafka. A request whose batches are not
committed within its ``timeout_ms`` is answered REQUEST_TIMED_OUT for them (the
commit may still land; an idempotent producer's retry gets its original offsets).
Validation: :mod:`agent.produce.validate`. Under overload (the memory budget full
past ``produce_admission_wait_ms``, or a store slower than ``produce_fail_fast_ms``)
a request is refused at once, never appended: NOT_ENOUGH_REPLICAS (retriable, same
epoch and sequence) with ``throttle_time_ms`` set (:mod:`agent.produce.admission`).
A request whose segment's upload stalls past ``produce_abort_ms`` before its
commit starts is answered NOT_ENOUGH_REPLICAS too, and never committed
(:mod:`agent.produce.abort`).

A topic with ``message.timestamp.type=LogAppendTime`` gets its batches stamped
with the append time (timestamp-type attribute, max timestamp, CRC rewritten)
before they are stored, and the response carries it in ``log_append_time_ms``,
as Kafka does; readers see timestamp type LogAppendTime.

Versions: 0-13 advertised (librdkafka before 2.11 needs 0 in range to enable
compression); v0-2 carry magic 0/1 message sets and get
UNSUPPORTED_FOR_MESSAGE_FORMAT per partition. v13 addresses topics by id.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from agent.connection import Deferred
from agent.handlers.registry import handler
from agent.metrics import METRICS
from agent.produce import ProduceItem
from agent.produce.ack import expire_after
from agent.produce.admission import OVERLOADED, REJECTED
from agent.produce.validate import check_batch, fast_meta, keyless
from agent.security.authorizer import RT, Op, allowed
from kafka_protocol.errors import ErrorCode
from kafka_protocol.messages import ProduceRequest, ProduceResponse
from kafka_protocol.records import ATTR_TIMESTAMP_TYPE, stamp_log_append_time
from metastore.topic_config import compacted
from metastore.types import MetastoreError
from objectstore.segment import BatchMeta

if TYPE_CHECKING:
    from agent.broker import Broker
    from agent.connection import RequestContext
    from metastore import CommitResult

PartitionResponse = ProduceResponse.TopicProduceResponse.PartitionProduceResponse
TopicResponse = ProduceResponse.TopicProduceResponse

# Produce v12+ comes from clients on transaction version 2 (KIP-890 part 2): they
# send no AddPartitionsToTxn, the partition joins the transaction on its first batch.
IMPLICIT_ADD_VERSION = 12
REJECTED_SEQUENCE = REJECTED.labels("sequence")
# What an implicit add that cannot happen now answers: retriable for the producer,
# as Kafka answers it (NOT_ENOUGH_REPLICAS for a coordinator that is busy or away).
_ADD_RETRIABLE = {ErrorCode.CONCURRENT_TRANSACTIONS, ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.NOT_COORDINATOR}
# Every partition response shares these two (never changed here; the codec only reads
# them): built positionally, a response costs a third of the keyword dataclass call,
# which also builds a list and a LeaderIdAndEpoch per partition.
_NO_RECORD_ERRORS: list[PartitionResponse.BatchIndexAndErrorMessage] = []
_NO_LEADER = PartitionResponse.LeaderIdAndEpoch()


async def _verify(
    broker: Broker, items: list[ProduceItem], pending: list[PartitionResponse], txn_id: str | None = None
) -> tuple[list[ProduceItem], list[PartitionResponse], int]:
    """Drop the transactional batches their producer may not write now (the
    partition response gets the code); keep the rest in order. With ``txn_id``
    (v12+), partitions not in the producer's transaction are added to it first."""
    by_producer: dict[tuple[int, int], list[int]] = {}
    for i, it in enumerate(items):
        if it.is_transactional:
            by_producer.setdefault((it.meta.producer_id, it.meta.producer_epoch), []).append(i)
    refused: dict[int, int] = {}
    for (pid, epoch), idx in by_producer.items():
        parts = [(items[i].topic_id, items[i].partition) for i in idx]
        try:
            codes = [int(c) for c in await broker.meta.txn_verify(pid, epoch, parts)]
            missing = [k for k, c in zip(parts, codes, strict=True) if c == ErrorCode.INVALID_TXN_STATE]
            if txn_id and missing:
                added = await broker.meta.txn_add_partitions(txn_id, pid, epoch, missing)
                code = int(added.error)
                if code == ErrorCode.PRODUCER_FENCED:
                    code = ErrorCode.INVALID_PRODUCER_EPOCH
                elif code in _ADD_RETRIABLE:
                    code = ErrorCode.NOT_ENOUGH_REPLICAS
                codes = [code if c == ErrorCode.INVALID_TXN_STATE else c for c in codes]
        except MetastoreError:
            codes = [ErrorCode.COORDINATOR_NOT_AVAILABLE] * len(idx)
        refused.update({i: c for i, c in zip(idx, codes, strict=True) if c})
    if not refused:
        return items, pending, sum(len(it.batch) for it in items)
    for i, code in refused.items():
        pending[i].error_code = code
    keep = [i for i in range(len(items)) if i not in refused]
    kept = [items[i] for i in keep]
    return kept, [pending[i] for i in keep], sum(len(it.batch) for it in kept)


def _refuse_all(req: ProduceRequest, code: int) -> ProduceResponse:
    out = [
        TopicResponse(
            name=t.name, topic_id=t.topic_id,
            partition_responses=[PartitionResponse(index=p.index, error_code=code, base_offset=-1) for p in t.partition_data],
        )
        for t in req.topic_data
    ]
    return ProduceResponse(responses=out)


def _refuse(
    items: list[ProduceItem], pending: list[PartitionResponse], which: Iterable[int]
) -> tuple[list[ProduceItem], list[PartitionResponse], int]:
    """Answer the batches at ``which`` NOT_ENOUGH_REPLICAS (overloaded: not appended,
    retriable with the same sequence); the rest, in order, and their bytes."""
    drop = set(which)
    for i in drop:
        pending[i].error_code = OVERLOADED
        pending[i].log_append_time_ms = -1
    keep = [i for i in range(len(items)) if i not in drop]
    kept = [items[i] for i in keep]
    return kept, [pending[i] for i in keep], sum(len(it.batch) for it in kept)


def _overloaded(req: ProduceRequest, responses: list[TopicResponse], throttle_ms: int) -> ProduceResponse | None:
    return None if req.acks == 0 else ProduceResponse(responses=responses, throttle_time_ms=throttle_ms)


@handler(ProduceRequest)
async def handle(broker: Broker, ctx: RequestContext, req: ProduceRequest) -> Any:
    v = ctx.header.api_version
    if req.acks not in (0, 1, -1):
        return _refuse_all(req, ErrorCode.INVALID_REQUIRED_ACKS)

    # A transactional producer needs WRITE on its transactional id (every partition refused).
    if req.transactional_id is not None and not allowed(broker, ctx, Op.WRITE, RT.TRANSACTIONAL_ID, req.transactional_id):
        return None if req.acks == 0 else _refuse_all(req, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)

    # slots[i] = (topic response entry, partition response) to fill in; items for the pipeline.
    responses: list[TopicResponse] = []
    pending: list[PartitionResponse] = []
    items: list[ProduceItem] = []
    nbytes = 0
    transactional = False
    # At 1,000 partitions librdkafka sends ~1 record per batch: everything in the
    # partition loop is paid per KiB, so it is hoisted out of it and bound locally.
    add_item, add_pending = items.append, pending.append
    for t in req.topic_data:
        # The topic cache answers almost every request: no coroutine for it.
        info = broker.cached_topic(t.name, t.topic_id if v >= 13 else None)
        if info is False:
            info = await (broker.topic_by_id(t.topic_id) if v >= 13 else broker.topic(t.name))
        assert info is not True
        prs: list[PartitionResponse] = []
        responses.append(TopicResponse(name=t.name, topic_id=t.topic_id, partition_responses=prs))
        add_response = prs.append
        max_bytes = broker.max_message_bytes(info) if info else 0
        # WRITE on the topic: a name is checked whether or not it exists, an id once known.
        name = info.name if info is not None else (None if v >= 13 else t.name)
        denied = name is not None and not allowed(broker, ctx, Op.WRITE, RT.TOPIC, name)
        if denied or info is None:
            refused = (
                ErrorCode.TOPIC_AUTHORIZATION_FAILED if denied
                else ErrorCode.UNKNOWN_TOPIC_ID if v >= 13 else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            )
            for p in t.partition_data:
                add_response(PartitionResponse(p.index, refused, -1, -1, -1, _NO_RECORD_ERRORS, None, _NO_LEADER))
            continue
        topic_id, nparts = info.id, info.partitions
        keyed = compacted(info.config)
        append_time = info.config.get("message.timestamp.type") == "LogAppendTime"
        for p in t.partition_data:
            index = p.index
            pr = PartitionResponse(index, 0, -1, -1, -1, _NO_RECORD_ERRORS, None, _NO_LEADER)
            add_response(pr)
            if not 0 <= index < nparts:
                pr.error_code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                continue
            buf = p.records
            meta = fast_meta(buf, max_bytes)
            if meta is None:
                code, view, msg = check_batch(buf, max_bytes)
                if view is None:
                    pr.error_code = code
                    pr.error_message = msg
                    continue
                buf = view.buffer
                meta = BatchMeta(
                    view.records_count, view.max_timestamp, view.base_timestamp, view.last_offset_delta,
                    view.producer_id, view.producer_epoch, view.base_sequence, view.attributes,
                )
            assert buf is not None
            if keyed and (bad := keyless(buf)) is not None:
                pr.error_code, why = bad
                pr.error_message = f"{why} in topic partition {info.name}-{index}."
                continue
            if append_time:
                # The broker stamps the batch with its append time (Kafka does it the same way).
                stamped = bytearray(buf)
                now = broker.clock.now_ms()
                stamp_log_append_time(stamped, now)
                buf = memoryview(stamped)
                meta = meta._replace(max_timestamp=now, attributes=meta.attributes | ATTR_TIMESTAMP_TYPE)
                pr.log_append_time_ms = now
            txn = meta.attributes & 0x10 != 0
            transactional |= txn
            add_item(ProduceItem(topic_id, index, buf, meta, txn))
            add_pending(pr)
            nbytes += len(buf)

    if transactional:
        implicit = req.transactional_id if v >= IMPLICIT_ADD_VERSION else None
        items, pending, nbytes = await _verify(broker, items, pending, implicit)
    if not items:
        return None if req.acks == 0 else ProduceResponse(responses=responses)

    # Admission happens here, before the next request of this connection is read, so
    # batches from one connection enter the log in order; under overload it refuses at
    # once (retriable, never appended) instead of queueing: agent.produce.admission.
    admission = broker.pipeline.admission
    cfg = broker.config
    throttle = 0
    if fenced := admission.fenced(items):
        REJECTED_SEQUENCE.inc()
        throttle = cfg.produce_reject_throttle_ms
        items, pending, nbytes = _refuse(items, pending, fenced)
        if not items:
            return _overloaded(req, responses, throttle)
    reason = "slow_store" if admission.slow_store(cfg.produce_fail_fast_ms) else None
    if reason is None and not await admission.admit(nbytes, cfg.produce_admission_wait_ms / 1000):
        reason = "budget"
    if reason is not None:
        REJECTED.labels(reason).inc()
        admission.fence(items)
        _refuse(items, pending, range(len(items)))
        return _overloaded(req, responses, cfg.produce_reject_throttle_ms)
    if fenced := admission.fenced(items):
        # A stalled segment was aborted while this request waited for room
        # (agent.produce.abort): batches behind an aborted sequence must not pass it.
        REJECTED_SEQUENCE.inc()
        throttle = cfg.produce_reject_throttle_ms
        held = nbytes
        items, pending, nbytes = _refuse(items, pending, fenced)
        admission.budget.release_nowait(held - nbytes)
        if not items:
            return _overloaded(req, responses, throttle)
    METRICS.produced_bytes.inc(nbytes)
    pipeline = broker.pipeline
    # withdrawable: if the connection closes before the commit starts, these batches
    # are left out of it (agent.produce.withdraw); acks=0 senders do not wait.
    fut = pipeline.append(
        items, nbytes, getattr(ctx.conn, "produce_flow", None), withdrawable=req.acks != 0
    )

    def finish(results: list[CommitResult]) -> ProduceResponse | None:
        for pr, res in zip(pending, results, strict=True):
            # A pending response's error code is still 0: only a failure sets it.
            if err := res.error:
                pr.error_code = int(err)
                pr.log_append_time_ms = -1
            pr.base_offset = res.base_offset
            pr.log_start_offset = res.log_start_offset
        if req.acks == 0:
            return None
        return ProduceResponse(responses=responses, throttle_time_ms=throttle)

    if req.acks != 0 and req.timeout_ms > 0:
        # As Kafka: not committed within the request's timeout -> REQUEST_TIMED_OUT, so
        # the client retries with the same producer epoch and sequences (the sequencer
        # answers a retry of a batch that did land with its original offsets).
        fut = expire_after(fut, req.timeout_ms / 1000.0, len(items))
    # No coroutine per request: the writer calls finish() once the commit resolved.
    return Deferred(fut, finish)
