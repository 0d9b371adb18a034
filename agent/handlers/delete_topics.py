"""DeleteTopics (key 20).

Behavior: each topic is deleted from the metastore at once (its partitions,
batch index, producer state and committed offsets go with it; the objects are
garbage-collected later). v0-5 name topics in ``topic_names``; v6 names each
topic by name or by id (both set: INVALID_REQUEST). An unknown name gets
UNKNOWN_TOPIC_OR_PARTITION, an unknown id UNKNOWN_TOPIC_ID; v5+ results carry an
``error_message``, v6 results the topic id (and the name when deleted by id).
Successful deletes invalidate the broker's topic cache. ``timeout_ms`` is
ignored: deletion is complete when the response is sent.

Versions: 0-6 (v4+ flexible).
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING

from agent.handlers.registry import handler
from agent.security.authorizer import RT, Op, allowed
from kafka_protocol.errors import ErrorCode
from kafka_protocol.messages import DeleteTopicsRequest, DeleteTopicsResponse
from kafka_protocol.messages._runtime import ZERO_UUID
from metastore.topic_config import validate_topic_name

if TYPE_CHECKING:
    from agent.broker import Broker
    from agent.connection import RequestContext


Result = DeleteTopicsResponse.DeletableTopicResult


async def _delete(broker: Broker, ctx: RequestContext, name: str | None, topic_id: uuid.UUID) -> Result:
    if name and topic_id != ZERO_UUID:
        return Result(
            name=name,
            topic_id=topic_id,
            error_code=ErrorCode.INVALID_REQUEST,
            error_message="Give a topic name or a topic id, not both",
        )
    if not name:
        if topic_id == ZERO_UUID:
            return Result(
                name=name,
                topic_id=topic_id,
                error_code=ErrorCode.INVALID_REQUEST,
                error_message="Neither topic name nor id were specified",
            )
        info = await broker.topic_by_id(topic_id)
        if info is not None and not allowed(broker, ctx, Op.DELETE, RT.TOPIC, info.name):
            code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
            if not allowed(broker, ctx, Op.DESCRIBE, RT.TOPIC, info.name):  # do not reveal the name
                return Result(name=None, topic_id=topic_id, error_code=code, error_message="Authorization failed.")
            return Result(name=info.name, topic_id=topic_id, error_code=code, error_message="Authorization failed.")
        res = await broker.meta.delete_topic(topic_id)
        if res.error or res.topic is None:
            return Result(
                name=None,
                topic_id=topic_id,
                error_code=ErrorCode.UNKNOWN_TOPIC_ID,
                error_message="This server does not host this topic ID.",
            )
        return Result(name=res.topic.name, topic_id=topic_id, error_code=0, error_message=None)
    if not allowed(broker, ctx, Op.DELETE, RT.TOPIC, name):
        return Result(name=name, error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED, error_message="Authorization failed.")
    bad = validate_topic_name(name)
    if bad is not None:
        # Kafka answers an illegal name like an unknown one.
        return Result(name=name, error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, error_message=bad)
    res = await broker.meta.delete_topic(name)
    if res.error or res.topic is None:
        return Result(
            name=name,
            error_code=int(res.error) or ErrorCode.UNKNOWN_SERVER_ERROR,
            error_message=res.message,
        )
    return Result(name=name, topic_id=res.topic.id, error_code=0, error_message=None)


@handler(DeleteTopicsRequest)
async def handle(broker: Broker, ctx: RequestContext, req: DeleteTopicsRequest) -> DeleteTopicsResponse:
    v = ctx.header.api_version
    wanted: list[tuple[str | None, uuid.UUID]]
    if v >= 6:
        wanted = [(t.name, t.topic_id) for t in req.topics]
    else:
        wanted = [(name, ZERO_UUID) for name in req.topic_names]
    results: list[Result] = []
    deleted = False
    try:
        for name, topic_id in wanted:
            result = await _delete(broker, ctx, name, topic_id)
            deleted |= result.error_code == 0
            results.append(result)
    finally:
        if deleted:
            broker.invalidate_topics()
    return DeleteTopicsResponse(throttle_time_ms=0, responses=results)
