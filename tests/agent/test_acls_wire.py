"""ACLs on the wire (issue 15): CreateAcls/DescribeAcls/DeleteAcls every version, and
their enforcement by every handler, with the principal set on the agent's side of
the connection (what SASL/TLS authentication does), against a real agent.

Each negative case asserts the exact error code a client sees.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest

from agent.security.acl import AclOperation, AclPermission, PatternType, ResourceType
from agent.security.principal import KafkaPrincipal
from kafka_protocol.errors import ErrorCode as E
from kafka_protocol.messages import (
    CreateAclsRequest,
    CreatePartitionsRequest,
    CreateTopicsRequest,
    DeleteAclsRequest,
    DeleteGroupsRequest,
    DeleteRecordsRequest,
    DeleteTopicsRequest,
    DescribeAclsRequest,
    DescribeClusterRequest,
    DescribeConfigsRequest,
    DescribeGroupsRequest,
    FetchRequest,
    FindCoordinatorRequest,
    HeartbeatRequest,
    IncrementalAlterConfigsRequest,
    InitProducerIdRequest,
    JoinGroupRequest,
    ListGroupsRequest,
    ListOffsetsRequest,
    MetadataRequest,
    OffsetCommitRequest,
    OffsetFetchRequest,
    ProduceRequest,
)
from kafka_protocol.records import RecordBatchBuilder
from tests.agent.test_admin_protocol import Wire

Op, RT, PT, P = AclOperation, ResourceType, PatternType, AclPermission
Creation = CreateAclsRequest.AclCreation
Filter = DeleteAclsRequest.DeleteAclsFilter


class Client(Wire):
    """A raw connection whose agent-side principal is ``principal``."""

    def __init__(self, agent: Any, principal: str | None) -> None:
        super().__init__(agent.port)
        self.alive()  # the agent has accepted the connection
        local = f"127.0.0.1:{self.sock.getsockname()[1]}"
        conns = [c for c in agent.server._conns if c.peer == local]
        assert len(conns) == 1
        if principal is not None:
            conns[0].principal = KafkaPrincipal.parse(principal)


def creation(name: str, op: int, who: str, *, rt: int = RT.TOPIC, pt: int = PT.LITERAL, perm: int = P.ALLOW,
             host: str = "*") -> Creation:  # fmt: skip
    return Creation(resource_type=rt, resource_name=name, resource_pattern_type=pt, principal=who, host=host,
                    operation=op, permission_type=perm)  # fmt: skip


def everything(version: int = 3) -> Filter:
    return Filter(resource_type_filter=RT.ANY, resource_name_filter=None,
                  pattern_type_filter=PT.ANY if version else PT.LITERAL, principal_filter=None, host_filter=None,
                  operation=Op.ANY, permission_type=P.ANY)  # fmt: skip


def batch() -> bytes:
    b = RecordBatchBuilder()
    b.append(b"k", b"v")
    return b.build()


def produce(c: Client, topic: str, v: int = 9, txn: str | None = None) -> int:
    PTD = ProduceRequest.TopicProduceData
    req = ProduceRequest(
        transactional_id=txn, acks=1, timeout_ms=10_000,
        topic_data=[PTD(name=topic, partition_data=[PTD.PartitionProduceData(index=0, records=batch())])],
    )  # fmt: skip
    return int(c.call(req, v).responses[0].partition_responses[0].error_code)


def fetch(c: Client, topic: str) -> int:
    FT = FetchRequest.FetchTopic
    req = FetchRequest(max_wait_ms=0, min_bytes=0, max_bytes=1 << 20, session_epoch=-1, topics=[
        FT(topic=topic, partitions=[FT.FetchPartition(partition=0, fetch_offset=0, partition_max_bytes=1 << 20)])])  # fmt: skip
    return int(c.call(req, 12).responses[0].partitions[0].error_code)


def metadata(c: Client, topics: list[str] | None, v: int = 12) -> dict[str, int]:
    req = MetadataRequest(
        topics=None if topics is None else [MetadataRequest.MetadataRequestTopic(name=t) for t in topics],
        allow_auto_topic_creation=True,
    )
    return {t.name: t.error_code for t in c.call(req, v).topics}


@pytest.fixture
def secure(agent_factory: Callable[..., Any]) -> Any:
    """An agent with authorizer=acl, super user User:admin, and topics made by admin."""
    agent = agent_factory(authorizer="acl", super_users="User:admin", auto_create_topics=True)
    admin = Client(agent, "User:admin")
    CT = CreateTopicsRequest.CreatableTopic
    res = admin.call(CreateTopicsRequest(timeout_ms=5000, topics=[
        CT(name=n, num_partitions=1, replication_factor=-1) for n in ("orders", "pay.eu", "pay.us", "secret")]), 5)  # fmt: skip
    assert [t.error_code for t in res.topics] == [0, 0, 0, 0]
    agent.admin = admin
    return agent


def grant(agent: Any, *creations: Creation) -> None:
    res = agent.admin.call(CreateAclsRequest(creations=list(creations)), 3)
    assert [r.error_code for r in res.results] == [0] * len(creations), res


# -- the ACL APIs -------------------------------------------------------------------------


def test_acl_apis_without_authorizer_answer_security_disabled(floe_agent: Any) -> None:
    c = Client(floe_agent, None)
    assert c.call(CreateAclsRequest(creations=[creation("t", Op.READ, "User:a")]), 3).results[0].error_code == E.SECURITY_DISABLED
    assert c.call(DescribeAclsRequest(resource_type_filter=RT.ANY, pattern_type_filter=PT.ANY,
                                      operation=Op.ANY, permission_type=P.ANY), 3).error_code == E.SECURITY_DISABLED  # fmt: skip
    assert c.call(DeleteAclsRequest(filters=[everything()]), 3).filter_results[0].error_code == E.SECURITY_DISABLED
    # ... and nothing else is refused: authorizer=none is today's behaviour.
    assert metadata(c, ["auto-made"]) == {"auto-made": 0}
    assert produce(c, "auto-made") == 0


@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_create_describe_delete_every_version(secure: Any, version: int) -> None:
    admin = secure.admin
    pt = PT.LITERAL if version == 0 else PT.PREFIXED
    made = [creation("orders", Op.READ, "User:alice"), creation("pay.", Op.WRITE, "User:bob", pt=pt, host="10.1.1.1")]
    res = admin.call(CreateAclsRequest(creations=made), version)
    assert [r.error_code for r in res.results] == [0, 0]
    d = admin.call(DescribeAclsRequest(resource_type_filter=RT.ANY, resource_name_filter=None,
                                       pattern_type_filter=PT.ANY if version else PT.LITERAL, principal_filter=None,
                                       host_filter=None, operation=Op.ANY, permission_type=P.ANY), version)  # fmt: skip
    assert d.error_code == 0
    got = {(r.resource_name, r.pattern_type, a.principal, a.host, a.operation) for r in d.resources for a in r.acls}
    assert got == {("orders", PT.LITERAL, "User:alice", "*", Op.READ), ("pay.", pt, "User:bob", "10.1.1.1", Op.WRITE)}
    deleted = admin.call(DeleteAclsRequest(filters=[everything(version)]), version)
    assert deleted.filter_results[0].error_code == 0
    assert len(deleted.filter_results[0].matching_acls) == 2
    again = admin.call(DescribeAclsRequest(resource_type_filter=RT.ANY, resource_name_filter=None,
                                           pattern_type_filter=PT.ANY if version else 3, principal_filter=None,
                                           host_filter=None, operation=Op.ANY, permission_type=P.ANY), version)  # fmt: skip
    assert again.error_code == 0 and again.resources == []


def test_acl_apis_need_cluster_permissions(secure: Any) -> None:
    alice = Client(secure, "User:alice")
    res = alice.call(CreateAclsRequest(creations=[creation("orders", Op.ALL, "User:alice")]), 3)
    assert res.results[0].error_code == E.CLUSTER_AUTHORIZATION_FAILED
    d = alice.call(DescribeAclsRequest(resource_type_filter=RT.ANY, pattern_type_filter=PT.ANY, operation=Op.ANY,
                                       permission_type=P.ANY), 3)  # fmt: skip
    assert d.error_code == E.CLUSTER_AUTHORIZATION_FAILED
    assert alice.call(DeleteAclsRequest(filters=[everything()]), 3).filter_results[0].error_code == E.CLUSTER_AUTHORIZATION_FAILED
    grant(secure, creation("kafka-cluster", Op.ALTER, "User:alice", rt=RT.CLUSTER))
    assert alice.call(CreateAclsRequest(creations=[creation("orders", Op.READ, "User:x")]), 3).results[0].error_code == 0
    # ALTER implies DESCRIBE: alice may list them now.
    d = alice.call(DescribeAclsRequest(resource_type_filter=RT.TOPIC, resource_name_filter=None, pattern_type_filter=PT.ANY,
                                       principal_filter=None, host_filter=None, operation=Op.ANY,
                                       permission_type=P.ANY), 3)  # fmt: skip
    assert d.error_code == 0 and [r.resource_name for r in d.resources] == ["orders"]


def test_invalid_creations_and_filters(secure: Any) -> None:
    admin = secure.admin
    bad = [
        creation("t", Op.READ, "User:a", rt=RT.ANY),
        creation("t", Op.READ, "User:a", pt=PT.MATCH),
        creation("t", Op.ANY, "User:a"),
        creation("t", Op.READ, "User:a", perm=P.ANY),
        creation("t", Op.READ, "alice"),
        creation("other", Op.ALTER, "User:a", rt=RT.CLUSTER),
        creation("", Op.READ, "User:a"),
        creation("t", 77, "User:a"),
        creation("fine", Op.READ, "User:a"),
    ]
    res = admin.call(CreateAclsRequest(creations=bad), 3)
    assert [r.error_code for r in res.results] == [E.INVALID_REQUEST] * 8 + [0]
    assert res.results[5].error_message == "The only valid name for the CLUSTER resource is kafka-cluster"
    # A code Kafka does not name matches nothing; UNKNOWN (0) closes the connection, as in Kafka.
    d = admin.call(DescribeAclsRequest(resource_type_filter=99, resource_name_filter=None, pattern_type_filter=PT.ANY,
                                       principal_filter=None, host_filter=None, operation=Op.ANY,
                                       permission_type=P.ANY), 3)  # fmt: skip
    assert d.error_code == 0 and d.resources == []
    doomed = Client(secure, "User:admin")
    with pytest.raises((AssertionError, OSError), match=r"closed|reset"):
        doomed.call(DescribeAclsRequest(resource_type_filter=0, pattern_type_filter=PT.ANY, operation=Op.ANY,
                                        permission_type=P.ANY), 3)  # fmt: skip
    f = everything()
    f.operation = 42
    r = admin.call(DeleteAclsRequest(filters=[f, everything()]), 3)
    assert [x.error_code for x in r.filter_results] == [E.INVALID_REQUEST, 0]
    assert [a.resource_name for a in r.filter_results[1].matching_acls] == ["fine"]


# -- enforcement ----------------------------------------------------------------------------


def test_produce_fetch_and_offsets_need_write_read_describe(secure: Any) -> None:
    alice = Client(secure, "User:alice")
    assert produce(alice, "orders") == E.TOPIC_AUTHORIZATION_FAILED
    assert produce(alice, "no-such-topic") == E.TOPIC_AUTHORIZATION_FAILED  # existence is not revealed
    assert fetch(alice, "orders") == E.TOPIC_AUTHORIZATION_FAILED
    lo = alice.call(ListOffsetsRequest(replica_id=-1, topics=[ListOffsetsRequest.ListOffsetsTopic(
        name="orders", partitions=[ListOffsetsRequest.ListOffsetsTopic.ListOffsetsPartition(partition_index=0, timestamp=-1)])]), 5)  # fmt: skip
    assert lo.topics[0].partitions[0].error_code == E.TOPIC_AUTHORIZATION_FAILED
    grant(secure, creation("orders", Op.WRITE, "User:alice"))
    assert produce(alice, "orders") == 0
    assert produce(alice, "orders", v=3) == 0
    assert fetch(alice, "orders") == E.TOPIC_AUTHORIZATION_FAILED  # WRITE does not give READ
    lo = alice.call(lo_req("orders"), 5)
    assert lo.topics[0].partitions[0].error_code == 0  # WRITE implies DESCRIBE
    grant(secure, creation("orders", Op.READ, "User:alice"))
    assert fetch(alice, "orders") == 0
    # A transactional produce needs WRITE on its transactional id too.
    assert produce(alice, "orders", txn="tx-1") == E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED


def lo_req(topic: str) -> ListOffsetsRequest:
    LT = ListOffsetsRequest.ListOffsetsTopic
    return ListOffsetsRequest(replica_id=-1, topics=[LT(name=topic, partitions=[LT.ListOffsetsPartition(partition_index=0, timestamp=-1)])])


def test_deny_overrides_allow_and_prefixed_acls(secure: Any) -> None:
    bob = Client(secure, "User:bob")
    grant(secure, creation("pay.", Op.WRITE, "User:bob", pt=PT.PREFIXED))
    assert produce(bob, "pay.eu") == 0 and produce(bob, "pay.us") == 0
    assert produce(bob, "orders") == E.TOPIC_AUTHORIZATION_FAILED
    grant(secure, creation("pay.us", Op.ALL, "User:*", perm=P.DENY))
    assert produce(bob, "pay.us") == E.TOPIC_AUTHORIZATION_FAILED
    assert produce(bob, "pay.eu") == 0
    # A host-specific DENY applies only to that host (ours is 127.0.0.1).
    grant(secure, creation("pay.eu", Op.WRITE, "User:bob", perm=P.DENY, host="10.9.9.9"))
    assert produce(bob, "pay.eu") == 0
    grant(secure, creation("pay.eu", Op.WRITE, "User:bob", perm=P.DENY, host="127.0.0.1"))
    assert produce(bob, "pay.eu") == E.TOPIC_AUTHORIZATION_FAILED


def test_metadata_lists_only_describable_topics_and_create_needs_create(secure: Any) -> None:
    carol = Client(secure, "User:carol")
    assert metadata(carol, None) == {}
    for v in (0, 4, 12):
        assert metadata(carol, ["orders"], v) == {"orders": E.TOPIC_AUTHORIZATION_FAILED}
    grant(secure, creation("pay.", Op.READ, "User:carol", pt=PT.PREFIXED))
    assert metadata(carol, None) == {"pay.eu": 0, "pay.us": 0}
    # Auto-creation of a describable topic needs CREATE (cluster or topic).
    assert metadata(carol, ["pay.new"]) == {"pay.new": E.TOPIC_AUTHORIZATION_FAILED}
    assert secure.call(secure.broker.meta.get_topic("pay.new")) is None
    grant(secure, creation("pay.new", Op.CREATE, "User:carol"))
    assert metadata(carol, ["pay.new"]) == {"pay.new": 0}
    assert metadata(carol, None) == {"pay.eu": 0, "pay.us": 0, "pay.new": 0}
    # The super user sees everything.
    assert set(metadata(secure.admin, None)) == {"orders", "pay.eu", "pay.us", "pay.new", "secret"}


def test_topic_admin_apis(secure: Any) -> None:
    dave = Client(secure, "User:dave")
    CT = CreateTopicsRequest.CreatableTopic
    res = dave.call(CreateTopicsRequest(timeout_ms=5000, topics=[CT(name="d1", num_partitions=1, replication_factor=-1)]), 5)
    assert res.topics[0].error_code == E.TOPIC_AUTHORIZATION_FAILED
    res = dave.call(DeleteTopicsRequest(topic_names=["secret"], timeout_ms=5000), 3)
    assert res.responses[0].error_code == E.TOPIC_AUTHORIZATION_FAILED
    assert secure.call(secure.broker.meta.get_topic("secret")) is not None
    res = dave.call(DeleteRecordsRequest(timeout_ms=5000, topics=[DeleteRecordsRequest.DeleteRecordsTopic(
        name="secret", partitions=[DeleteRecordsRequest.DeleteRecordsTopic.DeleteRecordsPartition(partition_index=0, offset=0)])]), 1)  # fmt: skip
    assert res.topics[0].partitions[0].error_code == E.TOPIC_AUTHORIZATION_FAILED
    res = dave.call(CreatePartitionsRequest(timeout_ms=5000, topics=[
        CreatePartitionsRequest.CreatePartitionsTopic(name="secret", count=3)]), 1)  # fmt: skip
    assert res.results[0].error_code == E.TOPIC_AUTHORIZATION_FAILED
    DC = DescribeConfigsRequest.DescribeConfigsResource
    res = dave.call(DescribeConfigsRequest(resources=[DC(resource_type=2, resource_name="secret"), DC(resource_type=4, resource_name="0")]), 1)
    assert [r.error_code for r in res.results] == [E.TOPIC_AUTHORIZATION_FAILED, E.CLUSTER_AUTHORIZATION_FAILED]
    IA = IncrementalAlterConfigsRequest.AlterConfigsResource
    res = dave.call(IncrementalAlterConfigsRequest(resources=[IA(resource_type=2, resource_name="secret", configs=[
        IA.AlterableConfig(name="retention.ms", config_operation=0, value="1000")])]), 1)  # fmt: skip
    assert res.responses[0].error_code == E.TOPIC_AUTHORIZATION_FAILED
    grant(secure, creation("d", Op.CREATE, "User:dave", pt=PT.PREFIXED),
          creation("secret", Op.DELETE, "User:dave"), creation("secret", Op.ALTER_CONFIGS, "User:dave"))  # fmt: skip
    res = dave.call(CreateTopicsRequest(timeout_ms=5000, topics=[CT(name="d1", num_partitions=1, replication_factor=-1)]), 5)
    assert res.topics[0].error_code == 0
    res = dave.call(DescribeConfigsRequest(resources=[DC(resource_type=2, resource_name="secret")]), 1)
    assert res.results[0].error_code == 0  # ALTER_CONFIGS implies DESCRIBE_CONFIGS
    res = dave.call(DeleteTopicsRequest(topic_names=["secret"], timeout_ms=5000), 3)
    assert res.responses[0].error_code == 0


def test_group_apis_need_group_permissions(secure: Any) -> None:
    erin = Client(secure, "User:erin")
    fc = erin.call(FindCoordinatorRequest(key="g1", key_type=0), 3)
    assert fc.error_code == E.GROUP_AUTHORIZATION_FAILED
    fc = erin.call(FindCoordinatorRequest(key_type=1, coordinator_keys=["tx"]), 4)
    assert fc.coordinators[0].error_code == E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    jg = erin.call(JoinGroupRequest(group_id="g1", session_timeout_ms=10_000, rebalance_timeout_ms=10_000, member_id="",
                                    protocol_type="consumer", protocols=[]), 5)  # fmt: skip
    assert jg.error_code == E.GROUP_AUTHORIZATION_FAILED
    hb = erin.call(HeartbeatRequest(group_id="g1", generation_id=1, member_id="m"), 3)
    assert hb.error_code == E.GROUP_AUTHORIZATION_FAILED
    OT = OffsetCommitRequest.OffsetCommitRequestTopic
    commit = OffsetCommitRequest(group_id="g1", generation_id_or_member_epoch=-1, member_id="", topics=[
        OT(name="orders", partitions=[OT.OffsetCommitRequestPartition(partition_index=0, committed_offset=1)])])  # fmt: skip
    assert erin.call(commit, 8).topics[0].partitions[0].error_code == E.GROUP_AUTHORIZATION_FAILED
    of = erin.call(OffsetFetchRequest(group_id="g1", topics=None), 7)
    assert of.error_code == E.GROUP_AUTHORIZATION_FAILED
    dg = erin.call(DescribeGroupsRequest(groups=["g1"]), 5)
    assert dg.groups[0].error_code == E.GROUP_AUTHORIZATION_FAILED
    assert erin.call(DeleteGroupsRequest(groups_names=["g1"]), 2).results[0].error_code == E.GROUP_AUTHORIZATION_FAILED
    # READ on the group: the topic still needs READ for offsets.
    grant(secure, creation("g1", Op.READ, "User:erin", rt=RT.GROUP))
    assert erin.call(FindCoordinatorRequest(key="g1", key_type=0), 3).error_code == 0
    assert erin.call(commit, 8).topics[0].partitions[0].error_code == E.TOPIC_AUTHORIZATION_FAILED
    grant(secure, creation("orders", Op.READ, "User:erin"))
    assert erin.call(commit, 8).topics[0].partitions[0].error_code == 0
    fetched = erin.call(OffsetFetchRequest(group_id="g1", topics=None), 7)
    assert fetched.error_code == 0 and [(t.name, t.partitions[0].committed_offset) for t in fetched.topics] == [("orders", 1)]
    # ListGroups lists only describable groups without DESCRIBE on the cluster.
    assert [g.group_id for g in erin.call(ListGroupsRequest(), 3).groups] == ["g1"]
    assert [g.group_id for g in Client(secure, "User:frank").call(ListGroupsRequest(), 3).groups] == []


def test_idempotent_producer_needs_idempotent_write_or_some_topic_write(secure: Any) -> None:
    gus = Client(secure, "User:gus")
    ipi = InitProducerIdRequest(transactional_id=None, transaction_timeout_ms=60_000)
    assert gus.call(ipi, 2).error_code == E.CLUSTER_AUTHORIZATION_FAILED
    grant(secure, creation("pay.", Op.WRITE, "User:gus", pt=PT.PREFIXED))
    assert gus.call(ipi, 2).error_code == 0
    txn = InitProducerIdRequest(transactional_id="tx-gus", transaction_timeout_ms=60_000)
    assert gus.call(txn, 2).error_code == E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    grant(secure, creation("tx-gus", Op.WRITE, "User:gus", rt=RT.TRANSACTIONAL_ID))
    assert gus.call(txn, 2).error_code == 0


def test_describe_cluster_authorized_operations(secure: Any) -> None:
    hal = Client(secure, "User:hal")
    req = DescribeClusterRequest(include_cluster_authorized_operations=True)
    assert hal.call(req, 0).cluster_authorized_operations == 0
    grant(secure, creation("kafka-cluster", Op.ALTER, "User:hal", rt=RT.CLUSTER))
    assert hal.call(req, 0).cluster_authorized_operations == (1 << Op.ALTER) | (1 << Op.DESCRIBE)


def test_every_agent_enforces_a_change_at_its_next_poll(agent_factory: Callable[..., Any], tmp_path: Any) -> None:
    """Two agents on one metastore: an ACL created through one is enforced by the other
    once the other's own poll (every acl_refresh_ms=500) has loaded it, deleted likewise.
    The wait is on the other agent's loaded ACL version, not on the wall clock: a loaded
    CI box can stall an in-process agent for longer than one poll interval."""
    shared = {"metastore": f"sqlite:///{tmp_path / 'shared.db'}", "objects": f"file://{tmp_path / 'objects'}"}
    a = agent_factory(authorizer="acl", super_users="User:admin", **shared)
    b = agent_factory(authorizer="acl", super_users="User:admin", **shared)
    assert b.broker.authorizer.refresh_s == 0.5  # the poll interval behind "within a second"
    admin = Client(a, "User:admin")
    CT = CreateTopicsRequest.CreatableTopic
    assert admin.call(CreateTopicsRequest(timeout_ms=5000, topics=[CT(name="x", num_partitions=1, replication_factor=-1)]), 5).topics[0].error_code == 0
    ivy = Client(b, "User:ivy")
    assert produce(ivy, "x") == E.TOPIC_AUTHORIZATION_FAILED

    def seen_by_b() -> float:
        """Seconds until b (which made no change, so only its poll reloads) holds the
        metastore's current ACL version; generous deadline, loose bound on the cadence."""
        version = a.call(a.broker.meta.acl_version())
        t0 = time.monotonic()
        while b.broker.authorizer.version < version:
            assert time.monotonic() - t0 < 30, "the other agent never loaded the ACL change"
            time.sleep(0.01)
        took = time.monotonic() - t0
        assert took < 10 * b.broker.authorizer.refresh_s, f"loaded after {took:.1f} s: not polling every 500 ms"
        return took

    assert admin.call(CreateAclsRequest(creations=[creation("x", Op.WRITE, "User:ivy")]), 3).results[0].error_code == 0
    seen_by_b()
    assert produce(ivy, "x") == 0  # enforced as soon as loaded: no retry
    r = admin.call(DeleteAclsRequest(filters=[everything()]), 3)
    assert len(r.filter_results[0].matching_acls) == 1
    seen_by_b()
    assert produce(ivy, "x") == E.TOPIC_AUTHORIZATION_FAILED


