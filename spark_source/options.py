"""Options of the ``floe`` Spark source: the names and meanings of Spark's Kafka source.

Parsed once on the driver into a :class:`SourceOptions` (a plain, picklable
dataclass). Kafka-source options that have no meaning here (``kafka.*`` consumer
settings, ``groupIdPrefix``, poll timeouts) are accepted and ignored with a
warning, so a job written for ``format("kafka")`` runs unchanged after swapping
the format and adding ``metastore``/``objects``.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger("spark_source")

EARLIEST = -2
LATEST = -1

# Accepted for compatibility with Spark's Kafka source; they tune its Kafka consumer.
_IGNORED = {
    "groupidprefix",
    "kafkaconsumer.polltimeoutms",
    "fetchoffset.numretries",
    "fetchoffset.retryintervalms",
    "startingoffsetsbytimestampstrategy",  # handled below, listed to keep it out of warnings
}

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
    "maxoffsetspertrigger",
    "minoffsetspertrigger",
    "maxtriggerdelay",
    "minpartitions",
    "maxrecordsperpartition",
    "includeheaders",
    "failondataloss",
    "metastore",
    "objects",
    "pushdownfilters",
    "maxbytespersplit",
    "path",
}


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
    metastore: str
    objects: str
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
    ignored: tuple[str, ...] = ()

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


def parse_options(
    options: Mapping[str, Any], *, streaming: bool, warn: bool = True
) -> SourceOptions:
    """Validate ``options`` (case-insensitive names) as Spark's Kafka source would."""
    opts = {str(k).lower(): str(v) for k, v in options.items() if v is not None}
    ignored = sorted(k for k in opts if k.startswith("kafka.") or k in _IGNORED)
    unknown = sorted(k for k in opts if k not in _KNOWN and k not in ignored)
    if warn and ignored:
        log.warning("floe source ignores Kafka consumer options: %s", ", ".join(ignored))
    if warn and unknown:
        log.warning("floe source: unknown options ignored: %s", ", ".join(unknown))

    metastore = opts.get("metastore")
    objects = opts.get("objects")
    if not metastore:
        raise OptionError("option 'metastore' (the metastore URL) is required")
    if not objects:
        raise OptionError("option 'objects' (the object store URL) is required")

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
        for k in ("maxoffsetspertrigger", "minoffsetspertrigger", "maxtriggerdelay"):
            if k in opts and warn:
                log.warning("option %r only applies to streaming queries", k)

    strategy = opts.get("startingoffsetsbytimestampstrategy", "error").strip().lower()
    if strategy not in ("error", "latest"):
        raise OptionError("startingOffsetsByTimestampStrategy must be 'error' or 'latest'")

    return SourceOptions(
        metastore=metastore,
        objects=objects,
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
        ignored=tuple(ignored),
    )


def _ts(name: str, v: str) -> int:
    try:
        n = int(str(v).strip())
    except ValueError:
        raise OptionError(f"option {name!r} must be a timestamp in ms, got {v!r}") from None
    if n < 0:
        raise OptionError(f"option {name!r} must not be negative, got {v!r}")
    return n
