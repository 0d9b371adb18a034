"""AlterConfigs (key 33), the legacy non-incremental form.

Behavior: for a topic resource the given configs *replace* the topic's whole
override set (keys not listed revert to their defaults; entries with a null
value are dropped), as Kafka's AlterConfigs does. Unknown keys and bad values
get INVALID_CONFIG, a key given twice INVALID_REQUEST, an illegal topic name
INVALID_TOPIC_EXCEPTION, an unknown topic UNKNOWN_TOPIC_OR_PARTITION;
``validate_only`` checks without changing anything. Broker configs are the
agent's options and read-only here: broker resources get INVALID_REQUEST with
a message saying so; other resource types INVALID_REQUEST. Successful changes
invalidate the broker's topic cache (``max.message.bytes`` is read from it).

Versions: 0-2 (v2+ flexible).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Protocol, TypeVar

from agent.handlers.describe_configs import RESOURCE_BROKER, RESOURCE_TOPIC, config_denied
from agent.handlers.registry import handler
from agent.security.authorizer import Op
from kafka_protocol.errors import ErrorCode
from kafka_protocol.messages import AlterConfigsRequest, AlterConfigsResponse
from metastore.topic_config import validate_topic_name

if TYPE_CHECKING:
    from agent.broker import Broker
    from agent.connection import RequestContext

Result = AlterConfigsResponse.AlterConfigsResourceResponse

BROKER_READ_ONLY = (
    "Broker configs cannot be altered: they are the Floe agent's options "
    "(set them with FLOE_* variables or floe agent flags)"
)


class _Resource(Protocol):
    @property
    def resource_type(self) -> int: ...
    @property
    def resource_name(self) -> str: ...


R = TypeVar("R", bound=_Resource)
T = TypeVar("T")


def unsupported_resource(resource_type: int) -> tuple[int, str]:
    if resource_type == RESOURCE_BROKER:
        return ErrorCode.INVALID_REQUEST, BROKER_READ_ONLY
    return ErrorCode.INVALID_REQUEST, f"Altering resource type {resource_type} is not supported"


async def _alter(
    broker: Broker, res: AlterConfigsRequest.AlterConfigsResource, validate_only: bool
) -> tuple[int, str | None]:
    if res.resource_type != RESOURCE_TOPIC:
        return unsupported_resource(res.resource_type)
    bad = validate_topic_name(res.resource_name)
    if bad is not None:
        return ErrorCode.INVALID_TOPIC_EXCEPTION, bad
    updates: dict[str, str | None] = {}
    for c in res.configs:
        if c.name in updates:
            return ErrorCode.INVALID_REQUEST, f"Duplicate config key: {c.name}"
        if c.value is None:  # Kafka 4.1: INVALID_REQUEST (tests/conformance)
            return ErrorCode.INVALID_REQUEST, f"Null value not supported for config key: {c.name}"
        updates[c.name] = c.value
    result = await broker.meta.alter_topic_config(
        res.resource_name, updates, incremental=False, validate_only=validate_only
    )
    return int(result.error), result.message if result.error else None


async def alter_each(
    broker: Broker,
    ctx: RequestContext,
    resources: Sequence[R],
    validate_only: bool,
    alter: Callable[[Broker, R, bool], Awaitable[tuple[int, str | None]]],
    result: Callable[..., T],
) -> list[T]:
    """One ``result`` per resource from ``alter``; if any resource changed, the
    broker's topic cache is invalidated (also when a later one raises)."""
    responses: list[T] = []
    changed = False
    try:
        for res in resources:
            code: int = config_denied(broker, ctx, Op.ALTER_CONFIGS, res.resource_type, res.resource_name)
            message: str | None = "Authorization failed." if code else None
            if not code:
                code, message = await alter(broker, res, validate_only)
            changed |= code == 0 and not validate_only
            responses.append(
                result(
                    error_code=code,
                    error_message=message,
                    resource_type=res.resource_type,
                    resource_name=res.resource_name,
                )
            )
    finally:
        if changed:
            broker.invalidate_topics()
    return responses


@handler(AlterConfigsRequest)
async def handle(broker: Broker, ctx: RequestContext, req: AlterConfigsRequest) -> AlterConfigsResponse:
    responses = await alter_each(broker, ctx, req.resources, req.validate_only, _alter, Result)
    return AlterConfigsResponse(throttle_time_ms=0, responses=responses)
