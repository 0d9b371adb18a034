"""Topic name and topic config validation, with Kafka's defaults.

Used by create_topic / alter_topic_config before anything touches the database,
and by describe_topic_config to fill in defaults. Rules follow Kafka's
``Topic.validate`` and ``LogConfig``: names of 1-249 chars from ``[a-zA-Z0-9._-]``
other than ``.`` and ``..``; only known config keys, values of the right type.
Keys that make no sense for a diskless log (replication, flush, segment index)
are accepted for client compatibility and stored but ignored.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

MAX_TOPIC_NAME_LENGTH = 249
MAX_PARTITIONS = 100_000
_LEGAL_NAME = re.compile(r"^[a-zA-Z0-9._-]+$")


@dataclass(frozen=True, slots=True)
class ConfigKey:
    default: str
    kind: str  # "long", "int", "bool", "double", "enum", "list", "string"
    minimum: int | float | None = None
    choices: tuple[str, ...] = ()


_LONG_MS = ConfigKey("0", "long", 0)

TOPIC_CONFIG_KEYS: dict[str, ConfigKey] = {
    "cleanup.policy": ConfigKey("delete", "list", choices=("delete", "compact")),
    "compression.type": ConfigKey(
        "producer", "enum", choices=("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer")
    ),
    "delete.retention.ms": ConfigKey("86400000", "long", 0),
    "file.delete.delay.ms": ConfigKey("60000", "long", 0),
    "flush.messages": ConfigKey("9223372036854775807", "long", 1),
    "flush.ms": ConfigKey("9223372036854775807", "long", 0),
    "index.interval.bytes": ConfigKey("4096", "int", 0),
    "local.retention.bytes": ConfigKey("-2", "long", -2),
    "local.retention.ms": ConfigKey("-2", "long", -2),
    "max.compaction.lag.ms": ConfigKey("9223372036854775807", "long", 1),
    "max.message.bytes": ConfigKey("1048588", "int", 0),
    "message.timestamp.after.max.ms": ConfigKey("9223372036854775807", "long", 0),
    "message.timestamp.before.max.ms": ConfigKey("9223372036854775807", "long", 0),
    "message.timestamp.difference.max.ms": ConfigKey("9223372036854775807", "long", 0),
    "message.timestamp.type": ConfigKey(
        "CreateTime", "enum", choices=("CreateTime", "LogAppendTime")
    ),
    "min.cleanable.dirty.ratio": ConfigKey("0.5", "double", 0.0),
    "min.compaction.lag.ms": ConfigKey("0", "long", 0),
    "min.insync.replicas": ConfigKey("1", "int", 1),
    "preallocate": ConfigKey("false", "bool"),
    "remote.storage.enable": ConfigKey("false", "bool"),
    "retention.bytes": ConfigKey("-1", "long", -1),
    "retention.ms": ConfigKey("604800000", "long", -1),
    "segment.bytes": ConfigKey("1073741824", "int", 14),
    "segment.index.bytes": ConfigKey("10485760", "int", 4),
    "segment.jitter.ms": ConfigKey("0", "long", 0),
    "segment.ms": ConfigKey("604800000", "long", 1),
    "unclean.leader.election.enable": ConfigKey("false", "bool"),
    # Floe: the compactor also keeps the topic as Parquet (Spark's Kafka schema).
    "floe.parquet.enable": ConfigKey("false", "bool"),
    # Floe: ...and commits those Parquet files to an Iceberg table (implies Parquet).
    "floe.iceberg.enable": ConfigKey("false", "bool"),
    # Floe: the values' format; json/avro/protobuf give the table typed columns (value_json).
    "floe.value.format": ConfigKey(
        "binary", "enum", choices=("binary", "json", "avro", "protobuf")
    ),
    # Floe: a JSON Schema for json values (empty: inferred from the records).
    "floe.value.json.schema": ConfigKey("", "string"),
    # Floe: the writer's Avro schema (JSON) of avro values (Avro binary encoding).
    "floe.value.avro.schema": ConfigKey("", "string"),
    # Floe: avro values in the Confluent wire format (magic 0, schema id, body); the
    # writer schemas come from this Confluent-compatible registry (overrides avro.schema).
    "floe.value.schema.registry.url": ConfigKey("", "string"),
    # Floe: how long an unreachable registry holds compaction back (then dead letters).
    "floe.value.schema.registry.wait.ms": ConfigKey("3600000", "long", 0),
    # Floe: protobuf values: a base64 FileDescriptorSet and the message's full name.
    "floe.value.protobuf.descriptor": ConfigKey("", "string"),
    "floe.value.protobuf.message": ConfigKey("", "string"),
}

_INT_BOUNDS = {"int": (-(2**31), 2**31 - 1), "long": (-(2**63), 2**63 - 1)}


def validate_topic_name(name: str) -> str | None:
    """Return an error message, or None when ``name`` is a legal Kafka topic name."""
    if not name:
        return "Topic name is empty"
    if name in (".", ".."):
        return f"Topic name cannot be '{name}'"
    if len(name) > MAX_TOPIC_NAME_LENGTH:
        return f"Topic name is longer than {MAX_TOPIC_NAME_LENGTH} characters"
    if not _LEGAL_NAME.match(name):
        return f"Topic name '{name}' contains characters other than ASCII alphanumerics, '.', '_' and '-'"
    return None


def validate_config_value(key: str, value: str) -> str | None:
    """Return an error message, or None when ``value`` is valid for ``key``."""
    spec = TOPIC_CONFIG_KEYS.get(key)
    if spec is None:
        return f"Unknown topic config name: {key}"
    if spec.kind in _INT_BOUNDS:
        try:
            number = int(value.strip())
        except ValueError:
            return f"Invalid value {value!r} for {key}: not an integer"
        low, high = _INT_BOUNDS[spec.kind]
        if not low <= number <= high or (spec.minimum is not None and number < spec.minimum):
            return f"Invalid value {value} for {key}: out of range"
    elif spec.kind == "double":
        try:
            ratio = float(value)
        except ValueError:
            return f"Invalid value {value!r} for {key}: not a number"
        if not 0.0 <= ratio <= 1.0:
            return f"Invalid value {value} for {key}: must be in [0, 1]"
    elif spec.kind == "bool":
        if value.strip().lower() not in ("true", "false"):
            return f"Invalid value {value!r} for {key}: expected true or false"
    elif spec.kind == "enum":
        if value not in spec.choices:
            return f"Invalid value {value!r} for {key}: expected one of {', '.join(spec.choices)}"
    elif spec.kind == "string":
        if key == "floe.value.json.schema" and value.strip():
            import json

            try:
                doc = json.loads(value)
            except ValueError as e:
                return f"Invalid value for {key}: not JSON ({e})"
            if not isinstance(doc, dict) or doc.get("type", "object") != "object":
                return f"Invalid value for {key}: expected a JSON Schema of type object"
        if key == "floe.value.avro.schema" and value.strip():
            import json

            try:
                doc = json.loads(value)
            except ValueError as e:
                return f"Invalid value for {key}: not JSON ({e})"
            if not isinstance(doc, dict) or doc.get("type") != "record":
                return f"Invalid value for {key}: expected an Avro schema of type record"
        if key == "floe.value.schema.registry.url" and value.strip():
            from urllib.parse import urlsplit

            parts = urlsplit(value.strip())
            if parts.scheme not in ("http", "https") or not parts.netloc:
                return f"Invalid value {value!r} for {key}: expected an http(s) URL"
        if key == "floe.value.protobuf.descriptor" and value.strip():
            import base64
            import binascii

            try:
                base64.b64decode(value, validate=True)
            except (binascii.Error, ValueError):
                return f"Invalid value for {key}: expected a base64 FileDescriptorSet"
    elif spec.kind == "list":
        items = [item.strip() for item in value.split(",")]
        if not items or any(item not in spec.choices for item in items):
            return (
                f"Invalid value {value!r} for {key}: expected a list of {', '.join(spec.choices)}"
            )
    return None


def validate_config(config: Mapping[str, str]) -> str | None:
    """Validate every entry; the first error message, or None."""
    for key, value in config.items():
        if not isinstance(value, str):
            return f"Invalid value for {key}: config values are strings"
        error = validate_config_value(key, value)
        if error is not None:
            return error
    return None


def compacted(overrides: Mapping[str, str]) -> bool:
    """Is a topic's ``cleanup.policy`` compact (alone or with delete)? ``overrides``:
    its explicit config (``TopicInfo.config``)."""
    policy = overrides.get("cleanup.policy") or TOPIC_CONFIG_KEYS["cleanup.policy"].default
    return "compact" in (p.strip() for p in str(policy).split(","))


def effective_config(overrides: Mapping[str, str]) -> dict[str, tuple[str, bool]]:
    """Every known key mapped to ``(value, is_default)``."""
    result = {key: (spec.default, True) for key, spec in TOPIC_CONFIG_KEYS.items()}
    for key, value in overrides.items():
        result[key] = (value, False)
    return result