def test_random_topic_names_cost_one_dict_lookup_once_memoised(secure: Any) -> None:
    """The authorizer memoises decisions: a repeated check does not rescan ACLs."""
    az = secure.broker.authorizer
    grant(secure, *[creation(f"t{i}", Op.WRITE, "User:alice") for i in range(50)])
    assert az.authorize("User:alice", "127.0.0.1", Op.WRITE, RT.TOPIC, "t7")
    key = ("User:alice", "127.0.0.1", int(Op.WRITE), int(RT.TOPIC), "t7")
    assert az._memo[key] is True
    name = uuid.uuid4().hex
    assert not az.authorize("User:alice", "127.0.0.1", Op.WRITE, RT.TOPIC, name)


def test_kip848_and_share_group_apis_need_group_and_topic_permissions(secure: Any) -> None:
    from kafka_protocol.messages import (
        ConsumerGroupDescribeRequest,
        ConsumerGroupHeartbeatRequest,
        ShareGroupHeartbeatRequest,
    )

    jo = Client(secure, "User:jo")
    hb = ConsumerGroupHeartbeatRequest(group_id="cg", member_id=uuid.uuid4().hex, member_epoch=0,
                                       rebalance_timeout_ms=30_000, subscribed_topic_names=["orders"], topic_partitions=[])  # fmt: skip
    assert jo.call(hb, 0).error_code == E.GROUP_AUTHORIZATION_FAILED
    share = ShareGroupHeartbeatRequest(group_id="sg", member_id=uuid.uuid4().hex, member_epoch=0, subscribed_topic_names=["orders"])
    assert jo.call(share, 1).error_code == E.GROUP_AUTHORIZATION_FAILED
    assert jo.call(ConsumerGroupDescribeRequest(group_ids=["cg"]), 0).groups[0].error_code == E.GROUP_AUTHORIZATION_FAILED
    grant(secure, creation("cg", Op.READ, "User:jo", rt=RT.GROUP), creation("sg", Op.READ, "User:jo", rt=RT.GROUP))
    r = jo.call(hb, 0)
    assert r.error_code == E.TOPIC_AUTHORIZATION_FAILED and r.error_message == "The following topics are not authorized: orders"
    assert jo.call(share, 1).error_code == E.TOPIC_AUTHORIZATION_FAILED
    grant(secure, creation("orders", Op.DESCRIBE, "User:jo"))
    assert jo.call(hb, 0).error_code == 0
    assert jo.call(share, 1).error_code == 0
    assert jo.call(ConsumerGroupDescribeRequest(group_ids=["cg"]), 0).groups[0].error_code == 0  # READ implies DESCRIBE


