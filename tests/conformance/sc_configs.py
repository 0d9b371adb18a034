"""Config scenarios: describe (values, sources, defaults, read-only, synonyms),
alter (legacy, whole-set), incremental alter (SET/DELETE/APPEND/SUBTRACT),
unknown keys and bad values, validate_only, unknown topics.

Observed through AdminClient.describe_configs / alter_configs /
incremental_alter_configs and raw DescribeConfigs where the client hides codes.
"""

from __future__ import annotations

from typing import Any

from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

from kafka_protocol.messages import (
    AlterConfigsRequest,
    DescribeConfigsRequest,
    IncrementalAlterConfigsRequest,
)
from tests.conformance._harness import Target, error_name, kafka_error, scenario

# Topic configs a Kafka user reads and sets; their values, sources and flags are compared.
TOPIC_KEYS = (
    "cleanup.policy",
    "compression.type",
    "delete.retention.ms",
    "max.compaction.lag.ms",
    "max.message.bytes",
    "message.timestamp.type",
    "message.timestamp.after.max.ms",
    "message.timestamp.before.max.ms",
    "min.cleanable.dirty.ratio",
    "min.compaction.lag.ms",
    "retention.bytes",
    "retention.ms",
)


def describe(t: Target, topic: str, keys: tuple[str, ...] = TOPIC_KEYS, synonyms: bool = False) -> Any:
    res = ConfigResource(ResourceType.TOPIC, topic)
    try:
        entries = t.admin.describe_configs([res], request_timeout=15, include_synonyms=synonyms)[res].result(20)
    except Exception as e:
        return {"error": kafka_error(e)}
    out: dict[str, Any] = {}
    for k in keys:
        e = entries.get(k)
        if e is None:
            out[k] = None
            continue
        out[k] = {
            "value": e.value,
            "source": e.source,
            "default": e.is_default,
            "read_only": e.is_read_only,
            "sensitive": e.is_sensitive,
        }
        if synonyms:
            out[k]["synonyms"] = [[s.name, s.source] for s in e.synonyms.values()]
    return out


@scenario
def sc_config_describe_defaults(t: Target) -> Any:
    return describe(t, t.create(t.topic("cfg-d")))


@scenario
def sc_config_describe_overrides(t: Target) -> Any:
    topic = t.create(t.topic("cfg-o"), config={"retention.ms": "3600000", "cleanup.policy": "compact,delete"})
    return describe(t, topic)


@scenario
def sc_config_describe_synonyms(t: Target) -> Any:
    topic = t.create(t.topic("cfg-s"), config={"retention.ms": "7200000"})
    return describe(t, topic, ("retention.ms", "cleanup.policy", "max.message.bytes"), synonyms=True)


@scenario
def sc_config_describe_unknown_topic(t: Target) -> Any:
    return describe(t, t.topic("cfg-nosuch"), ("retention.ms",))


@scenario
def sc_config_describe_raw_names(t: Target) -> Any:
    """DescribeConfigs of named keys: unknown names are simply absent."""
    topic = t.create(t.topic("cfg-r"))
    R = DescribeConfigsRequest.DescribeConfigsResource
    req = DescribeConfigsRequest(resources=[R(resource_type=2, resource_name=topic, configuration_keys=["retention.ms", "no.such.key"])])
    r = t.raw(req, 4).results[0]
    return {"error": error_name(r.error_code), "names": sorted(c.name for c in r.configs)}


@scenario
def sc_config_incremental_set_delete(t: Target) -> Any:
    topic = t.create(t.topic("cfg-i"))
    res = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[
        ConfigEntry("retention.ms", "60000", incremental_operation=AlterConfigOpType.SET),
        ConfigEntry("max.message.bytes", "50000", incremental_operation=AlterConfigOpType.SET),
    ])
    t.admin.incremental_alter_configs([res])[res].result(20)
    after_set = describe(t, topic, ("retention.ms", "max.message.bytes"))
    res = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[
        ConfigEntry("retention.ms", None, incremental_operation=AlterConfigOpType.DELETE),
    ])
    t.admin.incremental_alter_configs([res])[res].result(20)
    return {"set": after_set, "deleted": describe(t, topic, ("retention.ms", "max.message.bytes"))}


