"""Share-group APIs on the wire (raw protocol): heartbeat epochs, share sessions,
the offsets admin APIs, ListGroups with the ``share`` type, GROUP configs, and a
hypothesis fuzz of every share-group request type (any answer, no crash)."""

from __future__ import annotations

import random
import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kafka_protocol import messages as M
from kafka_protocol.codegen.samples import Sampler
from kafka_protocol.codegen.schema import load_message
from kafka_protocol.errors import ErrorCode
from tests.interop._raw import RawConn


def _create(conn: RawConn, name: str, partitions: int) -> uuid.UUID:
    T = M.CreateTopicsRequest.CreatableTopic
    resp = conn.request(
        M.CreateTopicsRequest(topics=[T(name=name, num_partitions=partitions, replication_factor=1)], timeout_ms=5000),
        M.CreateTopicsResponse,
        7,
    )
    assert resp.topics[0].error_code in (0, ErrorCode.TOPIC_ALREADY_EXISTS)
    return resp.topics[0].topic_id


def _hb(c: RawConn, group: str, member: str, epoch: int, topics: list[str] | None = None) -> M.ShareGroupHeartbeatResponse:
    req = M.ShareGroupHeartbeatRequest(group_id=group, member_id=member, member_epoch=epoch, subscribed_topic_names=topics)
    return c.request(req, M.ShareGroupHeartbeatResponse, 1)


def _describe_offsets(c: RawConn, group: str) -> dict[int, int]:
    resp = c.request(
        M.DescribeShareGroupOffsetsRequest(
            groups=[M.DescribeShareGroupOffsetsRequest.DescribeShareGroupOffsetsRequestGroup(group_id=group, topics=None)]
        ),
        M.DescribeShareGroupOffsetsResponse,
        1,
    )
    return {p.partition_index: p.start_offset for t in resp.groups[0].topics for p in t.partitions}


def test_membership_sessions_and_offsets_admin(floe_agent) -> None:
    with RawConn(floe_agent.port) as c:
        tid = _create(c, "sp", 2)
        j = _hb(c, "sg", "m1", 0, ["sp"])
        assert j.error_code == 0 and j.member_epoch >= 1
        assert j.assignment is not None
        assert [(t.topic_id, t.partitions) for t in j.assignment.topic_partitions] == [(tid, [0, 1])]
        assert _hb(c, "sg", "m1", j.member_epoch).assignment is None  # nothing changed
        assert _hb(c, "sg", "m1", j.member_epoch + 5).error_code == ErrorCode.FENCED_MEMBER_EPOCH
        assert _hb(c, "sg", "nobody", 3).error_code == ErrorCode.UNKNOWN_MEMBER_ID
        m2 = _hb(c, "sg", "m2", 0, ["sp"])
        assert m2.member_epoch > j.member_epoch  # a new member bumps the group epoch

        # A share session: open with epoch 0, then the next epoch; wrong epochs are refused.
        F = M.ShareFetchRequest
        fetch = F(group_id="sg", member_id="m1", share_session_epoch=0, max_wait_ms=0, max_records=10,
                  topics=[F.FetchTopic(topic_id=tid, partitions=[F.FetchTopic.FetchPartition(partition_index=0)])])  # fmt: skip
        assert c.request(fetch, M.ShareFetchResponse, 1).error_code == 0
        fetch.share_session_epoch = 7
        assert c.request(fetch, M.ShareFetchResponse, 1).error_code == ErrorCode.INVALID_SHARE_SESSION_EPOCH
        fetch.share_session_epoch = 1
        assert c.request(fetch, M.ShareFetchResponse, 1).error_code == 0
        A = M.ShareAcknowledgeRequest
        ack = A(group_id="sg", member_id="m9", share_session_epoch=1)
        assert c.request(ack, M.ShareAcknowledgeResponse, 1).error_code == ErrorCode.SHARE_SESSION_NOT_FOUND
        ack = A(group_id="sg", member_id="m1", share_session_epoch=2, topics=[A.AcknowledgeTopic(topic_id=tid, partitions=[
            A.AcknowledgeTopic.AcknowledgePartition(partition_index=0, acknowledgement_batches=[
                A.AcknowledgeTopic.AcknowledgePartition.AcknowledgementBatch(first_offset=0, last_offset=0, acknowledge_types=[1])])])])  # fmt: skip
        r = c.request(ack, M.ShareAcknowledgeResponse, 1)
        assert r.responses[0].partitions[0].error_code == ErrorCode.INVALID_RECORD_STATE  # nothing acquired

        assert _describe_offsets(c, "sg") == {0: 0}  # fetched partition 0 only: initialised at the (empty) end

        listed = c.request(M.ListGroupsRequest(types_filter=["share"]), M.ListGroupsResponse, 5)
        assert [(g.group_id, g.group_type, g.group_state) for g in listed.groups] == [("sg", "share", "Stable")]
        assert c.request(M.ListGroupsRequest(types_filter=["classic"]), M.ListGroupsResponse, 5).groups == []

        AR = M.AlterShareGroupOffsetsRequest
        alter = AR(group_id="sg", topics=[AR.AlterShareGroupOffsetsRequestTopic(topic_name="sp", partitions=[
            AR.AlterShareGroupOffsetsRequestTopic.AlterShareGroupOffsetsRequestPartition(partition_index=1, start_offset=5)])])  # fmt: skip
        assert c.request(alter, M.AlterShareGroupOffsetsResponse, 0).error_code == ErrorCode.NON_EMPTY_GROUP
        assert _hb(c, "sg", "m1", -1).member_epoch == -1
        assert _hb(c, "sg", "m2", -1).member_epoch == -1
        r2 = c.request(alter, M.AlterShareGroupOffsetsResponse, 0)
        assert r2.error_code == 0 and r2.responses[0].partitions[0].error_code == 0
        assert _describe_offsets(c, "sg") == {0: 0, 1: 5}

        DR = M.DeleteShareGroupOffsetsRequest
        d = c.request(DR(group_id="sg", topics=[DR.DeleteShareGroupOffsetsRequestTopic(topic_name="sp")]), M.DeleteShareGroupOffsetsResponse, 0)
        assert d.error_code == 0 and d.responses[0].error_code == 0
        assert _describe_offsets(c, "sg") == {}
        desc = c.request(M.ShareGroupDescribeRequest(group_ids=["sg", "nope"]), M.ShareGroupDescribeResponse, 1)
        assert desc.groups[0].group_state == "Empty" and desc.groups[1].error_code == ErrorCode.GROUP_ID_NOT_FOUND

        # DeleteGroups: refused while a member is in; then the group, its state and configs go.
        assert _hb(c, "sg", "m3", 0, ["sp"]).error_code == 0
        dg = c.request(M.DeleteGroupsRequest(groups_names=["sg"]), M.DeleteGroupsResponse, 2)
        assert dg.results[0].error_code == ErrorCode.NON_EMPTY_GROUP
        assert _hb(c, "sg", "m3", -1).member_epoch == -1
        dg = c.request(M.DeleteGroupsRequest(groups_names=["sg"]), M.DeleteGroupsResponse, 2)
        assert dg.results[0].error_code == 0
        desc = c.request(M.ShareGroupDescribeRequest(group_ids=["sg"]), M.ShareGroupDescribeResponse, 1)
        assert desc.groups[0].error_code == ErrorCode.GROUP_ID_NOT_FOUND


