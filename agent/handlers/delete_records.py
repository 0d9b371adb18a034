"""DeleteRecords (key 21).

Behavior: for each partition the log start offset advances to ``offset``
(-1: the high watermark) and the new low watermark is returned; records below
it are no longer readable and are removed by the compactor later. An offset
beyond the high watermark (or below -1) gets OFFSET_OUT_OF_RANGE, an offset at
or below the current log start offset leaves it unchanged. An unknown topic or
partition gets UNKNOWN_TOPIC_OR_PARTITION. Error results carry low watermark
-1. ``timeout_ms`` is ignored: the change is committed when the response is sent,
and Fetches long-polling the partition, here or on other agents, are woken
(:meth:`Broker.partitions_changed`).

Versions: 0-2 (v2+ flexible).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agent.handlers.registry import handler
from agent.security.authorizer import RT, Op, allowed
from kafka_protocol.errors import ErrorCode
from kafka_protocol.messages import DeleteRecordsRequest, DeleteRecordsResponse

if TYPE_CHECKING:
    from agent.broker import Broker
    from agent.connection import RequestContext

TopicResult = DeleteRecordsResponse.DeleteRecordsTopicResult
PartitionResult = TopicResult.DeleteRecordsPartitionResult


@handler(DeleteRecordsRequest)
async def handle(broker: Broker, ctx: RequestContext, req: DeleteRecordsRequest) -> DeleteRecordsResponse:
    topics: list[TopicResult] = []
    for t in req.topics:
        info = await broker.topic(t.name)
        partitions: list[PartitionResult] = []
        denied = not allowed(broker, ctx, Op.DELETE, RT.TOPIC, t.name)
        for p in t.partitions:
            if denied:
                code, low = int(ErrorCode.TOPIC_AUTHORIZATION_FAILED), -1
            elif info is None or not 0 <= p.partition_index < info.partitions:
                code, low = int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION), -1
            elif p.offset < -1:
                code, low = int(ErrorCode.OFFSET_OUT_OF_RANGE), -1
            else:
                res = await broker.meta.delete_records(info.id, p.partition_index, p.offset)
                code, low = int(res.error), res.low_watermark if not res.error else -1
                if not res.error:  # the log start moved: wake long-polls, renew watermark views
                    broker.partitions_changed([(info.id, p.partition_index)])
            partitions.append(PartitionResult(partition_index=p.partition_index, low_watermark=low, error_code=code))
        topics.append(TopicResult(name=t.name, partitions=partitions))
    return DeleteRecordsResponse(throttle_time_ms=0, topics=topics)
