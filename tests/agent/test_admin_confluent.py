"""Admin APIs through librdkafka's AdminClient (confluent-kafka) against a real agent."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewPartitions,
    NewTopic,
)

pytestmark = pytest.mark.interop

TIMEOUT = 15


def admin(agent) -> AdminClient:
    return AdminClient({"bootstrap.servers": agent.bootstrap, "socket.timeout.ms": 10000})


def outcome(future) -> int:
    """0 on success, else the Kafka error code the future failed with."""
    try:
        future.result(TIMEOUT)
    except KafkaException as e:
        return int(e.args[0].code())
    return 0


def outcomes(futures: dict) -> dict:
    return {k: outcome(f) for k, f in futures.items()}


def topics(agent) -> dict[str, int]:
    md = admin(agent).list_topics(timeout=TIMEOUT)
    return {name: len(t.partitions) for name, t in md.topics.items()}


def topic_configs(ad: AdminClient, name: str) -> dict:
    res = ConfigResource("topic", name)
    return ad.describe_configs([res])[res].result(TIMEOUT)


def test_create_list_and_delete(agent_factory):
    agent = agent_factory(auto_create_topics=False, default_partitions=4)
    ad = admin(agent)
    got = outcomes(
        ad.create_topics(
            [
                NewTopic("orders", 3, 1, config={"retention.ms": "3600000"}),
                NewTopic("defaults"),  # -1 partitions, -1 replication factor
                NewTopic("replicated", 2, 3),  # no replicas here: any factor is accepted
            ],
            request_timeout=TIMEOUT,
        )
    )
    assert got == {"orders": 0, "defaults": 0, "replicated": 0}
    assert topics(agent) == {"orders": 3, "defaults": 4, "replicated": 2}
    assert topic_configs(ad, "orders")["retention.ms"].value == "3600000"

    got = outcomes(ad.create_topics([NewTopic("orders", 1)], request_timeout=TIMEOUT))
    assert got == {"orders": KafkaError.TOPIC_ALREADY_EXISTS}

    got = outcomes(ad.delete_topics(["orders", "defaults", "never-was"], request_timeout=TIMEOUT))
    assert got == {"orders": 0, "defaults": 0, "never-was": KafkaError.UNKNOWN_TOPIC_OR_PART}
    assert topics(agent) == {"replicated": 2}
    # The name is free again.
    assert outcomes(ad.create_topics([NewTopic("orders", 1)], request_timeout=TIMEOUT)) == {"orders": 0}
    assert topics(agent)["orders"] == 1


def test_create_validate_only_and_bad_input(agent_factory):
    agent = agent_factory(auto_create_topics=False)
    ad = admin(agent)
    got = outcomes(
        ad.create_topics([NewTopic("checked", 2)], validate_only=True, request_timeout=TIMEOUT)
    )
    assert got == {"checked": 0}
    assert "checked" not in topics(agent)

    got = outcomes(
        ad.create_topics(
            [
                NewTopic("has space", 1),
                NewTopic("x" * 250, 1),
                NewTopic("zero-parts", 0),
                NewTopic("zero-rf", 1, 0),
                NewTopic("bad-config", 1, config={"no.such.config": "1"}),
                NewTopic("bad-value", 1, config={"retention.ms": "soon"}),
            ],
            request_timeout=TIMEOUT,
        )
    )
    assert got == {
        "has space": KafkaError.TOPIC_EXCEPTION,
        "x" * 250: KafkaError.TOPIC_EXCEPTION,
        "zero-parts": KafkaError.INVALID_PARTITIONS,
        "zero-rf": KafkaError.INVALID_REPLICATION_FACTOR,
        "bad-config": KafkaError.INVALID_CONFIG,
        "bad-value": KafkaError.INVALID_CONFIG,
    }
    assert topics(agent) == {}


def test_create_partitions(floe_agent):
    ad = admin(floe_agent)
    assert outcomes(ad.create_topics([NewTopic("grow", 2)], request_timeout=TIMEOUT)) == {"grow": 0}

    got = outcomes(ad.create_partitions([NewPartitions("grow", 6)], validate_only=True))
    assert got == {"grow": 0}
    assert topics(floe_agent)["grow"] == 2

    assert outcomes(ad.create_partitions([NewPartitions("grow", 6)])) == {"grow": 0}
    assert topics(floe_agent)["grow"] == 6

    got = outcomes(ad.create_partitions([NewPartitions("grow", 3)]))
    assert got == {"grow": KafkaError.INVALID_PARTITIONS}
    got = outcomes(ad.create_partitions([NewPartitions("grow", 6)]))
    assert got == {"grow": KafkaError.INVALID_PARTITIONS}
    got = outcomes(ad.create_partitions([NewPartitions("missing", 6)]))
    assert got == {"missing": KafkaError.UNKNOWN_TOPIC_OR_PART}
    got = outcomes(ad.create_partitions([NewPartitions("grow", 8, [[1], [1]])]))
    assert got == {"grow": KafkaError.INVALID_REQUEST}
    assert topics(floe_agent)["grow"] == 6


@pytest.mark.filterwarnings("ignore:alter_configs has been deprecated:DeprecationWarning")
def test_describe_and_alter_topic_configs(floe_agent):
    ad = admin(floe_agent)
    cfg = {"retention.ms": "60000", "max.message.bytes": "2000000"}
    assert outcomes(ad.create_topics([NewTopic("cfg", 1, config=cfg)], request_timeout=TIMEOUT)) == {"cfg": 0}

    entries = topic_configs(ad, "cfg")
    assert entries["retention.ms"].value == "60000"
    assert entries["retention.ms"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    assert not entries["retention.ms"].is_default
    assert entries["cleanup.policy"].value == "delete"
    assert entries["cleanup.policy"].source == ConfigSource.DEFAULT_CONFIG.value
    assert entries["cleanup.policy"].is_default
    assert not entries["cleanup.policy"].is_read_only

    # Non-incremental AlterConfigs replaces the whole override set.
    res = ConfigResource("topic", "cfg", set_config={"segment.ms": "1000"})
    assert outcomes(ad.alter_configs([res])) == {res: 0}
    entries = topic_configs(ad, "cfg")
    assert entries["segment.ms"].value == "1000"
    assert entries["retention.ms"].is_default and entries["retention.ms"].value == "604800000"
    assert entries["max.message.bytes"].is_default

    # validate_only changes nothing.
    res = ConfigResource("topic", "cfg", set_config={"segment.ms": "2000"})
    assert outcomes(ad.alter_configs([res], validate_only=True)) == {res: 0}
    assert topic_configs(ad, "cfg")["segment.ms"].value == "1000"

    res = ConfigResource("topic", "cfg", set_config={"no.such.key": "1"})
    assert outcomes(ad.alter_configs([res])) == {res: KafkaError.INVALID_CONFIG}
    res = ConfigResource("topic", "missing", set_config={"segment.ms": "1000"})
    assert outcomes(ad.alter_configs([res])) == {res: KafkaError.UNKNOWN_TOPIC_OR_PART}
    res = ConfigResource("broker", str(floe_agent.broker.node_id), set_config={"message.max.bytes": "10"})
    assert outcomes(ad.alter_configs([res])) == {res: KafkaError.INVALID_REQUEST}

    missing = ConfigResource("topic", "missing")
    assert outcome(ad.describe_configs([missing])[missing]) == KafkaError.UNKNOWN_TOPIC_OR_PART


def test_incremental_alter_configs(floe_agent):
    ad = admin(floe_agent)
    assert outcomes(ad.create_topics([NewTopic("inc", 1, config={"retention.ms": "1000"})], request_timeout=TIMEOUT)) == {"inc": 0}

    def alter(*ops, validate_only=False) -> int:
        res = ConfigResource("topic", "inc", incremental_configs=list(ops))
        return outcome(ad.incremental_alter_configs([res], validate_only=validate_only)[res])

    assert alter(ConfigEntry("segment.ms", "5000", incremental_operation=AlterConfigOpType.SET)) == 0
    entries = topic_configs(ad, "inc")
    assert entries["segment.ms"].value == "5000"
    assert entries["retention.ms"].value == "1000"  # untouched

    assert alter(ConfigEntry("retention.ms", None, incremental_operation=AlterConfigOpType.DELETE)) == 0
    assert topic_configs(ad, "inc")["retention.ms"].is_default

    assert alter(ConfigEntry("cleanup.policy", "compact", incremental_operation=AlterConfigOpType.APPEND)) == 0
    assert topic_configs(ad, "inc")["cleanup.policy"].value == "delete,compact"
    assert alter(ConfigEntry("cleanup.policy", "delete", incremental_operation=AlterConfigOpType.SUBTRACT)) == 0
    assert topic_configs(ad, "inc")["cleanup.policy"].value == "compact"

    assert alter(ConfigEntry("segment.ms", "7", incremental_operation=AlterConfigOpType.SET), validate_only=True) == 0
    assert topic_configs(ad, "inc")["segment.ms"].value == "5000"

    bad_append = ConfigEntry("retention.ms", "1", incremental_operation=AlterConfigOpType.APPEND)
    assert alter(bad_append) == KafkaError.INVALID_CONFIG  # as Kafka 4.1 (tests/conformance)
    unknown = ConfigEntry("no.such.key", "1", incremental_operation=AlterConfigOpType.SET)
    assert alter(unknown) == KafkaError.INVALID_CONFIG
    bad_value = ConfigEntry("retention.ms", "-5", incremental_operation=AlterConfigOpType.SET)
    assert alter(bad_value) == KafkaError.INVALID_CONFIG
    assert topic_configs(ad, "inc")["retention.ms"].is_default


def test_describe_broker_configs(agent_factory):
    agent = agent_factory(default_partitions=5, auto_create_topics=False)
    ad = admin(agent)
    res = ConfigResource("broker", str(agent.broker.node_id))
    entries = ad.describe_configs([res])[res].result(TIMEOUT)
    assert entries["num.partitions"].value == "5"
    assert entries["auto.create.topics.enable"].value == "false"
    assert entries["message.max.bytes"].value == "1048588"
    assert entries["log.retention.ms"].value == "604800000"
    assert all(e.is_read_only for e in entries.values())


def test_describe_cluster(agent_factory):
    agent = agent_factory(cluster_id="floe-test-cluster", zone="eu-west-1a")
    ad = admin(agent)
    desc = ad.describe_cluster(request_timeout=TIMEOUT).result(TIMEOUT)
    assert desc.cluster_id == "floe-test-cluster"
    node = agent.broker.node_id
    assert desc.controller.id == node
    assert [(n.id, n.host, n.port, n.rack) for n in desc.nodes] == [
        (node, "127.0.0.1", agent.port, "eu-west-1a")
    ]


def _produce(agent, topic: str, count: int) -> None:
    p = Producer({"bootstrap.servers": agent.bootstrap, "linger.ms": 5})
    for i in range(count):
        p.produce(topic, f"v{i}".encode(), partition=0)
    assert p.flush(TIMEOUT) == 0


def _log_start(agent, topic: str, partition: int = 0) -> int:
    async def lso() -> int:
        info = await agent.broker.meta.get_topic(topic)
        res = await agent.broker.meta.list_offsets(info.id, partition, -2)
        return int(res.offset)

    return int(agent.call(lso()))


def test_delete_records(floe_agent):
    ad = admin(floe_agent)
    assert outcomes(ad.create_topics([NewTopic("trim", 2)], request_timeout=TIMEOUT)) == {"trim": 0}
    _produce(floe_agent, "trim", 10)

    fs = ad.delete_records([TopicPartition("trim", 0, 4)], request_timeout=TIMEOUT)
    (deleted,) = fs.values()
    assert deleted.result(TIMEOUT).low_watermark == 4
    assert _log_start(floe_agent, "trim") == 4

    # -1 (OFFSET_END) trims to the high watermark.
    fs = ad.delete_records([TopicPartition("trim", 0, -1)], request_timeout=TIMEOUT)
    assert next(iter(fs.values())).result(TIMEOUT).low_watermark == 10

    fs = ad.delete_records([TopicPartition("trim", 0, 11)], request_timeout=TIMEOUT)
    assert outcome(next(iter(fs.values()))) == KafkaError.OFFSET_OUT_OF_RANGE
    # librdkafka refuses a partition its metadata does not know before asking
    # (_NOENT); the server's answer is checked in test_admin_protocol.
    fs = ad.delete_records([TopicPartition("trim", 7, 0)], request_timeout=TIMEOUT)
    assert outcome(next(iter(fs.values()))) in (KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._NOENT)
    assert _log_start(floe_agent, "trim") == 10