def test_group_configs_validated(floe_agent) -> None:
    IR = M.IncrementalAlterConfigsRequest
    R = IR.AlterConfigsResource

    def alter(name: str, value: str) -> int:
        req = IR(resources=[R(resource_type=32, resource_name="cg", configs=[R.AlterableConfig(name=name, config_operation=0, value=value)])])
        with RawConn(floe_agent.port) as c:
            return c.request(req, M.IncrementalAlterConfigsResponse, 1).responses[0].error_code

    assert alter("share.record.lock.duration.ms", "1500") == 0
    assert alter("share.record.lock.duration.ms", "10") == ErrorCode.INVALID_CONFIG
    assert alter("share.auto.offset.reset", "sideways") == ErrorCode.INVALID_CONFIG
    assert alter("no.such.config", "1") == ErrorCode.INVALID_CONFIG
    assert floe_agent.call(floe_agent.broker.meta.group_config_get("cg")) == {"share.record.lock.duration.ms": "1500"}
    D = M.DescribeConfigsRequest
    with RawConn(floe_agent.port) as c:
        r = c.request(D(resources=[D.DescribeConfigsResource(resource_type=32, resource_name="cg")]), M.DescribeConfigsResponse, 4)
    got = {e.name: (e.value, e.config_source) for e in r.results[0].configs}
    assert got["share.record.lock.duration.ms"] == ("1500", 8)  # DYNAMIC_GROUP_CONFIG
    assert got["share.delivery.count.limit"] == ("5", 5)  # DEFAULT_CONFIG


SHARE_REQUESTS = [
    "ShareGroupHeartbeatRequest", "ShareGroupDescribeRequest", "ShareFetchRequest", "ShareAcknowledgeRequest",
    "DescribeShareGroupOffsetsRequest", "AlterShareGroupOffsetsRequest", "DeleteShareGroupOffsetsRequest",
]  # fmt: skip
_CASES = [(n, v) for n in SHARE_REQUESTS for v in range(getattr(M, n).MIN_VERSION, getattr(M, n).MAX_VERSION + 1)]
_MODELS = {n: load_message(n) for n in SHARE_REQUESTS}


@pytest.fixture(scope="module")
def fuzz_agent(tmp_path_factory):
    from tests.fixtures.agent import start_agent

    agent = start_agent(tmp_path_factory.mktemp("share-fuzz"))
    with RawConn(agent.port) as c:
        _create(c, "fz", 2)
    yield agent
    agent.stop()


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(st.sampled_from(_CASES), st.integers(0, 2**32))
def test_fuzz_share_handlers(fuzz_agent, case, seed):
    from agent.handlers.registry import REGISTRY

    name, version = case
    obj = Sampler(random.Random(seed), null_ratio=0.2).message(_MODELS[name], version)
    cls = getattr(M, name)
    spec = REGISTRY[cls.API_KEY]
    with RawConn(fuzz_agent.port) as c:
        if not spec.min_version <= version <= spec.max_version:
            return
        if hasattr(obj, "max_wait_ms"):
            obj.max_wait_ms = min(abs(obj.max_wait_ms), 50)
        c.request(obj, M.RESPONSES[cls.API_KEY], version)  # any answer decodes; no crash, no hang
