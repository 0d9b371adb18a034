"""Group configs (the GROUP config resource, type 32) set with IncrementalAlterConfigs.

Where it sits: ``agent/handlers/incremental_alter_configs.py`` hands GROUP
resources here. The names Kafka 4.2 defines for share groups are accepted
(``share.record.lock.duration.ms``, ``share.delivery.count.limit``,
``share.partition.max.record.locks``, ``share.auto.offset.reset``,
``share.session.timeout.ms``, ``share.heartbeat.interval.ms``,
``share.isolation.level``), validated (unknown name or bad value:
INVALID_CONFIG) and stored in the metastore per group; SET and DELETE only.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from agent.groups.share.manager import manager_for, validate_config
from kafka_protocol.errors import ErrorCode

if TYPE_CHECKING:
    from agent.broker import Broker

RESOURCE_GROUP = 32
OP_SET, OP_DELETE = 0, 1


async def alter_group_configs(broker: Broker, res: Any, validate_only: bool) -> tuple[int, str | None]:
    group_id = res.resource_name
    if not group_id:
        return ErrorCode.INVALID_GROUP_ID, "empty group id"
    sets: dict[str, str] = {}
    deletes: list[str] = []
    for c in res.configs:
        if c.name in sets or c.name in deletes:
            return ErrorCode.INVALID_REQUEST, f"Duplicate config key: {c.name}"
        if c.config_operation not in (OP_SET, OP_DELETE):
            return ErrorCode.INVALID_CONFIG, f"Config operation {c.config_operation} is not allowed for {c.name}"
        if c.config_operation == OP_SET and c.value is None:
            return ErrorCode.INVALID_REQUEST, f"Null value not supported for config key: {c.name}"
        bad = validate_config(c.name, c.value if c.config_operation == OP_SET else None)
        if bad is not None:
            return ErrorCode.INVALID_CONFIG, bad
        if c.config_operation == OP_SET:
            sets[c.name] = c.value
        else:
            deletes.append(c.name)
    if not validate_only:
        await broker.meta.group_config_alter(group_id, sets, deletes)
        manager_for(broker).forget_configs(group_id)
    return 0, None


async def describe_group_configs(broker: Broker, group_id: str) -> dict[str, tuple[str, bool]]:
    """name -> (value, is_default) for every group config."""
    stored = await broker.meta.group_config_get(group_id)
    from agent.groups.share.manager import DEFAULTS

    return {n: (stored.get(n, d), n not in stored) for n, d in DEFAULTS.items()}
