"""Options of the ``floe`` Spark source: the names and meanings of Spark's Kafka source.

Parsed once on the driver into a :class:`SourceOptions` (a plain, picklable
dataclass). Every option is implemented with Kafka's meaning or refused with an
:class:`OptionError` naming it; none is silently ignored. ``kafka.bootstrap.servers``
alone is enough: the driver plans through the agents. ``metastore`` + ``objects``
select the direct mode (the driver reads the metastore itself). The full table
of options against Spark's Kafka source is in ``docs/spark.md``.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from spark_source.kafka_auth import MECHANISMS, KafkaCredentials, parse_jaas

log = logging.getLogger("spark_source")

EARLIEST = -2
LATEST = -1

# Source options of Spark's Kafka source that format("floe") implements (lower case).
_KNOWN = {
    "subscribe",
    "subscribepattern",
    "assign",
    "startingoffsets",
    "endingoffsets",
    "startingtimestamp",
    "endingtimestamp",
    "startingoffsetsbytimestamp",
    "endingoffsetsbytimestamp",
    "startingoffsetsbytimestampstrategy",
    "maxoffsetspertrigger",
    "minoffsetspertrigger",
    "maxtriggerdelay",
    "minpartitions",
    "maxrecordsperpartition",
    "includeheaders",
    "failondataloss",
    "groupidprefix",
    "kafkaconsumer.polltimeoutms",
    "fetchoffset.numretries",
    "fetchoffset.retryintervalms",
    # Floe's own
    "metastore",
    "objects",
    "journal",
    "pushdownfilters",
    "maxbytespersplit",
    "leasetimeout",
    "objectaccess",
}
_STREAMING_ONLY = ("maxoffsetspertrigger", "minoffsetspertrigger", "maxtriggerdelay")

# Kafka consumer settings (``kafka.<name>``) and what the source does with them.
# Spark's own source refuses the first group with these messages.
_KAFKA_REFUSED_BY_SPARK = {
    "auto.offset.reset": (
        "Kafka option 'auto.offset.reset' is not supported. Instead set the source option "
        "'startingOffsets' to 'earliest' or 'latest' to specify where to start."
    ),
    "key.deserializer": (
        "Kafka option 'key.deserializer' is not supported, keys are always deserialized as byte "
        "arrays. Use DataFrame operations to explicitly deserialize the keys."
    ),
    "value.deserializer": (
        "Kafka option 'value.deserializer' is not supported, values are always deserialized as "
        "byte arrays. Use DataFrame operations to explicitly deserialize the values."
    ),
    "enable.auto.commit": "Kafka option 'enable.auto.commit' is not supported.",
    "interceptor.classes": "Kafka option 'interceptor.classes' is not supported.",
}
# Implemented: where to plan, labels, timeouts, the security protocol and isolation level.
_KAFKA_USED = {
    "bootstrap.servers",
    "group.id",
    "client.id",
    "request.timeout.ms",
    "default.api.timeout.ms",
    "security.protocol",
    "isolation.level",
    # The job's Kafka user (spark_source.kafka_auth): the planning API checks its ACLs.
    "sasl.mechanism",
    "sasl.jaas.config",
    "sasl.username",
    "sasl.password",
}
_SECURITY_PROTOCOLS = ("PLAINTEXT", "SASL_PLAINTEXT", "SASL_SSL")

class OptionError(ValueError):
    """An invalid option value or combination (raised on the driver at planning)."""


@dataclass(frozen=True)
class OffsetSpec:
    """Where to start or end: ``earliest``/``latest`` for every partition, explicit
    offsets per partition (``-2`` earliest, ``-1`` latest), or timestamps (one
    global, or per partition). ``per_partition`` maps ``topic -> {partition: n}``."""

    kind: str  # "earliest" | "latest" | "offsets" | "timestamp" | "timestamps"
    per_partition: dict[str, dict[int, int]] = field(default_factory=dict)
    timestamp: int | None = None


EARLIEST_SPEC = OffsetSpec("earliest")
LATEST_SPEC = OffsetSpec("latest")


@dataclass(frozen=True)
class SourceOptions:
    # Where the driver plans: the agents (``kafka.bootstrap.servers``) or, in direct
    # mode, the metastore itself (``metastore``; then ``objects`` is required).
    bootstrap_servers: str | None = None
    metastore: str | None = None
    objects: str | None = None
    # The journal tier's bucket URLs (as the agents' FLOE_JOURNAL): where executors read
    # batches still under ``journal/`` keys. Agents mode: the plan names them unless given.
    journal: tuple[str, ...] = ()
    subscribe: tuple[str, ...] = ()
    subscribe_pattern: str | None = None
    assign: dict[str, tuple[int, ...]] | None = None
    starting: OffsetSpec = LATEST_SPEC
    ending: OffsetSpec = LATEST_SPEC
    starting_strategy: str = "error"  # startingOffsetsByTimestampStrategy: error | latest
    max_offsets_per_trigger: int | None = None
    min_offsets_per_trigger: int | None = None
    max_trigger_delay_ms: int = 15 * 60 * 1000
    min_partitions: int | None = None
    max_records_per_partition: int | None = None
    max_bytes_per_split: int = 256 * 1024 * 1024
    include_headers: bool = False
    fail_on_data_loss: bool = True
    pushdown_filters: bool = False
    # Kafka consumer settings the source honours.
    client_label: str = "floe-spark"  # kafka.client.id / kafka.group.id / groupIdPrefix
    request_timeout_ms: int = 30_000  # kafka.request.timeout.ms / default.api.timeout.ms
    poll_timeout_ms: int = 120_000  # kafkaConsumer.pollTimeoutMs: one executor read
    fetch_offset_retries: int = 3  # fetchOffset.numRetries: planning calls retried
    fetch_offset_retry_interval_ms: int = 10  # fetchOffset.retryIntervalMs
    isolation_level: str = "read_uncommitted"  # kafka.isolation.level
    security_protocol: str = "PLAINTEXT"
    # The job's Kafka user with a SASL security.protocol (never printed: repr=False).
    credentials: KafkaCredentials | None = field(default=None, repr=False)
    # Read leases: how long a plan keeps its objects from the GC without renewal.
    lease_timeout_ms: int | None = None  # None: 60 min for batch plans, 5 min when streaming
    object_access: str = "auto"  # auto | presigned | direct (agents mode)

    def lease_ttl_ms(self, streaming: bool) -> int:
        """How long a plan's read lease lasts without renewal."""
        if self.lease_timeout_ms is not None:
            return self.lease_timeout_ms
        return (5 if streaming else 60) * 60 * 1000

    @property
    def direct(self) -> bool:
        """Plan from the metastore (``metastore`` given) rather than through the agents."""
        return self.metastore is not None

    def matches(self, topic: str) -> bool:
        """Whether ``topic`` is one this source reads (``assign`` is checked per partition)."""
        if self.subscribe:
            return topic in self.subscribe
        if self.subscribe_pattern is not None:
            return re.fullmatch(self.subscribe_pattern, topic) is not None
        assert self.assign is not None
        return topic in self.assign


