"""Group APIs over a raw socket: errors for bad input, never a crash, and the
connection stays usable afterwards (several requests share one connection)."""

from __future__ import annotations

import socket
import struct
import threading
from typing import Any

import pytest

import kafka_protocol.messages as m
from kafka_protocol.errors import ErrorCode as E
from kafka_protocol.framing import RequestHeader, encode_request
from kafka_protocol.messages import ConsumerProtocolSubscription
from tests.agent.test_fetch_protocol import _recv_exact, make_topic
from tests.agent.test_groups_clients import wait_for

GROUP_OPTS: dict[str, Any] = {"group_min_session_timeout_ms": 1000, "group_initial_rebalance_delay_ms": 0}


class Conn:
    """One client connection; requests are answered in order."""

    def __init__(self, agent: Any) -> None:
        self.s = socket.create_connection(("127.0.0.1", agent.port), timeout=15)
        self.corr = 0
        self.lock = threading.Lock()

    def send(self, request: Any, version: int) -> int:
        with self.lock:
            self.corr += 1
            self.s.sendall(encode_request(RequestHeader(request.API_KEY, version, self.corr, "raw-groups"), request))
            return self.corr

    def recv(self, request: Any, version: int, corr: int) -> Any:
        (size,) = struct.unpack(">i", _recv_exact(self.s, 4))
        body = _recv_exact(self.s, size)
        assert struct.unpack(">i", body[:4])[0] == corr
        cls = getattr(m, type(request).__name__.replace("Request", "Response"))
        at = 5 if cls.header_version(version) >= 1 else 4
        return cls.decode(body[at:], version)

    def call(self, request: Any, version: int) -> Any:
        return self.recv(request, version, self.send(request, version))

    def close(self) -> None:
        self.s.close()


@pytest.fixture
def agent(agent_factory: Any) -> Any:
    return agent_factory(**GROUP_OPTS)


def sub(*topics: str) -> bytes:
    return b"\x00\x01" + ConsumerProtocolSubscription(topics=list(topics)).encode(1)


def join_req(member_id: str = "", group: str = "g", *, instance: str | None = None, topics: tuple[str, ...] = ("t",),
             session_ms: int = 10_000) -> m.JoinGroupRequest:
    return m.JoinGroupRequest(
        group_id=group, session_timeout_ms=session_ms, rebalance_timeout_ms=10_000, member_id=member_id,
        group_instance_id=instance, protocol_type="consumer",
        protocols=[m.JoinGroupRequest.JoinGroupRequestProtocol(name="range", metadata=sub(*topics))],
    )


def join_and_sync(c: Conn, group: str = "g", *, version: int = 5) -> tuple[str, int]:
    """A single-member group, joined with the KIP-394 round trip and synced."""
    first = c.call(join_req(group=group), version)
    assert first.error_code == E.MEMBER_ID_REQUIRED and first.member_id
    res = c.call(join_req(first.member_id, group), version)
    assert res.error_code == 0 and res.leader == res.member_id == first.member_id
    assert [x.member_id for x in res.members] == [first.member_id]
    assert bytes(res.members[0].metadata) == sub("t")
    sync = c.call(m.SyncGroupRequest(
        group_id=group, generation_id=res.generation_id, member_id=res.member_id,
        assignments=[m.SyncGroupRequest.SyncGroupRequestAssignment(member_id=res.member_id, assignment=b"A")],
    ), 3)
    assert sync.error_code == 0 and bytes(sync.assignment) == b"A"
    return res.member_id, res.generation_id


def commit(c: Conn, group: str, generation: int, member: str, version: int = 8, offset: int = 5,
           topic: str = "t", partition: int = 0, metadata: str = "") -> int:
    T = m.OffsetCommitRequest.OffsetCommitRequestTopic
    req = m.OffsetCommitRequest(
        group_id=group, generation_id_or_member_epoch=generation, member_id=member,
        topics=[T(name=topic, partitions=[T.OffsetCommitRequestPartition(
            partition_index=partition, committed_offset=offset, committed_metadata=metadata)])],
    )
    return int(c.call(req, version).topics[0].partitions[0].error_code)


def fetch_offset(c: Conn, group: str, version: int = 5, topic: str = "t", partition: int = 0) -> tuple[int, int]:
    T = m.OffsetFetchRequest.OffsetFetchRequestTopic
    r = c.call(m.OffsetFetchRequest(group_id=group, topics=[T(name=topic, partition_indexes=[partition])]), version)
    p = r.topics[0].partitions[0]
    return p.committed_offset, p.error_code


