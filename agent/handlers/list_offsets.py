"""ListOffsets (key 2).

Behavior: per partition, the timestamp picks the offset:

- ``-2`` earliest: the log start offset; ``-4`` (earliest local, KIP-1005) is the
  same here, all data being equally "local";
- ``-1`` latest: the high watermark; under read_committed (``isolation_level``
  1, v2+) the last stable offset (metastore ``stable_offsets``); a timestamp or
  max-timestamp answer at or past the last stable offset is no answer (offset
  -1) under read_committed, as in Kafka;
- ``-3`` max timestamp (v7+): the first record carrying the largest timestamp
  of the partition's readable records, and that timestamp (Kafka's
  ``offsetOfMaxTimestamp``; after DeleteRecords Kafka may still name a deleted
  record of a segment not yet removed, Floe never does: allow-listed);
- ``-5`` earliest pending upload (KIP-1023): nothing is ever pending upload
  here, so offset -1;
- any other value: the first record (at or after the log start) whose
  timestamp is at or after it, with that record's own timestamp, or offset -1
  and timestamp -1 when there is none, as Kafka answers. The metastore indexes
  batches (max timestamp per batch), so it names the first batch that reaches
  the timestamp; that batch is then read like a fetch (segment bytes or
  Parquet rows rebuilt, decompressed) and its records scanned
  (:func:`objectstore.timestamps.first_record_at`). A consumer seeking by time
  starts exactly there, so the answer must be the record, not the batch.
  Topics with ``message.timestamp.type=LogAppendTime`` stamp a whole batch with
  its append time: the batch's first readable offset is the answer.

A partition named twice in one request (v1+, in one topic entry or two) gets
one answer, INVALID_REQUEST, as Kafka answers; entries naming one topic are
answered under one topic entry (Kafka keys its answer by partition). Unknown topics or partitions get
UNKNOWN_TOPIC_OR_PARTITION per partition; a
metastore failure KAFKA_STORAGE_ERROR. ``leader_epoch`` is 0 when an offset is
returned (there are no elections), -1 otherwise. v0 answers in
``old_style_offsets`` (a list with the one offset, or empty).

Width: a topic asked for at many partitions at once (a consumer starting on
10,000 partitions) has its earliest/latest answers read in one metastore
query (``partition_offsets``) instead of one query per partition.

Versions: 0-11 (v6+ flexible). librdkafka before 2.11 needs a low version in
range; Kafka clients send v1+ in practice.
"""

from __future__ import annotations

import logging
from collections import Counter
from typing import TYPE_CHECKING, Any

from agent.fetch.read import BatchReadError
from agent.handlers.registry import handler
from agent.security.authorizer import RT, Op, allowed
from kafka_protocol.errors import ErrorCode
from kafka_protocol.exceptions import DecodeError
from kafka_protocol.messages import ListOffsetsRequest, ListOffsetsResponse
from metastore.types import ErrorCode as MetaError
from metastore.types import ListOffsetsResult, MetastoreError, PartitionOffsets, TopicInfo
from objectstore.timestamps import first_record_at, max_record

if TYPE_CHECKING:
    from agent.broker import Broker
    from agent.connection import RequestContext
    from metastore import TopicInfo

log = logging.getLogger(__name__)

TopicResponse = ListOffsetsResponse.ListOffsetsTopicResponse
PartitionResponse = ListOffsetsResponse.ListOffsetsTopicResponse.ListOffsetsPartitionResponse

EARLIEST = -2
LATEST = -1
MAX_TIMESTAMP = -3
EARLIEST_LOCAL = -4
EARLIEST_PENDING_UPLOAD = -5
# Earliest/latest asked for at this many partitions of a topic: one query.
BULK_MIN = 8


async def _bulk(broker: Broker, info: TopicInfo | None, t: ListOffsetsRequest.ListOffsetsTopic) -> dict[int, PartitionOffsets]:
    if info is None or sum(p.timestamp in (EARLIEST, LATEST, EARLIEST_LOCAL) for p in t.partitions) < BULK_MIN:
        return {}
    try:
        return {o.partition: o for o in await broker.meta.partition_offsets(info.id)}
    except MetastoreError as e:
        log.warning("partition_offsets %s failed: %s", t.name, e)
        return {}  # each partition then asks on its own


async def _last_stable(broker: Broker, topic_id: Any, partition: int, res: ListOffsetsResult) -> ListOffsetsResult:
    (view,) = await broker.meta.stable_offsets([(topic_id, partition, res.offset)])
    if view.error:
        return ListOffsetsResult(view.error)
    return ListOffsetsResult(MetaError.NONE, min(view.last_stable_offset, res.offset), res.timestamp)


