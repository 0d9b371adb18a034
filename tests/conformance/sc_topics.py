"""Topic administration scenarios: name validation and ``.``/``_`` collisions,
CreateTopics validation and ``validate_only``, CreatePartitions edges,
DeleteRecords semantics, DeleteTopics errors.

Raw CreateTopics (v7) and CreatePartitions (v3) show the per-topic error codes a
client would otherwise wrap; error messages are not compared (wording differs).
"""

from __future__ import annotations

from typing import Any

from confluent_kafka import TopicPartition
from confluent_kafka.admin import NewPartitions, NewTopic

from kafka_protocol.messages import (
    CreatePartitionsRequest,
    CreateTopicsRequest,
    DeleteRecordsRequest,
    DeleteTopicsRequest,
)
from tests.conformance._harness import T0, Target, error_name, kafka_error, scenario

CT = CreateTopicsRequest.CreatableTopic
CC = CreateTopicsRequest.CreatableTopic.CreatableTopicConfig
CP = CreatePartitionsRequest.CreatePartitionsTopic

KEYS = ("cleanup.policy", "retention.ms", "max.message.bytes", "compression.type")


def create_raw(
    t: Target, topics: list[tuple[str, int, int, dict[str, str]]], validate_only: bool = False
) -> list[dict[str, Any]]:
    req = CreateTopicsRequest(
        topics=[
            CT(name=n, num_partitions=p, replication_factor=rf, configs=[CC(name=k, value=v) for k, v in cfg.items()])
            for n, p, rf, cfg in topics
        ],
        timeout_ms=30000,
        validate_only=validate_only,
    )
    out = []
    for r in t.raw(req, 7).topics:
        configs = {c.name: c.value for c in r.configs or [] if c.name in KEYS}
        out.append(
            {
                "error": error_name(r.error_code),
                "partitions": r.num_partitions,
                "rf": r.replication_factor,
                "configs": configs,
                "has_id": r.topic_id.int != 0,
            }
        )
    return out


def exists(t: Target, topic: str) -> bool:
    """Raw Metadata without auto-creation (an AdminClient Metadata call may auto-create)."""
    from kafka_protocol.messages import MetadataRequest

    req = MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=topic)], allow_auto_topic_creation=False)
    return any(tp.name == topic and tp.error_code == 0 for tp in t.raw(req, 12).topics)


@scenario
def sc_topic_name_invalid(t: Target) -> Any:
    names = ["", ".", "..", "a b", "a/b", "a:b", "x" * 250, "é"]
    return {repr(n)[:20]: create_raw(t, [(n, 1, 1, {})])[0]["error"] for n in names}


@scenario
def sc_topic_name_max_length(t: Target) -> Any:
    base = t.topic("len")
    name = base + "y" * (249 - len(base))
    r = create_raw(t, [(name, 1, 1, {})])[0]
    return {"error": r["error"], "partitions": r["partitions"], "rf": r["rf"]}


@scenario
def sc_topic_name_collision_dot_underscore(t: Target) -> Any:
    base = t.topic("coll").replace("-", "")
    first = create_raw(t, [(base + ".x", 1, 1, {})])[0]["error"]
    t.wait_topic(base + ".x", 1)
    return {
        "first": first,
        "underscore": create_raw(t, [(base + "_x", 1, 1, {})])[0]["error"],
        "same": create_raw(t, [(base + ".x", 1, 1, {})])[0]["error"],
    }


@scenario
def sc_create_topic_success_shape(t: Target) -> Any:
    return create_raw(t, [(t.topic("ok"), 3, 1, {"retention.ms": "3600000"})])


@scenario
def sc_create_topic_defaults(t: Target) -> Any:
    """-1 partitions and replication factor: the broker's defaults (KIP-464)."""
    r = create_raw(t, [(t.topic("dflt"), -1, -1, {})])[0]
    return {"error": r["error"], "partitions": r["partitions"], "rf": r["rf"]}


@scenario
def sc_create_topic_bad_partitions(t: Target) -> Any:
    return {
        "zero": create_raw(t, [(t.topic("p0"), 0, 1, {})])[0]["error"],
        "minus2": create_raw(t, [(t.topic("pm2"), -2, 1, {})])[0]["error"],
    }


@scenario
def sc_create_topic_bad_replication(t: Target) -> Any:
    return {
        "zero": create_raw(t, [(t.topic("rf0"), 1, 0, {})])[0]["error"],
        "two": create_raw(t, [(t.topic("rf2"), 1, 2, {})])[0]["error"],
    }


@scenario
def sc_create_topic_exists(t: Target) -> Any:
    topic = t.create(t.topic("exists"))
    return create_raw(t, [(topic, 1, 1, {})])[0]["error"]


@scenario
def sc_create_topic_duplicate_in_request(t: Target) -> Any:
    name = t.topic("twice")
    return [r["error"] for r in create_raw(t, [(name, 1, 1, {}), (name, 2, 1, {})])]


@scenario
def sc_create_topic_bad_configs(t: Target) -> Any:
    cases = {
        "unknown_key": {"no.such.config": "1"},
        "bad_number": {"retention.ms": "abc"},
        "bad_enum": {"cleanup.policy": "sometimes"},
        "below_min": {"max.message.bytes": "-5"},
        "null_value": {"retention.ms": None},
    }
    return {k: create_raw(t, [(t.topic("cfg"), 1, 1, cfg)])[0]["error"] for k, cfg in cases.items()}  # type: ignore[list-item]


