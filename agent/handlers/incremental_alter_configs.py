"""IncrementalAlterConfigs (key 44).

Behavior: for a topic resource each entry is applied to the topic's current
overrides: SET (0) sets a key, DELETE (1) reverts it to its default, APPEND (2)
and SUBTRACT (3) add or remove items of a list config (``cleanup.policy``;
starting from the current value, override or default) and get INVALID_CONFIG
for any other key, as Kafka 4.1 answers (checked by tests/conformance). A key given twice or an unknown operation
gets INVALID_REQUEST, unknown keys and bad values INVALID_CONFIG, a SET with a
null value INVALID_REQUEST, an illegal name INVALID_TOPIC_EXCEPTION, an unknown
topic UNKNOWN_TOPIC_OR_PARTITION. ``validate_only`` checks without changing
anything. GROUP resources (32) set share-group configs
(``agent.groups.share.configs``; SET and DELETE). Broker resources get INVALID_REQUEST (broker configs are the agent's
options); other resource types INVALID_REQUEST. Successful changes invalidate
the broker's topic cache.

Versions: 0-1 (v1+ flexible).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agent.groups.share.configs import RESOURCE_GROUP, alter_group_configs
from agent.handlers.alter_configs import alter_each, unsupported_resource
from agent.handlers.describe_configs import RESOURCE_TOPIC
from agent.handlers.registry import handler
from kafka_protocol.errors import ErrorCode
from kafka_protocol.messages import (
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse,
)
from metastore.topic_config import TOPIC_CONFIG_KEYS, validate_topic_name

if TYPE_CHECKING:
    from agent.broker import Broker
    from agent.connection import RequestContext

OP_SET = 0
OP_DELETE = 1
OP_APPEND = 2
OP_SUBTRACT = 3

Result = IncrementalAlterConfigsResponse.AlterConfigsResourceResponse
Resource = IncrementalAlterConfigsRequest.AlterConfigsResource


def _items(value: str) -> list[str]:
    return [item.strip() for item in value.split(",") if item.strip()]


async def _alter(broker: Broker, res: Resource, validate_only: bool) -> tuple[int, str | None]:
    if res.resource_type == RESOURCE_GROUP:  # share-group configs (KIP-932)
        return await alter_group_configs(broker, res, validate_only)
    if res.resource_type != RESOURCE_TOPIC:
        return unsupported_resource(res.resource_type)
    name = res.resource_name
    bad = validate_topic_name(name)
    if bad is not None:
        return ErrorCode.INVALID_TOPIC_EXCEPTION, bad
    seen: set[str] = set()
    for c in res.configs:
        if c.name in seen:
            return ErrorCode.INVALID_REQUEST, f"Duplicate config key: {c.name}"
        seen.add(c.name)
        if c.config_operation not in (OP_SET, OP_DELETE, OP_APPEND, OP_SUBTRACT):
            return ErrorCode.INVALID_REQUEST, f"Unknown config operation {c.config_operation} for {c.name}"
        spec = TOPIC_CONFIG_KEYS.get(c.name)
        if spec is None:
            return ErrorCode.INVALID_CONFIG, f"Unknown topic config name: {c.name}"
        if c.config_operation in (OP_APPEND, OP_SUBTRACT) and spec.kind != "list":
            op = "append" if c.config_operation == OP_APPEND else "subtract"
            return ErrorCode.INVALID_CONFIG, f"Config value {op} is not allowed for config key: {c.name}"
        if c.config_operation != OP_DELETE and c.value is None:
            return ErrorCode.INVALID_REQUEST, f"Null value not supported for config key: {c.name}"

    current: dict[str, str] = {}
    if any(c.config_operation in (OP_APPEND, OP_SUBTRACT) for c in res.configs):
        described = await broker.meta.describe_topic_config(name)
        if described.error:
            return int(described.error), described.message or "This server does not host this topic."
        current = {e.name: e.value for e in described.entries}

    updates: dict[str, str | None] = {}
    for c in res.configs:
        if c.config_operation == OP_SET:
            updates[c.name] = c.value
        elif c.config_operation == OP_DELETE:
            updates[c.name] = None
        else:
            items = _items(current.get(c.name, ""))
            given = _items(c.value or "")
            if c.config_operation == OP_APPEND:
                items += [item for item in given if item not in items]
            else:
                items = [item for item in items if item not in given]
            updates[c.name] = ",".join(items)
    result = await broker.meta.alter_topic_config(
        name, updates, incremental=True, validate_only=validate_only
    )
    return int(result.error), result.message if result.error else None


@handler(IncrementalAlterConfigsRequest)
async def handle(
    broker: Broker, ctx: RequestContext, req: IncrementalAlterConfigsRequest
) -> IncrementalAlterConfigsResponse:
    responses = await alter_each(broker, ctx, req.resources, req.validate_only, _alter, Result)
    return IncrementalAlterConfigsResponse(throttle_time_ms=0, responses=responses)
