"""DescribeConfigs (key 32).

Behavior: topic resources (type 2) list every known topic config (or only the
requested keys; unknown requested keys are left out, as Kafka does) with the
topic's override (source DYNAMIC_TOPIC_CONFIG) or Kafka's default (source
DEFAULT_CONFIG, ``is_default`` in v0). Nothing is read-only or sensitive. With
``include_synonyms`` (v1+) an override lists itself then the default, named by
its broker-level synonym (``retention.ms`` -> ``log.retention.ms``), as Kafka
does. ``config_type`` is filled in v3+, ``documentation`` only when asked
(v3+). An illegal topic name gets INVALID_TOPIC_EXCEPTION, an unknown topic
UNKNOWN_TOPIC_OR_PARTITION.

Broker resources (type 4, name "" or this agent's node id) list a small,
read-only set of static broker configs derived from the agent's options
(``num.partitions`` = ``default_partitions``, ``auto.create.topics.enable``,
``message.max.bytes``, retention defaults, ...; ``floe.planning.url``, the
planning API Spark drivers use). Another broker id, broker
loggers (8) and other resource types get INVALID_REQUEST. Group resources (32)
list the share-group configs (``share.*``) with the group's value
(DYNAMIC_GROUP_CONFIG) or the default.

Versions: 0-4 (v4+ flexible).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agent.broker import DEFAULT_MAX_MESSAGE_BYTES
from agent.handlers.registry import handler
from agent.security.authorizer import RT, Op, allowed, cluster_allowed
from kafka_protocol.errors import ErrorCode
from kafka_protocol.messages import DescribeConfigsRequest, DescribeConfigsResponse
from metastore.topic_config import TOPIC_CONFIG_KEYS, validate_topic_name

if TYPE_CHECKING:
    from agent.broker import Broker
    from agent.connection import RequestContext

RESOURCE_TOPIC = 2
RESOURCE_BROKER = 4
RESOURCE_BROKER_LOGGER = 8
RESOURCE_GROUP = 32
SOURCE_DYNAMIC_GROUP_CONFIG = 8  # Kafka's ConfigSource.DYNAMIC_GROUP_CONFIG

# ConfigSource (DescribeConfigs v1+).
SOURCE_DYNAMIC_TOPIC_CONFIG = 1
SOURCE_STATIC_BROKER_CONFIG = 4
SOURCE_DEFAULT_CONFIG = 5

# ConfigType (DescribeConfigs v3+).
TYPE_BOOLEAN = 1
TYPE_STRING = 2
TYPE_INT = 3
TYPE_LONG = 5
TYPE_DOUBLE = 6
TYPE_LIST = 7
CONFIG_TYPES = {
    "bool": TYPE_BOOLEAN,
    "enum": TYPE_STRING,
    "int": TYPE_INT,
    "long": TYPE_LONG,
    "double": TYPE_DOUBLE,
    "list": TYPE_LIST,
}

# Topic config -> the broker config that supplies its default (Kafka's LogConfig synonyms).
BROKER_SYNONYMS = {
    "cleanup.policy": "log.cleanup.policy",
    "compression.type": "compression.type",
    "delete.retention.ms": "log.cleaner.delete.retention.ms",
    "file.delete.delay.ms": "log.segment.delete.delay.ms",
    "flush.messages": "log.flush.interval.messages",
    "flush.ms": "log.flush.interval.ms",
    "index.interval.bytes": "log.index.interval.bytes",
    "local.retention.bytes": "log.local.retention.bytes",
    "local.retention.ms": "log.local.retention.ms",
    "max.compaction.lag.ms": "log.cleaner.max.compaction.lag.ms",
    "max.message.bytes": "message.max.bytes",
    "message.timestamp.after.max.ms": "log.message.timestamp.after.max.ms",
    "message.timestamp.before.max.ms": "log.message.timestamp.before.max.ms",
    "message.timestamp.difference.max.ms": "log.message.timestamp.difference.max.ms",
    "message.timestamp.type": "log.message.timestamp.type",
    "min.cleanable.dirty.ratio": "log.cleaner.min.cleanable.ratio",
    "min.compaction.lag.ms": "log.cleaner.min.compaction.lag.ms",
    "min.insync.replicas": "min.insync.replicas",
    "preallocate": "log.preallocate",
    "retention.bytes": "log.retention.bytes",
    "retention.ms": "log.retention.ms",
    "segment.bytes": "log.segment.bytes",
    "segment.index.bytes": "log.index.size.max.bytes",
    "segment.jitter.ms": "log.roll.jitter.ms",
    "segment.ms": "log.roll.ms",
    "unclean.leader.election.enable": "unclean.leader.election.enable",
}

Result = DescribeConfigsResponse.DescribeConfigsResult
Entry = Result.DescribeConfigsResourceResult
Synonym = Entry.DescribeConfigsSynonym


def topic_doc(name: str) -> str:
    return f"Kafka topic config {name}; stored by Floe for compatibility, see Floe's docs for which keys take effect."


def broker_configs(broker: Broker) -> list[tuple[str, str, int]]:
    """(name, value, config_type) of the broker configs we describe."""
    cfg = broker.config
    return [
        ("broker.id", str(broker.node_id), TYPE_INT),
        ("node.id", str(broker.node_id), TYPE_INT),
        ("broker.rack", cfg.zone, TYPE_STRING),
        ("auto.create.topics.enable", "true" if cfg.auto_create_topics else "false", TYPE_BOOLEAN),
        ("num.partitions", str(cfg.default_partitions), TYPE_INT),
        ("default.replication.factor", "1", TYPE_INT),
        ("delete.topic.enable", "true", TYPE_BOOLEAN),
        ("message.max.bytes", str(DEFAULT_MAX_MESSAGE_BYTES), TYPE_INT),
        ("socket.request.max.bytes", str(cfg.max_request_bytes), TYPE_INT),
        ("compression.type", "producer", TYPE_STRING),
        ("log.cleanup.policy", "delete", TYPE_LIST),
        ("log.retention.ms", TOPIC_CONFIG_KEYS["retention.ms"].default, TYPE_LONG),
        ("log.retention.bytes", TOPIC_CONFIG_KEYS["retention.bytes"].default, TYPE_LONG),
        ("log.segment.bytes", TOPIC_CONFIG_KEYS["segment.bytes"].default, TYPE_INT),
        ("log.message.timestamp.type", "CreateTime", TYPE_STRING),
        ("min.insync.replicas", "1", TYPE_INT),
        ("offsets.topic.replication.factor", "1", TYPE_INT),
        ("transaction.state.log.replication.factor", "1", TYPE_INT),
        ("unclean.leader.election.enable", "false", TYPE_BOOLEAN),
        *planning_url(broker),
    ]


def planning_url(broker: Broker) -> list[tuple[str, str, int]]:
    """``floe.planning.url``: where Spark drivers find the planning API (agent/planning.py)."""
    url = broker.cluster.admin_url(broker.cluster.me)  # https with admin_tls
    if url is None:
        return []
    from agent.planning import PREFIX

    return [("floe.planning.url", url + PREFIX, TYPE_STRING)]


def topic_entry(
    name: str, value: str, is_default: bool, *, synonyms: bool, docs: bool
) -> Entry:
    spec = TOPIC_CONFIG_KEYS.get(name)
    syns: list[Synonym] = []
    if synonyms:
        if not is_default:
            syns.append(Synonym(name=name, value=value, source=SOURCE_DYNAMIC_TOPIC_CONFIG))
        if spec is not None:
            syns.append(
                Synonym(name=BROKER_SYNONYMS.get(name, name), value=spec.default, source=SOURCE_DEFAULT_CONFIG)
            )
    return Entry(
        name=name,
        value=value,
        read_only=False,
        config_source=SOURCE_DEFAULT_CONFIG if is_default else SOURCE_DYNAMIC_TOPIC_CONFIG,
        is_default=is_default,
        is_sensitive=False,
        synonyms=syns,
        config_type=CONFIG_TYPES.get(spec.kind, TYPE_STRING) if spec else TYPE_STRING,
        documentation=topic_doc(name) if docs else None,
    )


def _error(res: DescribeConfigsRequest.DescribeConfigsResource, code: int, message: str) -> Result:
    return Result(
        error_code=code,
        error_message=message,
        resource_type=res.resource_type,
        resource_name=res.resource_name,
        configs=[],
    )


async def _describe_topic(
    broker: Broker, res: DescribeConfigsRequest.DescribeConfigsResource, synonyms: bool, docs: bool
) -> Result:
    bad = validate_topic_name(res.resource_name)
    if bad is not None:
        return _error(res, ErrorCode.INVALID_TOPIC_EXCEPTION, bad)
    described = await broker.meta.describe_topic_config(res.resource_name)
    if described.error:
        return _error(res, int(described.error), described.message or "This server does not host this topic.")
    wanted = set(res.configuration_keys) if res.configuration_keys else None
    return Result(
        error_code=0,
        error_message=None,
        resource_type=res.resource_type,
        resource_name=res.resource_name,
        configs=[
            topic_entry(e.name, e.value, e.is_default, synonyms=synonyms, docs=docs)
            for e in described.entries
            if wanted is None or e.name in wanted
        ],
    )


def _describe_broker(
    broker: Broker, res: DescribeConfigsRequest.DescribeConfigsResource, synonyms: bool, docs: bool
) -> Result:
    mine = broker.cluster.virtual.ids.get(broker.cluster.me.agent_id) or [broker.node_id]
    if res.resource_name not in ("", *map(str, mine)):  # any of its virtual node ids
        return _error(res, ErrorCode.INVALID_REQUEST, f"This agent is broker {broker.node_id}, not {res.resource_name!r}")
    wanted = set(res.configuration_keys) if res.configuration_keys else None
    configs = [
        Entry(
            name=name,
            value=value,
            read_only=True,
            config_source=SOURCE_STATIC_BROKER_CONFIG,
            is_default=False,
            is_sensitive=False,
            synonyms=[Synonym(name=name, value=value, source=SOURCE_STATIC_BROKER_CONFIG)] if synonyms else [],
            config_type=ctype,
            documentation="Set by the Floe agent's options; read-only." if docs else None,
        )
        for name, value, ctype in broker_configs(broker)
        if wanted is None or name in wanted
    ]
    return Result(
        error_code=0,
        error_message=None,
        resource_type=res.resource_type,
        resource_name=res.resource_name,
        configs=configs,
    )


async def _describe_group(broker: Broker, res: DescribeConfigsRequest.DescribeConfigsResource) -> Result:
    from agent.groups.share.configs import describe_group_configs

    wanted = set(res.configuration_keys) if res.configuration_keys else None
    configs = [
        Entry(
            name=name,
            value=value,
            read_only=False,
            config_source=SOURCE_DEFAULT_CONFIG if is_default else SOURCE_DYNAMIC_GROUP_CONFIG,
            is_default=is_default,
            is_sensitive=False,
            synonyms=[],
            config_type=TYPE_STRING,
        )
        for name, (value, is_default) in (await describe_group_configs(broker, res.resource_name)).items()
        if wanted is None or name in wanted
    ]
    return Result(
        error_code=0, error_message=None, resource_type=res.resource_type, resource_name=res.resource_name, configs=configs
    )


def config_denied(broker: Broker, ctx: RequestContext, op: int, rtype: int, name: str) -> int:
    """The error for a config resource the caller may not ``op`` (DESCRIBE_CONFIGS /
    ALTER_CONFIGS): on the topic for a topic, on the cluster for a broker or broker
    logger; 0 when allowed."""
    if rtype == RESOURCE_TOPIC:
        return 0 if allowed(broker, ctx, op, RT.TOPIC, name) else ErrorCode.TOPIC_AUTHORIZATION_FAILED
    if rtype == RESOURCE_GROUP:
        return 0 if allowed(broker, ctx, op, RT.GROUP, name) else ErrorCode.GROUP_AUTHORIZATION_FAILED
    if rtype in (RESOURCE_BROKER, RESOURCE_BROKER_LOGGER):
        return 0 if cluster_allowed(broker, ctx, op) else ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    return 0  # a type we do not serve: the handler answers INVALID_REQUEST


@handler(DescribeConfigsRequest)
async def handle(
    broker: Broker, ctx: RequestContext, req: DescribeConfigsRequest
) -> DescribeConfigsResponse:
    v = ctx.header.api_version
    synonyms = v >= 1 and req.include_synonyms
    docs = v >= 3 and req.include_documentation
    results: list[Result] = []
    for res in req.resources:
        if res.resource_type in (RESOURCE_TOPIC, RESOURCE_BROKER, RESOURCE_BROKER_LOGGER, RESOURCE_GROUP):
            denied = config_denied(broker, ctx, Op.DESCRIBE_CONFIGS, res.resource_type, res.resource_name)
            if denied:
                results.append(_error(res, denied, "Authorization failed."))
                continue
        if res.resource_type == RESOURCE_TOPIC:
            results.append(await _describe_topic(broker, res, synonyms, docs))
        elif res.resource_type == RESOURCE_BROKER:
            results.append(_describe_broker(broker, res, synonyms, docs))
        elif res.resource_type == RESOURCE_GROUP:  # share-group configs (KIP-932)
            results.append(await _describe_group(broker, res))
        else:
            results.append(
                _error(res, ErrorCode.INVALID_REQUEST, f"Describing resource type {res.resource_type} is not supported")
            )
    return DescribeConfigsResponse(throttle_time_ms=0, results=results)
