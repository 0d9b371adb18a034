"""Admin APIs and the idempotent producer through kafka-python (3.x) against a real agent."""

from __future__ import annotations

import pytest
from kafka import KafkaProducer, TopicPartition
from kafka.admin import (
    ConfigResource,
    ConfigResourceType,
    KafkaAdminClient,
    NewPartitions,
    NewTopic,
)
from kafka.errors import (
    InvalidConfigurationError,
    InvalidPartitionsError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
)

pytestmark = pytest.mark.interop


@pytest.fixture
def kadmin(floe_agent):
    client = KafkaAdminClient(bootstrap_servers=floe_agent.bootstrap, request_timeout_ms=10000)
    yield client
    client.close()


def partition_counts(agent) -> dict[str, int]:
    async def counts() -> dict[str, int]:
        return {t.name: t.partitions for t in await agent.broker.meta.list_topics()}

    return dict(agent.call(counts()))


def test_create_describe_delete(floe_agent, kadmin):
    res = kadmin.create_topics([NewTopic("kp", 2, 1, topic_configs={"retention.ms": "5000"})])
    (topic,) = res["topics"]
    assert topic["error_code"] == 0
    assert topic["num_partitions"] == 2 and topic["replication_factor"] == 1
    assert topic["configs"]["retention.ms"]["value"] == "5000"
    assert topic["configs"]["retention.ms"]["config_source"] == "DYNAMIC_TOPIC_CONFIG"
    assert topic["configs"]["segment.ms"]["config_source"] == "DEFAULT_CONFIG"
    assert partition_counts(floe_agent) == {"kp": 2}

    with pytest.raises(TopicAlreadyExistsError):
        kadmin.create_topics([NewTopic("kp", 2, 1)])
    with pytest.raises(InvalidConfigurationError):
        kadmin.create_topics([NewTopic("kp-bad", 1, 1, topic_configs={"nope": "1"})])

    # Default filter: only modified configs.
    described = kadmin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, "kp")])
    assert list(described["topic"]["kp"]) == ["retention.ms"]
    described = kadmin.describe_configs(
        [ConfigResource(ConfigResourceType.TOPIC, "kp")], config_filter="all", include_synonyms=True
    )
    retention = described["topic"]["kp"]["retention.ms"]
    assert retention["config_type"] == "LONG"
    assert [(s["name"], s["source"]) for s in retention["synonyms"]] == [
        ("retention.ms", "DYNAMIC_TOPIC_CONFIG"),
        ("log.retention.ms", "DEFAULT_CONFIG"),
    ]
    node = str(floe_agent.broker.node_id)
    broker = kadmin.describe_configs([ConfigResource(ConfigResourceType.BROKER, node)], config_filter="all")
    assert broker["broker"][node]["num.partitions"]["value"] == "1"
    assert broker["broker"][node]["num.partitions"]["read_only"] is True

    kadmin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, "kp", configs={"segment.ms": "1000"})])
    described = kadmin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, "kp")])
    assert described["topic"]["kp"]["segment.ms"]["value"] == "1000"

    res = kadmin.delete_topics(["kp"])
    assert [t["error_code"] for t in res["topics"]] == [0]
    assert partition_counts(floe_agent) == {}
    with pytest.raises(UnknownTopicOrPartitionError):
        kadmin.delete_topics(["kp"])


def test_create_partitions(floe_agent, kadmin):
    kadmin.create_topics([NewTopic("kp-grow", 1, 1)])
    kadmin.create_partitions({"kp-grow": NewPartitions(3)}, validate_only=True)
    assert partition_counts(floe_agent) == {"kp-grow": 1}
    kadmin.create_partitions({"kp-grow": NewPartitions(3)})
    assert partition_counts(floe_agent) == {"kp-grow": 3}
    with pytest.raises(InvalidPartitionsError):
        kadmin.create_partitions({"kp-grow": NewPartitions(2)})
    with pytest.raises(UnknownTopicOrPartitionError):
        kadmin.create_partitions({"kp-missing": NewPartitions(2)})


def test_describe_cluster(floe_agent, kadmin):
    desc = kadmin.describe_cluster()
    assert desc["cluster_id"] == floe_agent.broker.config.cluster_id
    node = floe_agent.broker.node_id
    assert desc["controller_id"] == node
    assert [(b["broker_id"], b["host"], b["port"]) for b in desc["brokers"]] == [
        (node, "127.0.0.1", floe_agent.port)
    ]


def test_idempotent_producer_and_delete_records(floe_agent, kadmin):
    kadmin.create_topics([NewTopic("kp-idem", 2, 1)])
    producer = KafkaProducer(bootstrap_servers=floe_agent.bootstrap, acks="all", enable_idempotence=True)
    try:
        sent = [producer.send("kp-idem", f"v{i}".encode(), partition=1).get(timeout=15) for i in range(5)]
    finally:
        producer.close(timeout=10)
    assert [(m.partition, m.offset) for m in sent] == [(1, i) for i in range(5)]

    res = kadmin.delete_records({TopicPartition("kp-idem", 1): 3})
    assert res[TopicPartition("kp-idem", 1)]["low_watermark"] == 3
