"""CreatePartitions (key 37).

Behavior: grows a topic to ``count`` partitions (new partitions start empty at
offset 0), or only checks that it could (``validate_only``). A count that is
not an increase gets INVALID_PARTITIONS, an unknown topic
UNKNOWN_TOPIC_OR_PARTITION, manual ``assignments`` INVALID_REQUEST (there are
no replicas to place), a topic named twice INVALID_REQUEST. Each result has an
``error_message``. Successful changes invalidate the broker's topic cache.

Versions: 0-3 (v2+ flexible).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agent.handlers.create_topics import each_topic_once
from agent.handlers.registry import handler
from agent.security.authorizer import RT, Op, allowed
from kafka_protocol.errors import ErrorCode
from kafka_protocol.messages import CreatePartitionsRequest, CreatePartitionsResponse

if TYPE_CHECKING:
    from agent.broker import Broker
    from agent.connection import RequestContext

Result = CreatePartitionsResponse.CreatePartitionsTopicResult


async def _grow(
    broker: Broker, topic: CreatePartitionsRequest.CreatePartitionsTopic, validate_only: bool
) -> Result:
    if topic.assignments:
        return Result(
            name=topic.name,
            error_code=ErrorCode.INVALID_REQUEST,
            error_message="Manual partition assignments are not supported: Floe has no replicas to place",
        )
    res = await broker.meta.add_partitions(topic.name, topic.count, validate_only=validate_only)
    if res.error:
        return Result(name=topic.name, error_code=int(res.error), error_message=res.message)
    return Result(name=topic.name, error_code=0, error_message=None)


@handler(CreatePartitionsRequest)
async def handle(
    broker: Broker, ctx: RequestContext, req: CreatePartitionsRequest
) -> CreatePartitionsResponse:
    async def grow(b: Broker, topic: CreatePartitionsRequest.CreatePartitionsTopic, validate_only: bool) -> Result:
        if not allowed(b, ctx, Op.ALTER, RT.TOPIC, topic.name):  # ALTER on the topic
            return Result(name=topic.name, error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED, error_message="Authorization failed.")
        return await _grow(b, topic, validate_only)

    results = await each_topic_once(
        broker,
        req.topics,
        req.validate_only,
        grow,
        lambda name: Result(name=name, error_code=ErrorCode.INVALID_REQUEST, error_message="Duplicate topic in request."),
    )
    return CreatePartitionsResponse(throttle_time_ms=0, results=results)