def test_scram_credential_apis_need_cluster_alter_and_describe(secure: Any) -> None:
    """Without CLUSTER ALTER nobody may set (say) a super user's SCRAM password;
    without CLUSTER DESCRIBE nobody may list users (Kafka's rules)."""
    from kafka_protocol.messages import (
        AlterUserScramCredentialsRequest,
        DescribeUserScramCredentialsRequest,
    )

    up = AlterUserScramCredentialsRequest.ScramCredentialUpsertion(
        name="admin", mechanism=2, iterations=4096, salt=b"s" * 16, salted_password=b"p" * 64
    )
    mallory = Client(secure, "User:mallory")
    res = mallory.call(AlterUserScramCredentialsRequest(deletions=[], upsertions=[up]), 0)
    assert [(r.user, r.error_code) for r in res.results] == [("admin", E.CLUSTER_AUTHORIZATION_FAILED)]
    d = mallory.call(DescribeUserScramCredentialsRequest(users=None), 0)
    assert d.error_code == E.CLUSTER_AUTHORIZATION_FAILED and d.results == []
    res = secure.admin.call(AlterUserScramCredentialsRequest(deletions=[], upsertions=[up]), 0)
    assert [(r.user, r.error_code) for r in res.results] == [("admin", 0)]
    d = secure.admin.call(DescribeUserScramCredentialsRequest(users=None), 0)
    assert d.error_code == 0 and [r.user for r in d.results] == ["admin"]