def _bool(name: str, v: str) -> bool:
    s = str(v).strip().lower()
    if s in ("true", "1", "yes"):
        return True
    if s in ("false", "0", "no"):
        return False
    raise OptionError(f"option {name!r} must be true or false, got {v!r}")


def _positive_int(name: str, v: str) -> int:
    try:
        n = int(str(v).strip())
    except ValueError:
        raise OptionError(f"option {name!r} must be an integer, got {v!r}") from None
    if n <= 0:
        raise OptionError(f"option {name!r} must be positive, got {v!r}")
    return n


_DURATION = re.compile(r"^\s*(\d+)\s*(ms|s|m|min|h|d)?\s*$", re.IGNORECASE)
_UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000, "min": 60_000, "h": 3_600_000, "d": 86_400_000}


def parse_duration_ms(v: str) -> int:
    """Spark's time strings (``15m``, ``30s``, ``100ms``; a bare number is ms)."""
    m = _DURATION.match(str(v))
    if not m:
        raise OptionError(f"invalid duration {v!r} (use e.g. 100ms, 30s, 15m)")
    return int(m.group(1)) * _UNIT_MS[(m.group(2) or "ms").lower()]


def _json_partitions(name: str, v: str) -> dict[str, dict[int, int]]:
    try:
        raw = json.loads(v)
    except json.JSONDecodeError as e:
        raise OptionError(f"option {name!r} is not valid JSON: {e}") from None
    if not isinstance(raw, dict):
        raise OptionError(f'option {name!r} must look like {{"topic": {{"0": 23}}}}, got {v!r}')
    out: dict[str, dict[int, int]] = {}
    for topic, parts in raw.items():
        if not isinstance(parts, dict):
            raise OptionError(f"option {name!r}: partitions of {topic!r} must be an object")
        try:
            out[str(topic)] = {int(p): int(o) for p, o in parts.items()}
        except (TypeError, ValueError):
            raise OptionError(f"option {name!r}: bad partition/offset in {topic!r}") from None
    return out