def test_find_coordinator_all_versions(agent: Any) -> None:
    c = Conn(agent)
    try:
        for v in range(4):
            r = c.call(m.FindCoordinatorRequest(key="g", key_type=0), v)
            assert (r.error_code, r.node_id, r.host, r.port) == (0, agent.broker.node_id, "127.0.0.1", agent.port)
        assert c.call(m.FindCoordinatorRequest(key="txn", key_type=1), 3).error_code == 0
        assert c.call(m.FindCoordinatorRequest(key="x", key_type=7), 3).error_code == E.INVALID_REQUEST
        for v in (4, 6):
            r = c.call(m.FindCoordinatorRequest(key_type=0, coordinator_keys=["a", "b"]), v)
            assert [(x.key, x.error_code, x.port) for x in r.coordinators] == [("a", 0, agent.port), ("b", 0, agent.port)]
        versions = {k.api_key: (k.min_version, k.max_version) for k in c.call(m.ApiVersionsRequest(), 0).api_keys}
        for key in (10, 11, 12, 13, 14):
            assert versions[key][0] == 0
        assert versions[8][0] <= 2 and versions[9][0] <= 1
    finally:
        c.close()


def test_bad_commits_get_errors_and_connection_survives(agent: Any) -> None:
    make_topic(agent, "t", 2)
    c = Conn(agent)
    try:
        member, gen = join_and_sync(c)
        assert commit(c, "g", gen, member) == 0
        assert fetch_offset(c, "g") == (5, 0)
        assert commit(c, "g", gen + 7, member) == E.ILLEGAL_GENERATION
        assert commit(c, "g", gen, "stranger") == E.UNKNOWN_MEMBER_ID
        assert commit(c, "g", -1, "") == E.UNKNOWN_MEMBER_ID  # standalone commit into a live group
        assert commit(c, "nogroup", 3, "m") == E.ILLEGAL_GENERATION
        assert commit(c, "g", gen, member, topic="missing") == E.UNKNOWN_TOPIC_OR_PARTITION
        assert commit(c, "g", gen, member, partition=9) == E.UNKNOWN_TOPIC_OR_PARTITION
        assert commit(c, "g", gen, member, metadata="x" * 5000) == E.OFFSET_METADATA_TOO_LARGE
        for bad in (m.HeartbeatRequest(group_id="g", generation_id=gen + 1, member_id=member),
                    m.HeartbeatRequest(group_id="g", generation_id=gen, member_id="nobody")):
            assert c.call(bad, 3).error_code in (E.ILLEGAL_GENERATION, E.UNKNOWN_MEMBER_ID)
        assert c.call(m.SyncGroupRequest(group_id="g", generation_id=gen + 1, member_id=member), 3).error_code \
            == E.ILLEGAL_GENERATION
        assert c.call(join_req("bogus-member"), 5).error_code == E.UNKNOWN_MEMBER_ID
        assert c.call(join_req(session_ms=1), 5).error_code == E.INVALID_SESSION_TIMEOUT
        assert c.call(join_req(group=""), 5).error_code == E.INVALID_GROUP_ID

        # A second member starts a rebalance: the first learns from its heartbeat.
        other = Conn(agent)
        try:
            first = other.call(join_req(), 5)
            pending = other.send(join_req(first.member_id), 5)  # waits in the barrier
            wait_for(lambda: agent.broker.groups.group_state("g").state.value == "PreparingRebalance")
            assert c.call(m.HeartbeatRequest(group_id="g", generation_id=gen, member_id=member), 3).error_code \
                == E.REBALANCE_IN_PROGRESS
            assert commit(c, "g", gen, member, offset=6) == 0  # still allowed while preparing
            # The first member rejoins: the barrier completes for both.
            res = c.call(join_req(member), 5)
            joined = other.recv(join_req(), 5, pending)
            assert res.generation_id == joined.generation_id == gen + 1
            leader_conn, leader = (c, member) if res.leader == member else (other, joined.member_id)
            # CompletingRebalance: commits with the new generation must wait.
            assert commit(c, "g", gen + 1, member) == E.REBALANCE_IN_PROGRESS
            assert commit(c, "g", gen, member) == E.ILLEGAL_GENERATION
            follower_conn, follower = (other, joined.member_id) if leader_conn is c else (c, member)
            waiting = follower_conn.send(m.SyncGroupRequest(group_id="g", generation_id=gen + 1, member_id=follower), 3)
            leader_conn.call(m.SyncGroupRequest(group_id="g", generation_id=gen + 1, member_id=leader, assignments=[
                m.SyncGroupRequest.SyncGroupRequestAssignment(member_id=follower, assignment=b"F")]), 3)
            assert bytes(follower_conn.recv(m.SyncGroupRequest(), 3, waiting).assignment) == b"F"
            assert commit(c, "g", gen + 1, member, offset=9) == 0
            # LeaveGroup v3+ batch: one known, one unknown.
            MI = m.LeaveGroupRequest.MemberIdentity
            r = c.call(m.LeaveGroupRequest(group_id="g", members=[MI(member_id=joined.member_id), MI(member_id="zz")]), 3)
            assert [x.error_code for x in r.members] == [0, E.UNKNOWN_MEMBER_ID]
            assert c.call(m.LeaveGroupRequest(group_id="g", member_id="zz"), 1).error_code == E.UNKNOWN_MEMBER_ID
        finally:
            other.close()
        assert fetch_offset(c, "g") == (9, 0)
        assert fetch_offset(c, "g", version=1, partition=1) == (-1, 0)
    finally:
        c.close()


