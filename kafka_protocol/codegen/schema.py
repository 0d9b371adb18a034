"""Load Kafka's message JSON specs and turn them into a small typed model.

Where it sits: build time only. ``python -m kafka_protocol.codegen`` reads the
specs that ship inside the installed kafka-python wheel (no network), applies
the version overrides below, and hands the model to :mod:`.emit`.
"""

from __future__ import annotations

import copy
import importlib.resources
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SPEC_PACKAGE = "kafka.protocol.schemas.resources"
#: Specs the kafka-python wheel does not carry, copied unchanged from Apache
#: Kafka: the KIP-848 consumer-group APIs from 4.1.0 (kafka-clients-4.1.0.jar,
#: common/message/) and the KIP-932 share-group APIs from 4.2.0
#: (kafka-clients-4.2.0-sources.jar,
#: common/message/). A file here is used instead of the wheel's.
VENDORED_SPECS = Path(__file__).resolve().parent / "specs"
MAX_VERSION = 32767

#: The APIs we generate, as (module name, spec base names).
APIS: list[tuple[str, list[str]]] = [
    (re.sub(r"(?<!^)(?=[A-Z])", "_", n).lower(), [n + "Request", n + "Response"])
    for n in (
        "ApiVersions Metadata Produce Fetch ListOffsets OffsetForLeaderEpoch FindCoordinator "
        "JoinGroup SyncGroup Heartbeat LeaveGroup OffsetCommit OffsetFetch ListGroups "
        "DescribeGroups DeleteGroups OffsetDelete CreateTopics DeleteTopics CreatePartitions "
        "DescribeConfigs AlterConfigs IncrementalAlterConfigs DeleteRecords InitProducerId "
        "AddPartitionsToTxn AddOffsetsToTxn EndTxn TxnOffsetCommit WriteTxnMarkers "
        "DescribeCluster SaslHandshake SaslAuthenticate DescribeAcls CreateAcls DeleteAcls "
        "DescribeProducers DescribeTransactions ListTransactions "
        "ConsumerGroupHeartbeat ConsumerGroupDescribe "
        "ShareGroupHeartbeat ShareGroupDescribe ShareFetch ShareAcknowledge "
        "DescribeShareGroupOffsets AlterShareGroupOffsets DeleteShareGroupOffsets "
        "DescribeUserScramCredentials AlterUserScramCredentials"
    ).split()
] + [("consumer_protocol", ["ConsumerProtocolSubscription", "ConsumerProtocolAssignment"])]

#: Version overrides. Apache Kafka 4.0 dropped old versions from the specs
#: (KIP-896), but the field "versions" ranges still describe the old wire format,
#: and old clients (librdkafka 2.0 in Debian's kcat, aiokafka, kafka-python's
#: api_version probing) still send them. Each entry lowers validVersions to the
#: given minimum; every extended version is checked against kafka-python's
#: hand-written pre-4.0 classes (kafka/protocol/old/*.py) in
#: tests/kafka_protocol/test_messages_diff.py.
MIN_VERSION_OVERRIDES: dict[str, int] = {
    "Produce": 0,  # librdkafka needs min 0 in ApiVersions (KAFKA-18659)
    "Fetch": 0,
    "ListOffsets": 0,  # v0 needs MaxNumOffsets / OldStyleOffsets, see FIELD_ADDITIONS
    "OffsetCommit": 0,  # CommitTimestamp ("versions": "1") is still in the spec
    "OffsetFetch": 0,
    "OffsetForLeaderEpoch": 0,
    "CreateTopics": 0,
    "DeleteTopics": 0,
    "DescribeConfigs": 0,
    "DescribeAcls": 0,
    "CreateAcls": 0,
    "DeleteAcls": 0,
}

#: Fields removed from the specs together with their versions, re-added when
#: missing: (spec name, path of struct names, insert after field, field json).
FIELD_ADDITIONS: list[tuple[str, list[str], str, dict[str, Any]]] = [
    (
        "ListOffsetsRequest",
        ["Topics", "Partitions"],
        "Timestamp",
        {
            "name": "MaxNumOffsets",
            "type": "int32",
            "versions": "0",
            "default": "1",
            "about": "The maximum number of offsets to report (v0 only).",
        },
    ),
    (
        "ListOffsetsResponse",
        ["Topics", "Partitions"],
        "ErrorCode",
        {
            "name": "OldStyleOffsets",
            "type": "[]int64",
            "versions": "0",
            "about": "The result offsets (v0 only).",
        },
    ),
]

FIXED: dict[str, tuple[str, int]] = {
    "int8": ("b", 1),
    "int16": ("h", 2),
    "int32": ("i", 4),
    "int64": ("q", 8),
    "uint16": ("H", 2),
    "uint32": ("I", 4),
    "float64": ("d", 8),
    "bool": ("?", 1),
}
PRIMITIVES = set(FIXED) | {"string", "bytes", "records", "uuid"}

Range = tuple[int, int] | None


def parse_versions(s: str | None) -> Range:
    if s is None or s.strip() == "" or s.strip() == "none":
        return None
    s = s.strip()
    if s.endswith("+"):
        return (int(s[:-1]), MAX_VERSION)
    if "-" in s:
        lo, hi = s.split("-")
        return (int(lo), int(hi))
    return (int(s), int(s))