def _offset_spec(name: str, v: str) -> OffsetSpec:
    s = str(v).strip()
    if s.lower() == "earliest":
        return EARLIEST_SPEC
    if s.lower() == "latest":
        return LATEST_SPEC
    return OffsetSpec("offsets", _json_partitions(name, s))


def _non_negative_int(name: str, v: str) -> int:
    try:
        n = int(str(v).strip())
    except ValueError:
        raise OptionError(f"option {name!r} must be an integer, got {v!r}") from None
    if n < 0:
        raise OptionError(f"option {name!r} must not be negative, got {v!r}")
    return n


def _kafka_settings(opts: Mapping[str, str]) -> dict[str, str]:
    """The ``kafka.*`` options, checked: each is used or refused, never ignored."""
    kafka = {k[len("kafka.") :]: v for k, v in opts.items() if k.startswith("kafka.")}
    for name in sorted(kafka):
        if name in _KAFKA_REFUSED_BY_SPARK:
            raise OptionError(_KAFKA_REFUSED_BY_SPARK[name])
        if name in _KAFKA_USED:
            continue
        if name.startswith(("sasl.", "ssl.")):
            raise OptionError(
                f"option 'kafka.{name}' is not supported by format(\"floe\"): it takes"
                " kafka.security.protocol SASL_PLAINTEXT or SASL_SSL (system CA certificates),"
                " kafka.sasl.mechanism PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512, and the user from"
                " kafka.sasl.jaas.config or kafka.sasl.username / kafka.sasl.password"
            )
        raise OptionError(
            f"option 'kafka.{name}' is a Kafka consumer setting that format(\"floe\") does not "
            "use: executors read object storage directly, not through a Kafka consumer, so it "
            "could not change what is read. Remove it."
        )
    proto = kafka.get("security.protocol", "PLAINTEXT").strip().upper()
    if proto not in _SECURITY_PROTOCOLS:
        raise OptionError(
            f"option 'kafka.security.protocol' = {proto!r} is not supported by this Floe "
            f"version's planning API (supported: {', '.join(_SECURITY_PROTOCOLS)})"
        )
    level = kafka.get("isolation.level", "read_uncommitted").strip().lower()
    if level not in ("read_uncommitted", "read_committed"):
        raise OptionError(
            f"option 'kafka.isolation.level' must be read_uncommitted or read_committed, "
            f"got {level!r}"
        )
    return kafka