@scenario
def sc_config_incremental_append_subtract(t: Target) -> Any:
    topic = t.create(t.topic("cfg-a"))
    out = {}
    for label, op, value in [
        ("append", AlterConfigOpType.APPEND, "compact"),
        ("append_again", AlterConfigOpType.APPEND, "compact"),
        ("subtract", AlterConfigOpType.SUBTRACT, "delete"),
    ]:
        res = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[ConfigEntry("cleanup.policy", value, incremental_operation=op)])
        try:
            t.admin.incremental_alter_configs([res])[res].result(20)
            err = "NONE"
        except Exception as e:
            err = kafka_error(e)
        d = describe(t, topic, ("cleanup.policy",))
        out[label] = {"error": err, "value": (d.get("cleanup.policy") or {}).get("value", d)}
    return out


@scenario
def sc_config_incremental_errors(t: Target) -> Any:
    topic = t.create(t.topic("cfg-ie"))
    cases = {
        "unknown_key": ("no.such.key", "1", 0),
        "bad_value": ("retention.ms", "soon", 0),
        "append_non_list": ("retention.ms", "5", 2),
        "bad_enum": ("cleanup.policy", "never", 0),
    }
    R = IncrementalAlterConfigsRequest.AlterConfigsResource
    C = IncrementalAlterConfigsRequest.AlterConfigsResource.AlterableConfig
    out = {}
    for label, (k, v, op) in cases.items():
        req = IncrementalAlterConfigsRequest(resources=[R(resource_type=2, resource_name=topic, configs=[C(name=k, config_operation=op, value=v)])], validate_only=False)
        out[label] = error_name(t.raw(req, 1).responses[0].error_code)
    req = IncrementalAlterConfigsRequest(resources=[R(resource_type=2, resource_name=t.topic("cfg-nosuch"), configs=[C(name="retention.ms", config_operation=0, value="1000")])])
    out["unknown_topic"] = error_name(t.raw(req, 1).responses[0].error_code)
    return out


@scenario
def sc_config_incremental_validate_only(t: Target) -> Any:
    topic = t.create(t.topic("cfg-ivo"))
    R = IncrementalAlterConfigsRequest.AlterConfigsResource
    C = IncrementalAlterConfigsRequest.AlterConfigsResource.AlterableConfig
    req = IncrementalAlterConfigsRequest(resources=[R(resource_type=2, resource_name=topic, configs=[C(name="retention.ms", config_operation=0, value="1000")])], validate_only=True)
    err = error_name(t.raw(req, 1).responses[0].error_code)
    return {"error": err, "after": describe(t, topic, ("retention.ms",))}


@scenario
def sc_config_legacy_alter_replaces_all(t: Target) -> Any:
    """AlterConfigs (legacy) replaces the whole override set: unnamed overrides revert."""
    topic = t.create(t.topic("cfg-l"), config={"retention.ms": "3600000"})
    R = AlterConfigsRequest.AlterConfigsResource
    C = AlterConfigsRequest.AlterConfigsResource.AlterableConfig
    req = AlterConfigsRequest(resources=[R(resource_type=2, resource_name=topic, configs=[C(name="max.message.bytes", value="40000")])], validate_only=False)
    err = error_name(t.raw(req, 2).responses[0].error_code)
    return {"error": err, "after": describe(t, topic, ("retention.ms", "max.message.bytes"))}


@scenario
def sc_config_legacy_alter_errors(t: Target) -> Any:
    topic = t.create(t.topic("cfg-le"))
    R = AlterConfigsRequest.AlterConfigsResource
    C = AlterConfigsRequest.AlterConfigsResource.AlterableConfig
    out = {}
    for label, k, v in [("unknown_key", "no.such", "1"), ("bad_value", "retention.ms", "x"), ("null_value", "retention.ms", None)]:
        req = AlterConfigsRequest(resources=[R(resource_type=2, resource_name=topic, configs=[C(name=k, value=v)])], validate_only=False)
        out[label] = error_name(t.raw(req, 2).responses[0].error_code)
    return out


@scenario
def sc_config_alter_then_produce_limit(t: Target) -> Any:
    """Lowering max.message.bytes applies to the next produce."""
    topic = t.create(t.topic("cfg-mmb"))
    res = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[ConfigEntry("max.message.bytes", "1000", incremental_operation=AlterConfigOpType.SET)])
    t.admin.incremental_alter_configs([res])[res].result(20)
    return [r[2] for r in t.produce(topic, [(None, b"z" * 3000, 0)])]