def in_range(r: Range, v: int) -> bool:
    return r is not None and r[0] <= v <= r[1]


def snake(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


@dataclass
class Field:
    name: str
    attr: str
    type: str  # element type for arrays
    is_array: bool
    versions: Range
    nullable: Range
    tag: int | None
    tagged: Range
    default: str | None
    about: str
    flexible_override: Range | None = None  # only set when the field has its own flexibleVersions
    struct: Struct | None = None

    def present(self, v: int) -> bool:
        return in_range(self.versions, v)

    def is_tagged(self, v: int) -> bool:
        return self.tag is not None and in_range(self.tagged, v)

    def is_nullable(self, v: int) -> bool:
        return in_range(self.nullable, v)


@dataclass
class Struct:
    name: str
    path: list[str]  # class path, e.g. ["ProduceRequest", "TopicProduceData"]
    fields: list[Field] = field(default_factory=list)
    children: list[Struct] = field(default_factory=list)  # nested class definitions

    @property
    def qualname(self) -> str:
        return ".".join(self.path)

    @property
    def ident(self) -> str:
        return "_".join(self.path)


@dataclass
class Message:
    name: str  # e.g. ProduceRequest
    api_name: str  # e.g. Produce
    kind: str  # request | response | data
    api_key: int | None
    min_version: int
    max_version: int
    flexible: Range
    root: Struct
    doc: str


def load_raw(name: str) -> dict[str, Any]:
    vendored = VENDORED_SPECS / (name + ".json")
    if vendored.exists():
        text = vendored.read_text("utf-8")
    else:
        text = importlib.resources.files(SPEC_PACKAGE).joinpath(name + ".json").read_text("utf-8")
    text = re.sub(r"(?m)^\s*//.*$", "", text)
    data: dict[str, Any] = json.loads(text)
    return data


def _apply_additions(name: str, data: dict[str, Any]) -> None:
    for spec, path, after, fjson in FIELD_ADDITIONS:
        if spec != name:
            continue
        fields = data["fields"]
        for p in path:
            fields = next(f for f in fields if f["name"] == p)["fields"]
        if any(f["name"] == fjson["name"] for f in fields):
            continue  # this kafka-python already carries it
        idx = next(i for i, f in enumerate(fields) if f["name"] == after)
        fields.insert(idx + 1, copy.deepcopy(fjson))


def load_message(name: str) -> Message:
    data = load_raw(name)
    _apply_additions(name, data)
    kind = data["type"]
    api_name = name
    for suffix in ("Request", "Response"):
        if kind != "data" and name.endswith(suffix):
            api_name = name[: -len(suffix)]
    valid = parse_versions(data["validVersions"])
    assert valid is not None
    lo, hi = valid
    lo = min(lo, MIN_VERSION_OVERRIDES.get(api_name, lo)) if kind != "data" else lo
    common = {c["name"]: c for c in data.get("commonStructs", [])}
    root = Struct(name, [name])
    # commonStructs become nested classes of the top-level class.
    built: dict[str, Struct] = {}
    for cname in common:
        s = Struct(cname, [name, cname])
        built[cname] = s
        root.children.append(s)
    for cname, c in common.items():
        built[cname].fields = [_field(f, built[cname], common, built) for f in c["fields"]]
    root.fields = [_field(f, root, common, built) for f in data["fields"]]
    return Message(
        name=name,
        api_name=api_name,
        kind=kind,
        api_key=data.get("apiKey"),
        min_version=lo,
        max_version=hi,
        flexible=parse_versions(data.get("flexibleVersions")),
        root=root,
        doc=f"{name} (api key {data.get('apiKey')}), versions {lo}-{hi}.",
    )


def _default_str(d: Any) -> str | None:
    if d is None or isinstance(d, str):
        return d
    if isinstance(d, bool):
        return "true" if d else "false"
    return str(d)


def _field(
    f: dict[str, Any], parent: Struct, common: dict[str, Any], built: dict[str, Struct]
) -> Field:
    t: str = f["type"]
    is_array = t.startswith("[]")
    et = t[2:] if is_array else t
    fl = Field(
        name=f["name"],
        attr=snake(f["name"]),
        type=et,
        is_array=is_array,
        versions=parse_versions(f["versions"]),
        nullable=parse_versions(f.get("nullableVersions")),
        tag=f.get("tag"),
        tagged=parse_versions(f.get("taggedVersions")),
        default=_default_str(f.get("default")),
        about=f.get("about", ""),
        flexible_override=parse_versions(f["flexibleVersions"])
        if "flexibleVersions" in f
        else None,
    )
    if et not in PRIMITIVES:
        if "fields" in f:
            s = Struct(et, [*parent.path, et])
            parent.children.append(s)
            s.fields = [_field(sf, s, common, built) for sf in f["fields"]]
            fl.struct = s
        elif et in built:
            fl.struct = built[et]
        else:
            raise ValueError(f"unknown struct type {et} in {parent.qualname}")
    return fl