def parse_options(
    options: Mapping[str, Any], *, streaming: bool, warn: bool = True
) -> SourceOptions:
    """Validate ``options`` (case-insensitive names) as Spark's Kafka source would.

    Every option is either implemented or refused with an :class:`OptionError`
    naming it; none is silently ignored.
    """
    opts = {str(k).lower(): str(v) for k, v in options.items() if v is not None}
    unknown = sorted(k for k in opts if k not in _KNOWN and not k.startswith("kafka."))
    if unknown:
        if "path" in unknown:
            raise OptionError(
                "format(\"floe\") reads topics, not paths: use .load() without a path and "
                "name topics with 'subscribe', 'subscribePattern' or 'assign'"
            )
        raise OptionError(
            f"unknown option(s) {', '.join(unknown)} for format(\"floe\") (it takes the options "
            "of Spark's Kafka source; see docs/spark.md)"
        )
    kafka = _kafka_settings(opts)

    bootstrap = kafka.get("bootstrap.servers", "").strip() or None
    metastore = opts.get("metastore") or None
    objects = opts.get("objects") or None
    if metastore is None and bootstrap is None:
        raise OptionError(
            "option 'kafka.bootstrap.servers' must be specified (the Floe agents to plan "
            "through), or 'metastore' and 'objects' to read the metastore directly"
        )
    if metastore is not None and not objects:
        raise OptionError("option 'objects' (the object store URL) is required with 'metastore'")
    journal = tuple(u.strip() for u in opts.get("journal", "").split(",") if u.strip())
    for u in journal:
        if not u.lower().startswith(("file://", "s3://")):
            raise OptionError(
                f"option 'journal': {u!r} is not a file:// or s3:// object store URL "
                "(give comma-separated URLs, one per journal bucket)"
            )
    if metastore is not None and bootstrap is not None and warn:
        log.warning(
            "floe source: 'metastore' given, so the driver plans from the metastore directly "
            "and does not contact kafka.bootstrap.servers"
        )
    strategies = [k for k in ("subscribe", "subscribepattern", "assign") if k in opts]
    if len(strategies) != 1:
        raise OptionError(
            "exactly one of the options 'subscribe', 'subscribePattern' or 'assign' must be "
            f"given (got {strategies or 'none'})"
        )
    subscribe: tuple[str, ...] = ()
    pattern = None
    assign = None
    if "subscribe" in opts:
        subscribe = tuple(t.strip() for t in opts["subscribe"].split(",") if t.strip())
        if not subscribe:
            raise OptionError("option 'subscribe' names no topic")
    elif "subscribepattern" in opts:
        pattern = opts["subscribepattern"].strip()
        if not pattern:
            raise OptionError("option 'subscribePattern' is empty")
        try:
            re.compile(pattern)
        except re.error as e:
            raise OptionError(f"option 'subscribePattern' is not a valid pattern: {e}") from None
    else:
        try:
            raw = json.loads(opts["assign"])
            assign = {str(t): tuple(sorted(int(p) for p in ps)) for t, ps in raw.items()}
        except (json.JSONDecodeError, AttributeError, TypeError, ValueError):
            raise OptionError(
                'option \'assign\' must look like {"topicA": [0, 1], "topicB": [2]}'
            ) from None
        if not assign:
            raise OptionError("option 'assign' names no partition")

    # Starting point: startingTimestamp > startingOffsetsByTimestamp > startingOffsets.
    if "startingtimestamp" in opts:
        starting = OffsetSpec(
            "timestamp", timestamp=_ts("startingTimestamp", opts["startingtimestamp"])
        )
    elif "startingoffsetsbytimestamp" in opts:
        starting = OffsetSpec(
            "timestamps",
            _json_partitions("startingOffsetsByTimestamp", opts["startingoffsetsbytimestamp"]),
        )
    elif "startingoffsets" in opts:
        starting = _offset_spec("startingOffsets", opts["startingoffsets"])
    else:
        starting = LATEST_SPEC if streaming else EARLIEST_SPEC

    if "endingtimestamp" in opts:
        ending = OffsetSpec("timestamp", timestamp=_ts("endingTimestamp", opts["endingtimestamp"]))
    elif "endingoffsetsbytimestamp" in opts:
        ending = OffsetSpec(
            "timestamps",
            _json_partitions("endingOffsetsByTimestamp", opts["endingoffsetsbytimestamp"]),
        )
    elif "endingoffsets" in opts:
        ending = _offset_spec("endingOffsets", opts["endingoffsets"])
    else:
        ending = LATEST_SPEC

    if streaming:
        for k in ("endingoffsets", "endingtimestamp", "endingoffsetsbytimestamp"):
            if k in opts:
                raise OptionError(f"option {k!r} is not supported in streaming queries")
    else:
        if starting.kind == "latest":
            raise OptionError("startingOffsets 'latest' is not valid for batch queries")
        if ending.kind == "earliest":
            raise OptionError("endingOffsets 'earliest' is not valid for batch queries")
        if starting.kind == "offsets" and any(
            o == LATEST for ps in starting.per_partition.values() for o in ps.values()
        ):
            raise OptionError("startingOffsets for batch queries cannot use -1 (latest)")
        if ending.kind == "offsets" and any(
            o == EARLIEST for ps in ending.per_partition.values() for o in ps.values()
        ):
            raise OptionError("endingOffsets for batch queries cannot use -2 (earliest)")
        for k in _STREAMING_ONLY:
            if k in opts and warn:  # Spark's Kafka source ignores them in batch queries too
                log.warning("option %r only applies to streaming queries", k)

    strategy = opts.get("startingoffsetsbytimestampstrategy", "error").strip().lower()
    if strategy not in ("error", "latest"):
        raise OptionError("startingOffsetsByTimestampStrategy must be 'error' or 'latest'")

    if opts.get("leasetimeout") is not None and parse_duration_ms(opts["leasetimeout"]) <= 0:
        raise OptionError("option 'leaseTimeout' must be positive")
    access = opts.get("objectaccess", "auto").strip().lower()
    if access not in ("auto", "presigned", "direct"):
        raise OptionError("option 'objectAccess' must be auto, presigned or direct")
    # A label for the agents' logs and metrics, as Kafka's client.id / group.id are.
    group = kafka.get("group.id") or (
        f"{opts['groupidprefix']}-spark-kafka-source" if "groupidprefix" in opts else None
    )
    label = kafka.get("client.id") or group or "floe-spark"
    timeout = _positive_int(
        "kafka.request.timeout.ms",
        kafka.get("default.api.timeout.ms", kafka.get("request.timeout.ms", "30000")),
    )

    return SourceOptions(
        bootstrap_servers=bootstrap,
        metastore=metastore,
        objects=objects,
        journal=journal,
        subscribe=subscribe,
        subscribe_pattern=pattern,
        assign=assign,
        starting=starting,
        ending=ending,
        starting_strategy=strategy,
        max_offsets_per_trigger=(
            _positive_int("maxOffsetsPerTrigger", opts["maxoffsetspertrigger"])
            if "maxoffsetspertrigger" in opts
            else None
        ),
        min_offsets_per_trigger=(
            _positive_int("minOffsetsPerTrigger", opts["minoffsetspertrigger"])
            if "minoffsetspertrigger" in opts
            else None
        ),
        max_trigger_delay_ms=parse_duration_ms(opts.get("maxtriggerdelay", "15m")),
        min_partitions=(
            _positive_int("minPartitions", opts["minpartitions"])
            if "minpartitions" in opts
            else None
        ),
        max_records_per_partition=(
            _positive_int("maxRecordsPerPartition", opts["maxrecordsperpartition"])
            if "maxrecordsperpartition" in opts
            else None
        ),
        max_bytes_per_split=(
            _positive_int("maxBytesPerSplit", opts["maxbytespersplit"])
            if "maxbytespersplit" in opts
            else 256 * 1024 * 1024
        ),
        include_headers=_bool("includeHeaders", opts.get("includeheaders", "false")),
        fail_on_data_loss=_bool("failOnDataLoss", opts.get("failondataloss", "true")),
        pushdown_filters=_bool("pushdownFilters", opts.get("pushdownfilters", "false")),
        client_label=label,
        request_timeout_ms=timeout,
        poll_timeout_ms=_positive_int(
            "kafkaConsumer.pollTimeoutMs", opts.get("kafkaconsumer.polltimeoutms", "120000")
        ),
        fetch_offset_retries=_non_negative_int(
            "fetchOffset.numRetries", opts.get("fetchoffset.numretries", "3")
        ),
        fetch_offset_retry_interval_ms=_non_negative_int(
            "fetchOffset.retryIntervalMs", opts.get("fetchoffset.retryintervalms", "10")
        ),
        isolation_level=kafka.get("isolation.level", "read_uncommitted").strip().lower(),
        security_protocol=kafka.get("security.protocol", "PLAINTEXT").strip().upper(),
        credentials=_credentials(kafka),
        lease_timeout_ms=(
            parse_duration_ms(opts["leasetimeout"]) if "leasetimeout" in opts else None
        ),
        object_access=access,
    )


