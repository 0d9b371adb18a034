"""DescribeProducers (key 61).

Behavior: per partition, the producers with idempotent state there (the
metastore keeps their last batches): producer id, epoch, last sequence, last
append time and, for a producer inside an open transaction, the offset of its
first batch in it (-1 otherwise). Unknown topics or partitions get
UNKNOWN_TOPIC_OR_PARTITION. Any agent answers for any partition (no leaders).

Versions: 0 (flexible).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agent.handlers.registry import handler
from agent.security.authorizer import RT, Op, allowed
from kafka_protocol.errors import ErrorCode
from kafka_protocol.messages import DescribeProducersRequest, DescribeProducersResponse
from metastore.types import MetastoreError

if TYPE_CHECKING:
    from agent.broker import Broker
    from agent.connection import RequestContext

TopicResp = DescribeProducersResponse.TopicResponse
PartResp = TopicResp.PartitionResponse


@handler(DescribeProducersRequest)
async def handle(broker: Broker, ctx: RequestContext, req: DescribeProducersRequest) -> DescribeProducersResponse:
    topics = []
    for t in req.topics:
        info = await broker.topic(t.name)
        parts = []
        denied = not allowed(broker, ctx, Op.READ, RT.TOPIC, t.name)
        for p in t.partition_indexes:
            if denied:
                parts.append(PartResp(partition_index=p, error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED))
                continue
            if info is None or not 0 <= p < info.partitions:
                parts.append(PartResp(partition_index=p, error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION))
                continue
            try:
                states = await broker.meta.describe_producers(info.id, p)
            except MetastoreError as e:
                parts.append(PartResp(partition_index=p, error_code=ErrorCode.KAFKA_STORAGE_ERROR, error_message=str(e)))
                continue
            parts.append(
                PartResp(
                    partition_index=p,
                    error_code=0,
                    active_producers=[
                        PartResp.ProducerState(
                            producer_id=s.producer_id,
                            producer_epoch=s.producer_epoch,
                            last_sequence=s.last_sequence,
                            last_timestamp=s.last_timestamp_ms,
                            coordinator_epoch=0,
                            current_txn_start_offset=s.current_txn_start_offset,
                        )
                        for s in states
                    ],
                )
            )
        topics.append(TopicResp(name=t.name, partitions=parts))
    return DescribeProducersResponse(throttle_time_ms=0, topics=topics)
