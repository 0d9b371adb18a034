"""Group administration with kafka-python's KafkaAdminClient and confluent-kafka's AdminClient."""

from __future__ import annotations

from typing import Any

import pytest
from confluent_kafka import ConsumerGroupTopicPartitions
from confluent_kafka import TopicPartition as CfTP
from confluent_kafka.admin import AdminClient

from tests.agent.test_fetch_protocol import make_topic
from tests.agent.test_groups_clients import (
    GROUP_OPTS,
    PARTITIONS,
    ConfluentWorker,
    produce,
    wait_for,
)

pytestmark = pytest.mark.interop


@pytest.fixture
def groups(agent_factory: Any) -> Any:
    """An active group "busy" (one member on "adm") and an idle group "idle" with
    committed offsets (its member left)."""
    agent = agent_factory(**GROUP_OPTS)
    make_topic(agent, "adm", PARTITIONS)
    produce(agent, "adm", 0, 12)
    idle = ConfluentWorker(agent, "idle", "adm")
    idle.start()
    wait_for(lambda: len(idle.records) >= 12, what="idle group consumed")
    idle.stop()
    busy = ConfluentWorker(agent, "busy", "adm")
    busy.start()
    wait_for(lambda: len(busy.assignment) == PARTITIONS and len(busy.records) >= 12, what="busy member")
    yield agent
    busy.halt.set()
    busy.join(30)


def test_kafka_python_admin(groups: Any) -> None:
    from kafka import KafkaAdminClient
    from kafka.structs import TopicPartition

    admin = KafkaAdminClient(bootstrap_servers=groups.bootstrap)
    try:
        listed = {g["group_id"]: g for g in admin.list_groups()}
        assert sorted(listed) == ["busy", "idle"]
        assert (listed["busy"]["group_state"], listed["idle"]["group_state"]) == ("Stable", "Empty")
        described = admin.describe_groups(["busy", "idle"])
        busy, idle = described["busy"], described["idle"]
        assert (busy["group_state"], busy["protocol_type"], busy["protocol_data"]) == ("Stable", "consumer", "range")
        [member] = busy["members"]
        assert member["member_metadata"]["topics"] == ["adm"]
        assert member["member_assignment"]["assigned_partitions"] == [{"topic": "adm", "partitions": list(range(PARTITIONS))}]
        assert (idle["group_state"], idle["members"]) == ("Empty", [])
        offsets = admin.list_group_offsets({"idle": None})["idle"]
        assert {tp.partition: om.offset for tp, om in offsets.items()} == {p: 2 for p in range(PARTITIONS)}
        offsets = admin.list_group_offsets({"idle": [TopicPartition("adm", 0)]})["idle"]
        assert offsets[TopicPartition("adm", 0)].offset == 2
        result = admin.delete_groups(["idle", "busy", "ghost"])
        assert result["idle"] in (None, "OK")
        assert "NonEmptyGroup" in str(result["busy"]) and "GroupIdNotFound" in str(result["ghost"])
        assert [g["group_id"] for g in admin.list_groups()] == ["busy"]
    finally:
        admin.close()


def test_confluent_admin(groups: Any) -> None:
    admin = AdminClient({"bootstrap.servers": groups.bootstrap})
    listed = admin.list_consumer_groups(request_timeout=10).result(timeout=15)
    assert sorted(g.group_id for g in listed.valid) == ["busy", "idle"]
    described = {g: f.result(timeout=15) for g, f in admin.describe_consumer_groups(["busy", "idle"]).items()}
    busy = described["busy"]
    assert str(busy.state).endswith("STABLE") and len(busy.members) == 1
    assert sorted(tp.partition for tp in busy.members[0].assignment.topic_partitions) == list(range(PARTITIONS))
    assert str(described["idle"].state).endswith("EMPTY")

    req = [ConsumerGroupTopicPartitions("idle")]
    got = next(iter(admin.list_consumer_group_offsets(req).values())).result(timeout=15)
    assert {tp.partition: tp.offset for tp in got.topic_partitions} == {p: 2 for p in range(PARTITIONS)}

    # Alter, then delete one partition's offset, through the admin API.
    alter = [ConsumerGroupTopicPartitions("idle", [CfTP("adm", 0, 1)])]
    next(iter(admin.alter_consumer_group_offsets(alter).values())).result(timeout=15)
    got = next(iter(admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions("idle", [CfTP("adm", 0)])])
                    .values())).result(timeout=15)
    assert got.topic_partitions[0].offset == 1
    if hasattr(admin, "delete_consumer_group_offsets"):
        deleted = admin.delete_consumer_group_offsets([ConsumerGroupTopicPartitions("idle", [CfTP("adm", 1)])])
        next(iter(deleted.values())).result(timeout=15)
        got = next(iter(admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions("idle", [CfTP("adm", 1)])])
                        .values())).result(timeout=15)
        assert got.topic_partitions[0].offset < 0

    futures = admin.delete_consumer_groups(["idle", "busy"], request_timeout=10)
    futures["idle"].result(timeout=15)
    with pytest.raises(Exception, match=r"NON_EMPTY_GROUP|not empty"):
        futures["busy"].result(timeout=15)
    listed = admin.list_consumer_groups(request_timeout=10).result(timeout=15)
    assert [g.group_id for g in listed.valid] == ["busy"]