@scenario
def sc_create_topic_validate_only(t: Target) -> Any:
    name = t.topic("vo")
    r = create_raw(t, [(name, 2, 1, {"cleanup.policy": "compact"})], validate_only=True)[0]
    bad = create_raw(t, [(t.topic("vo-bad"), 0, 1, {})], validate_only=True)[0]["error"]
    return {"ok": r, "bad": bad, "exists_after": exists(t, name)}


@scenario
def sc_create_topic_admin_client(t: Target) -> Any:
    name = t.topic("adm")
    fs = t.admin.create_topics([NewTopic(name, 2, 1), NewTopic(name + "!", 1, 1)], operation_timeout=20)
    out = {}
    for n, f in fs.items():
        try:
            f.result(20)
            out["ok" if n == name else "bad"] = "NONE"
        except Exception as e:
            out["ok" if n == name else "bad"] = kafka_error(e)
    return out


def create_partitions_raw(t: Target, topic: str, count: int, validate_only: bool = False) -> str:
    req = CreatePartitionsRequest(topics=[CP(name=topic, count=count, assignments=None)], timeout_ms=20000, validate_only=validate_only)
    return error_name(t.raw(req, 3).results[0].error_code)


@scenario
def sc_create_partitions_grow(t: Target) -> Any:
    topic = t.create(t.topic("cp-grow"))
    err = create_partitions_raw(t, topic, 3)
    t.wait_topic(topic, 3)
    return {"error": err, "partitions": len(t.admin.list_topics(topic, timeout=10).topics[topic].partitions)}


@scenario
def sc_create_partitions_edges(t: Target) -> Any:
    topic = t.create(t.topic("cp-edge"), 2)
    return {
        "same": create_partitions_raw(t, topic, 2),
        "fewer": create_partitions_raw(t, topic, 1),
        "zero": create_partitions_raw(t, topic, 0),
        "unknown": create_partitions_raw(t, t.topic("cp-nosuch"), 3),
    }


@scenario
def sc_create_partitions_validate_only(t: Target) -> Any:
    topic = t.create(t.topic("cp-vo"))
    err = create_partitions_raw(t, topic, 4, validate_only=True)
    return {"error": err, "partitions": len(t.admin.list_topics(topic, timeout=10).topics[topic].partitions)}


@scenario
def sc_create_partitions_admin_client(t: Target) -> Any:
    topic = t.create(t.topic("cp-adm"))
    f = t.admin.create_partitions([NewPartitions(topic, 2)], operation_timeout=20)[topic]
    f.result(20)
    g = t.admin.create_partitions([NewPartitions(topic, 2)], operation_timeout=20)[topic]
    try:
        g.result(20)
        again = "NONE"
    except Exception as e:
        again = kafka_error(e)
    return again


# -- DeleteRecords --------------------------------------------------------------------

DT = DeleteRecordsRequest.DeleteRecordsTopic
DP = DeleteRecordsRequest.DeleteRecordsTopic.DeleteRecordsPartition


def delete_raw(t: Target, topic: str, parts: dict[int, int]) -> list[dict[str, Any]]:
    req = DeleteRecordsRequest(topics=[DT(name=topic, partitions=[DP(partition_index=p, offset=o) for p, o in parts.items()])], timeout_ms=20000)
    return [
        {"error": error_name(p.error_code), "low": p.low_watermark}
        for p in t.raw(req, 2).topics[0].partitions
    ]


def ten(t: Target, tag: str) -> str:
    topic = t.create(t.topic(tag), 2)
    t.produce(topic, [(None, b"v%d" % i, T0 + i) for i in range(10)])
    return topic


@scenario
def sc_delete_records_semantics(t: Target) -> Any:
    topic = ten(t, "dr")
    return {
        "to4": delete_raw(t, topic, {0: 4}),
        "back_to2": delete_raw(t, topic, {0: 2}),
        "to_hw": delete_raw(t, topic, {0: 10}),
        "wm": list(t.watermarks(topic)),
    }


@scenario
def sc_delete_records_edges(t: Target) -> Any:
    topic = ten(t, "dr-edge")
    return {
        "beyond_hw": delete_raw(t, topic, {0: 11}),
        "minus1_hw": delete_raw(t, topic, {0: -1}),
        "minus2": delete_raw(t, topic, {1: -2}),
        "unknown_partition": delete_raw(t, topic, {7: 1}),
        "empty_partition": delete_raw(t, topic, {1: 0}),
    }


@scenario
def sc_delete_records_admin_client(t: Target) -> Any:
    topic = ten(t, "dr-adm")
    tp = TopicPartition(topic, 0, 3)
    r = t.admin.delete_records([tp])[tp].result(20)
    return {"low": r.low_watermark, "read": [x["offset"] for x in t.consume(topic, 1, offset=0, **{"auto.offset.reset": "earliest"})]}


@scenario
def sc_delete_topics_errors(t: Target) -> Any:
    req = DeleteTopicsRequest(topic_names=[t.topic("del-nosuch")], timeout_ms=10000)
    r = t.raw(req, 5).responses[0]
    return error_name(r.error_code)