@handler(ListOffsetsRequest)
async def handle(broker: Broker, ctx: RequestContext, req: ListOffsetsRequest) -> ListOffsetsResponse:
    v = ctx.header.api_version
    topics: dict[str, TopicResponse] = {}
    seen = Counter((t.name, p.partition_index) for t in req.topics for p in t.partitions)
    answered: set[tuple[str, int]] = set()
    for t in req.topics:
        info = await broker.topic(t.name)
        bulk = await _bulk(broker, info, t)
        tr = topics.setdefault(t.name, TopicResponse(name=t.name, partitions=[]))
        denied = not allowed(broker, ctx, Op.DESCRIBE, RT.TOPIC, t.name)
        for p in t.partitions:
            key = (t.name, p.partition_index)
            if v >= 1 and key in answered:
                continue  # one answer per partition, as Kafka's (keyed by partition)
            answered.add(key)
            pr = PartitionResponse(partition_index=p.partition_index, timestamp=-1, offset=-1, leader_epoch=-1)
            tr.partitions.append(pr)
            if v >= 1 and seen[key] > 1:
                pr.error_code = ErrorCode.INVALID_REQUEST
                continue
            if denied:
                pr.error_code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
                continue
            if info is None or not 0 <= p.partition_index < info.partitions:
                pr.error_code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                continue
            ts = p.timestamp
            if ts == EARLIEST_PENDING_UPLOAD:
                continue
            if ts == EARLIEST_LOCAL:
                ts = EARLIEST
            known = bulk.get(p.partition_index) if ts in (EARLIEST, LATEST) else None
            try:
                if known is not None:
                    res = ListOffsetsResult(MetaError.NONE, known.log_start_offset if ts == EARLIEST else known.high_watermark)
                else:
                    res = await broker.meta.list_offsets(info.id, p.partition_index, ts)
                if res.error == MetaError.NONE and ts == LATEST and v >= 2 and req.isolation_level == 1:
                    res = await _last_stable(broker, info.id, p.partition_index, res)
                if res.error == MetaError.NONE and res.offset >= 0 and (ts >= 0 or ts == MAX_TIMESTAMP):
                    offset, found_ts = await _record_level(broker, info, p.partition_index, ts, res.offset, res.timestamp)
                    if offset >= 0 and v >= 2 and req.isolation_level == 1:
                        (view,) = await broker.meta.stable_offsets([(info.id, p.partition_index, offset)])
                        if view.error == MetaError.NONE and offset >= view.last_stable_offset:
                            offset, found_ts = -1, -1  # not readable yet under read_committed (Kafka)
                else:
                    offset, found_ts = res.offset, res.timestamp
            except (MetastoreError, BatchReadError, DecodeError) as e:
                log.warning("list_offsets %s/%d failed: %s", t.name, p.partition_index, e)
                pr.error_code = ErrorCode.KAFKA_STORAGE_ERROR
                continue
            if res.error != MetaError.NONE:
                pr.error_code = int(res.error)
                continue
            pr.offset = offset
            pr.timestamp = found_ts if offset >= 0 else -1
            pr.leader_epoch = 0 if offset >= 0 else -1
            if v == 0:
                pr.old_style_offsets = [offset] if offset >= 0 else []
    return ListOffsetsResponse(throttle_time_ms=0, topics=list(topics.values()))


# Batches read per lookup before giving up on the record scan (a batch found by its
# max timestamp holds the answer unless DeleteRecords cut into it).
_SCAN_BATCHES = 8


async def _record_level(
    broker: Broker, info: TopicInfo, partition: int, ts: int, offset: int, batch_ts: int
) -> tuple[int, int]:
    """The record the metastore's batch answer stands for: ``offset`` is the first
    readable offset of the batch found (``ts`` >= 0) or an offset in the batch with
    the largest timestamp ``batch_ts`` (``MAX_TIMESTAMP``)."""
    reader = broker.fetch_reader
    log_append = info.config.get("message.timestamp.type") == "LogAppendTime"
    exact = ts == MAX_TIMESTAMP
    if exact and not log_append:
        return await _max_record(broker, info, partition, offset, batch_ts)
    target = batch_ts if exact else ts
    at = offset
    for _ in range(_SCAN_BATCHES):
        found = await broker.meta.find_batches(info.id, partition, at, 1, max_batches=1)
        if found.error != MetaError.NONE or not found.batches:
            break
        b = found.batches[0]
        lso = found.log_start_offset
        if log_append:  # every record of the batch carries its append time
            return max(b.base_offset, lso), batch_ts
        hit = first_record_at(await reader.read([b]), target, min_offset=lso, exact=exact)
        if hit is not None:
            return hit
        at = b.last_offset + 1
    return offset, batch_ts  # records unreadable as expected: the batch-level answer


async def _max_record(broker: Broker, info: TopicInfo, partition: int, offset: int, batch_ts: int) -> tuple[int, int]:
    """MAX_TIMESTAMP: the first record carrying ``batch_ts`` in the batch holding
    ``offset`` (the metastore's answer); when DeleteRecords removed that record
    (the batch straddles the log start offset), the largest timestamp among the
    batch's readable records and the batches after it."""
    reader = broker.fetch_reader
    found = await broker.meta.find_batches(info.id, partition, offset, 1, max_batches=1)
    if found.error != MetaError.NONE or not found.batches:
        return offset, batch_ts
    b, lso = found.batches[0], found.log_start_offset
    data = await reader.read([b])
    hit = first_record_at(data, batch_ts, min_offset=lso, exact=True)
    if hit is not None:
        return hit
    best = max_record(data, min_offset=lso)
    rest = await broker.meta.list_offsets(info.id, partition, MAX_TIMESTAMP, from_offset=b.last_offset + 1)
    if rest.error == MetaError.NONE and rest.offset >= 0 and (best is None or rest.timestamp > best[1]):
        return await _max_record(broker, info, partition, rest.offset, rest.timestamp)
    return best if best is not None else (-1, -1)
