"""OffsetForLeaderEpoch (key 23).

Behavior: Floe has no leader elections, so every partition has one leader
epoch, 0 (Metadata reports it, fetched batches carry it). A request for epoch 0
is answered with the end offset of that epoch: the high watermark. Clients use
this after a metadata change to detect log truncation; the answer never lies
below an offset they have consumed, so they never truncate. A larger epoch is
unknown (leader_epoch -1, end_offset -1, like Kafka's undefined epoch); a
``current_leader_epoch`` above 0 gets UNKNOWN_LEADER_EPOCH. Unknown topics or
partitions get UNKNOWN_TOPIC_OR_PARTITION.

Versions: 0-4 (v4 flexible).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from agent.handlers.registry import handler
from agent.security.authorizer import RT, Op, allowed
from kafka_protocol.errors import ErrorCode
from kafka_protocol.messages import OffsetForLeaderEpochRequest, OffsetForLeaderEpochResponse
from metastore.types import LATEST_TIMESTAMP, MetastoreError
from metastore.types import ErrorCode as MetaError

if TYPE_CHECKING:
    from agent.broker import Broker
    from agent.connection import RequestContext

log = logging.getLogger(__name__)

TopicResult = OffsetForLeaderEpochResponse.OffsetForLeaderTopicResult
EpochEndOffset = OffsetForLeaderEpochResponse.OffsetForLeaderTopicResult.EpochEndOffset

LEADER_EPOCH = 0


@handler(OffsetForLeaderEpochRequest)
async def handle(
    broker: Broker, ctx: RequestContext, req: OffsetForLeaderEpochRequest
) -> OffsetForLeaderEpochResponse:
    topics: list[TopicResult] = []
    for t in req.topics:
        info = await broker.topic(t.topic)
        tr = TopicResult(topic=t.topic, partitions=[])
        topics.append(tr)
        denied = not allowed(broker, ctx, Op.DESCRIBE, RT.TOPIC, t.topic)
        for p in t.partitions:
            r = EpochEndOffset(partition=p.partition, leader_epoch=-1, end_offset=-1)
            tr.partitions.append(r)
            if denied:
                r.error_code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
                continue
            if info is None or not 0 <= p.partition < info.partitions:
                r.error_code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                continue
            if p.current_leader_epoch > LEADER_EPOCH:
                r.error_code = ErrorCode.UNKNOWN_LEADER_EPOCH
                continue
            if p.leader_epoch != LEADER_EPOCH:
                continue  # undefined epoch: (-1, -1)
            try:
                res = await broker.meta.list_offsets(info.id, p.partition, LATEST_TIMESTAMP)
            except MetastoreError as e:
                log.warning("offset_for_leader_epoch %s/%d failed: %s", t.topic, p.partition, e)
                r.error_code = ErrorCode.KAFKA_STORAGE_ERROR
                continue
            if res.error != MetaError.NONE:
                r.error_code = int(res.error)
                continue
            r.leader_epoch = LEADER_EPOCH
            r.end_offset = res.offset
    return OffsetForLeaderEpochResponse(throttle_time_ms=0, topics=topics)
