"""CreateTopics (key 19).

Behavior: each topic is created in the metastore with its configs, or checked
only (``validate_only``, v1+). ``num_partitions`` -1 means the agent's
``default_partitions``. There are no replicas (object storage is the durable
copy), so ``replication_factor`` -1 or any value >= 1 is accepted and ignored,
as WarpStream does; 0 or < -1 gets INVALID_REPLICATION_FACTOR. Manual replica
``assignments`` get INVALID_REQUEST. A name given twice in one request gets
INVALID_REQUEST (one result for that name), as Kafka does. Other per-topic
errors come from the metastore: INVALID_TOPIC_EXCEPTION, INVALID_PARTITIONS,
INVALID_CONFIG (unknown key, bad value, null value), TOPIC_ALREADY_EXISTS,
each with an ``error_message`` (v1+).

v5+ results carry the partition count, the replication factor (the requested
one, or 1 for -1) and every effective config with its source; v7+ the topic id
(for ``validate_only`` a fresh id that is not kept, as Kafka). Successful creates invalidate the broker's topic
cache.

Versions: 0-7 (v5+ flexible).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Protocol, TypeVar

from agent.handlers.describe_configs import SOURCE_DEFAULT_CONFIG, SOURCE_DYNAMIC_TOPIC_CONFIG
from agent.handlers.registry import handler
from agent.security.authorizer import RT, Op, allowed, cluster_allowed
from kafka_protocol.errors import ErrorCode
from kafka_protocol.messages import CreateTopicsRequest, CreateTopicsResponse
from metastore.topic_config import effective_config

if TYPE_CHECKING:
    from agent.broker import Broker
    from agent.connection import RequestContext
    from metastore import TopicInfo


Result = CreateTopicsResponse.CreatableTopicResult
ResultConfig = Result.CreatableTopicConfigs


class _Named(Protocol):
    @property
    def name(self) -> str: ...


class _Coded(Protocol):
    @property
    def error_code(self) -> int: ...


N = TypeVar("N", bound=_Named)
C = TypeVar("C", bound=_Coded)


async def each_topic_once(
    broker: Broker,
    topics: Sequence[N],
    validate_only: bool,
    run: Callable[[Broker, N, bool], Awaitable[C]],
    duplicate: Callable[[str], C],
) -> list[C]:
    """``run`` of each topic of a request, in order; a name given more than once
    gets a single ``duplicate(name)`` result instead. If any topic changed, the
    broker's topic cache is invalidated (also when a later one raises)."""
    counts = Counter(t.name for t in topics)
    results: list[C] = []
    seen: set[str] = set()
    changed = False
    try:
        for topic in topics:
            if topic.name in seen:
                continue
            seen.add(topic.name)
            if counts[topic.name] > 1:
                results.append(duplicate(topic.name))
                continue
            result = await run(broker, topic, validate_only)
            changed |= result.error_code == 0 and not validate_only
            results.append(result)
    finally:
        if changed:
            broker.invalidate_topics()
    return results


def _error(name: str, code: int, message: str | None) -> Result:
    return Result(
        name=name,
        error_code=code,
        error_message=message,
        num_partitions=-1,
        replication_factor=-1,
        configs=None,
    )


def _success(info: TopicInfo, replication_factor: int, validate_only: bool) -> Result:
    return Result(
        name=info.name,
        topic_id=info.id,
        error_code=0,
        error_message=None,
        num_partitions=info.partitions,
        replication_factor=replication_factor if replication_factor > 0 else 1,
        configs=[
            ResultConfig(
                name=key,
                value=value,
                read_only=False,
                config_source=SOURCE_DEFAULT_CONFIG if is_default else SOURCE_DYNAMIC_TOPIC_CONFIG,
                is_sensitive=False,
            )
            for key, (value, is_default) in sorted(effective_config(info.config).items())
        ],
    )


async def _create(
    broker: Broker, topic: CreateTopicsRequest.CreatableTopic, validate_only: bool
) -> Result:
    name = topic.name
    if topic.assignments:
        return _error(name, ErrorCode.INVALID_REQUEST, "Manual partition assignments are not supported: Floe has no replicas to place")
    config: dict[str, str] = {}
    for c in topic.configs:
        if c.value is None:
            return _error(name, ErrorCode.INVALID_CONFIG, f"Null value not supported for topic configs: {c.name}")
        if c.name in config:
            return _error(name, ErrorCode.INVALID_REQUEST, f"Duplicate config key: {c.name}")
        config[c.name] = c.value
    partitions = topic.num_partitions
    if partitions == -1:
        partitions = broker.config.default_partitions
    elif partitions < 1:
        return _error(name, ErrorCode.INVALID_PARTITIONS, "Number of partitions must be larger than 0.")
    rf = topic.replication_factor
    res = await broker.meta.create_topic(
        name, partitions, config, replication_factor=rf, validate_only=validate_only
    )
    if res.error or res.topic is None:
        return _error(name, int(res.error) or ErrorCode.UNKNOWN_SERVER_ERROR, res.message)
    return _success(res.topic, rf, validate_only)


@handler(CreateTopicsRequest)
async def handle(broker: Broker, ctx: RequestContext, req: CreateTopicsRequest) -> CreateTopicsResponse:
    # CREATE on the cluster, or else on each topic (TOPIC_AUTHORIZATION_FAILED).
    on_cluster = cluster_allowed(broker, ctx, Op.CREATE)

    async def create(b: Broker, topic: CreateTopicsRequest.CreatableTopic, validate_only: bool) -> Result:
        if not on_cluster and not allowed(b, ctx, Op.CREATE, RT.TOPIC, topic.name):
            return _error(topic.name, ErrorCode.TOPIC_AUTHORIZATION_FAILED, "Authorization failed.")
        return await _create(b, topic, validate_only)

    results = await each_topic_once(
        broker,
        req.topics,
        req.validate_only,
        create,
        lambda name: _error(
            name, ErrorCode.INVALID_REQUEST, f"Create topics request contains multiple entries for topic {name}"
        ),
    )
    return CreateTopicsResponse(throttle_time_ms=0, topics=results)