@pytest.mark.parametrize("version", [0, 1, 2, 5, 8, 9])
def test_standalone_commit_and_fetch_versions(agent: Any, version: int) -> None:
    make_topic(agent, "t", 1)
    c = Conn(agent)
    try:
        assert commit(c, "solo", -1, "", version=version, offset=42) == 0
        assert fetch_offset(c, "solo", version=min(version, 7)) == (42, 0)
        # OffsetFetch v8+: several groups, and null topics = everything committed.
        G = m.OffsetFetchRequest.OffsetFetchRequestGroup
        r = c.call(m.OffsetFetchRequest(groups=[G(group_id="solo", topics=None), G(group_id="none", topics=None)]), 8)
        assert [(g.group_id, [(t.name, [p.committed_offset for p in t.partitions]) for t in g.topics])
                for g in r.groups] == [("solo", [("t", [42])]), ("none", [])]
    finally:
        c.close()


def test_admin_apis(agent: Any) -> None:
    make_topic(agent, "t", 2)
    make_topic(agent, "u", 1)
    c = Conn(agent)
    try:
        member, gen = join_and_sync(c, "live")
        assert commit(c, "live", gen, member, topic="u") == 0
        assert commit(c, "live", gen, member, topic="t") == 0
        assert commit(c, "idle", -1, "") == 0
        r = c.call(m.ListGroupsRequest(), 3)
        assert sorted((g.group_id, g.protocol_type) for g in r.groups) == [("idle", ""), ("live", "consumer")]
        r = c.call(m.ListGroupsRequest(states_filter=["stable"]), 4)
        assert [(g.group_id, g.group_state) for g in r.groups] == [("live", "Stable")]
        r = c.call(m.DescribeGroupsRequest(groups=["live", "idle", "ghost"]), 5)
        live, idle, ghost = r.groups
        assert (live.group_state, live.protocol_type, live.protocol_data) == ("Stable", "consumer", "range")
        assert [(x.member_id, x.client_id, bytes(x.member_assignment)) for x in live.members] == [(member, "raw-groups", b"A")]
        assert bytes(live.members[0].member_metadata) == sub("t")
        assert (idle.group_state, idle.members) == ("Empty", [])
        assert (ghost.error_code, ghost.group_state) == (0, "Dead")
        assert c.call(m.DescribeGroupsRequest(groups=["ghost"]), 6).groups[0].error_code == E.GROUP_ID_NOT_FOUND

        r = c.call(m.DeleteGroupsRequest(groups_names=["live", "idle", "ghost"]), 2)
        assert [(x.group_id, x.error_code) for x in r.results] == [
            ("live", E.NON_EMPTY_GROUP), ("idle", 0), ("ghost", E.GROUP_ID_NOT_FOUND)]
        assert fetch_offset(c, "idle") == (-1, 0)

        T = m.OffsetDeleteRequest.OffsetDeleteRequestTopic
        P = T.OffsetDeleteRequestPartition
        r = c.call(m.OffsetDeleteRequest(group_id="live", topics=[
            T(name="t", partitions=[P(partition_index=0)]), T(name="u", partitions=[P(partition_index=0)]),
            T(name="nope", partitions=[P(partition_index=0)])]), 0)
        assert r.error_code == 0
        assert [(t.name, t.partitions[0].error_code) for t in r.topics] == [
            ("t", E.GROUP_SUBSCRIBED_TO_TOPIC), ("u", 0), ("nope", E.UNKNOWN_TOPIC_OR_PARTITION)]
        assert fetch_offset(c, "live", topic="u") == (-1, 0)
        assert fetch_offset(c, "live", topic="t") == (5, 0)
        assert c.call(m.OffsetDeleteRequest(group_id="ghost", topics=[]), 0).error_code == E.GROUP_ID_NOT_FOUND
        # Once the member leaves, the group is empty and can be deleted.
        assert c.call(m.LeaveGroupRequest(group_id="live", member_id=member), 0).error_code == 0
        r = c.call(m.DeleteGroupsRequest(groups_names=["live"]), 0)
        assert r.results[0].error_code == 0
        assert c.call(m.ListGroupsRequest(), 0).groups == []
    finally:
        c.close()


def test_join_v0_and_old_versions(agent: Any) -> None:
    """v0-3 JoinGroup gets a member id at once (no MEMBER_ID_REQUIRED)."""
    c = Conn(agent)
    try:
        for v in (0, 1, 3):
            res = c.call(join_req(group=f"old{v}"), v)
            assert res.error_code == 0 and res.member_id and res.generation_id == 1
            assert c.call(m.HeartbeatRequest(group_id=f"old{v}", generation_id=1, member_id=res.member_id), 0).error_code == 0
            sync = c.call(m.SyncGroupRequest(group_id=f"old{v}", generation_id=1, member_id=res.member_id), 0)
            assert sync.error_code == 0
        for v in (7, 9):
            first = c.call(join_req(group=f"new{v}"), v)
            res = c.call(join_req(first.member_id, group=f"new{v}"), v)
            assert (res.error_code, res.protocol_type, res.protocol_name) == (0, "consumer", "range")
    finally:
        c.close()