def _credentials(kafka: Mapping[str, str]) -> KafkaCredentials | None:
    """The job's Kafka user, required with a SASL security.protocol (and only then)."""
    proto = kafka.get("security.protocol", "PLAINTEXT").strip().upper()
    given = [k for k in ("sasl.mechanism", "sasl.jaas.config", "sasl.username", "sasl.password") if k in kafka]
    if not proto.startswith("SASL_"):
        if given:
            raise OptionError(
                f"option 'kafka.{given[0]}' needs kafka.security.protocol SASL_PLAINTEXT or SASL_SSL"
            )
        return None
    mechanism = kafka.get("sasl.mechanism", "PLAIN").strip().upper()
    if mechanism not in MECHANISMS:
        raise OptionError(
            f"option 'kafka.sasl.mechanism' = {mechanism!r} is not supported by format(\"floe\")"
            f" (supported: {', '.join(MECHANISMS)})"
        )
    user, password = parse_jaas(kafka.get("sasl.jaas.config", ""))
    user = kafka.get("sasl.username", user or "")
    password = kafka.get("sasl.password", password or "")
    if not user:
        raise OptionError(
            f"kafka.security.protocol {proto} needs the job's Kafka user: set kafka.sasl.jaas.config"
            " (username=\"...\" password=\"...\") or kafka.sasl.username and kafka.sasl.password"
        )
    return KafkaCredentials(mechanism, user, password)


def _ts(name: str, v: str) -> int:
    try:
        n = int(str(v).strip())
    except ValueError:
        raise OptionError(f"option {name!r} must be a timestamp in ms, got {v!r}") from None
    if n < 0:
        raise OptionError(f"option {name!r} must not be negative, got {v!r}")
    return n
