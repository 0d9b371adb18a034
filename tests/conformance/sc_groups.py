"""Consumer group scenarios (classic protocol, raw requests so every error code
shows): member id required, join/sync/heartbeat/leave, unknown member, illegal
generation, rebalance in progress, static member fencing, describe/list/delete.
"""

from __future__ import annotations

import time
from typing import Any

from kafka_protocol.messages import (
    DeleteGroupsRequest,
    DescribeGroupsRequest,
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupRequest,
    ListGroupsRequest,
    OffsetCommitRequest,
    SyncGroupRequest,
)
from tests.conformance._harness import Target, error_name, scenario
from tests.interop._raw import RawConn

PROTO = [JoinGroupRequest.JoinGroupRequestProtocol(name="range", metadata=b"\x00\x01\x00\x00\x00\x00\x00\x00\x00\x00")]
JOIN_V = 7


def join_req(group: str, member: str = "", instance: str | None = None, session_ms: int = 10000, ptype: str = "consumer") -> JoinGroupRequest:
    return JoinGroupRequest(
        group_id=group,
        session_timeout_ms=session_ms,
        rebalance_timeout_ms=10000,
        member_id=member,
        group_instance_id=instance,
        protocol_type=ptype,
        protocols=PROTO,
    )


def join(t: Target, group: str, member: str = "", **kw: Any) -> JoinGroupResponse:
    return t.raw(join_req(group, member, **kw), JOIN_V)


def joined(t: Target, group: str, instance: str | None = None) -> tuple[str, int]:
    """A member that joined and synced as the group's only member: (member id, generation)."""
    r = join(t, group, instance=instance)
    if r.error_code != 0:  # MEMBER_ID_REQUIRED
        r = join(t, group, r.member_id, instance=instance)
    assert r.error_code == 0, error_name(r.error_code)
    A = SyncGroupRequest.SyncGroupRequestAssignment
    s = t.raw(
        SyncGroupRequest(group_id=group, generation_id=r.generation_id, member_id=r.member_id, group_instance_id=instance,
                         protocol_type="consumer", protocol_name="range", assignments=[A(member_id=r.member_id, assignment=b"")]),
        5,
    )
    assert s.error_code == 0, error_name(s.error_code)
    return r.member_id, r.generation_id


def heartbeat(t: Target, group: str, member: str, gen: int, instance: str | None = None) -> str:
    r = t.raw(HeartbeatRequest(group_id=group, generation_id=gen, member_id=member, group_instance_id=instance), 4)
    return error_name(r.error_code)


def describe(t: Target, group: str, version: int = 5) -> dict[str, Any]:
    g = t.raw(DescribeGroupsRequest(groups=[group]), version).groups[0]
    return {"error": error_name(g.error_code), "state": g.group_state, "protocol_type": g.protocol_type,
            "protocol": g.protocol_data, "members": len(g.members)}


@scenario
def sc_group_member_id_required(t: Target) -> Any:
    g = t.group("mid")
    r = join(t, g)
    r2 = join(t, g, r.member_id)
    return {
        "first": error_name(r.error_code),
        "first_has_member_id": bool(r.member_id),
        "second": error_name(r2.error_code),
        "generation": r2.generation_id,
        "leader_is_me": r2.leader == r2.member_id,
        "protocol": r2.protocol_name,
        "members": len(r2.members),
    }


@scenario
def sc_group_lifecycle(t: Target) -> Any:
    g = t.group("life")
    m, gen = joined(t, g)
    out: dict[str, Any] = {"gen": gen, "hb": heartbeat(t, g, m, gen), "stable": describe(t, g)}
    L = LeaveGroupRequest.MemberIdentity
    r = t.raw(LeaveGroupRequest(group_id=g, members=[L(member_id=m)]), 3)
    out["leave"] = [error_name(r.error_code), [error_name(x.error_code) for x in r.members]]
    out["after"] = describe(t, g)
    return out


@scenario
def sc_group_unknown_member(t: Target) -> Any:
    g = t.group("unk")
    _m, gen = joined(t, g)
    L = LeaveGroupRequest.MemberIdentity
    lv = t.raw(LeaveGroupRequest(group_id=g, members=[L(member_id="nobody")]), 3)
    return {
        "heartbeat": heartbeat(t, g, "nobody", gen),
        "join_with_unknown_id": error_name(join(t, g, "nobody").error_code),
        "leave": [error_name(lv.error_code), [error_name(x.error_code) for x in lv.members]],
    }


@scenario
def sc_group_illegal_generation(t: Target) -> Any:
    g = t.group("gen")
    m, gen = joined(t, g)
    A = SyncGroupRequest.SyncGroupRequestAssignment
    s = t.raw(SyncGroupRequest(group_id=g, generation_id=gen + 5, member_id=m, protocol_type="consumer",
                               protocol_name="range", assignments=[A(member_id=m, assignment=b"")]), 5)
    return {"heartbeat": heartbeat(t, g, m, gen + 5), "sync": error_name(s.error_code)}


@scenario
def sc_group_unknown_group(t: Target) -> Any:
    g = t.group("nogroup")
    return {
        "heartbeat": heartbeat(t, g, "m", 1),
        "describe_v5": describe(t, g),
        "delete": error_name(t.raw(DeleteGroupsRequest(groups_names=[g]), 2).results[0].error_code),
    }


@scenario
def sc_group_rebalance_in_progress(t: Target) -> Any:
    g = t.group("reb")
    m1, gen = joined(t, g)
    with RawConn(t.port) as c2:
        r = join(t, g)  # member 2 gets its id
        corr = c2.send(join_req(g, r.member_id), JOIN_V)  # blocks until member 1 rejoins
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:  # until the coordinator has seen the join
            if describe(t, g)["state"] == "PreparingRebalance":
                break
            time.sleep(0.02)
        hb = heartbeat(t, g, m1, gen)
        state = describe(t, g)["state"]
        r1 = join(t, g, m1)
        r2 = c2.recv(JoinGroupResponse, JOIN_V, corr)
    return {
        "heartbeat": hb,
        "state": state,
        "rejoin": [error_name(r1.error_code), r1.generation_id, len(r1.members)],
        "joiner": [error_name(r2.error_code), r2.generation_id, len(r2.members)],
    }


@scenario
def sc_group_static_member_fencing(t: Target) -> Any:
    g = t.group("static")
    m1, gen = joined(t, g, instance="inst-1")
    r = join(t, g, instance="inst-1")  # the same instance id, new process: replaces m1
    return {
        "replacement": error_name(r.error_code),
        "new_member_id": r.member_id != m1,
        "old_heartbeat": heartbeat(t, g, m1, gen, instance="inst-1"),
    }


@scenario
def sc_group_join_validation(t: Target) -> Any:
    g = t.group("val")
    joined(t, g)
    return {
        "empty_group_id": error_name(join(t, "").error_code),
        "session_too_small": error_name(join(t, t.group("st"), session_ms=1).error_code),
        "session_too_large": error_name(join(t, t.group("sl"), session_ms=10_000_000).error_code),
        "inconsistent_protocol": error_name(join(t, g, ptype="connect").error_code),
    }


@scenario
def sc_group_list_and_delete(t: Target) -> Any:
    g_active, g_empty = t.group("act"), t.group("emp")
    joined(t, g_active)
    P = OffsetCommitRequest.OffsetCommitRequestTopic.OffsetCommitRequestPartition
    topic = t.create(t.topic("grp"))
    t.raw(OffsetCommitRequest(group_id=g_empty, topics=[OffsetCommitRequest.OffsetCommitRequestTopic(name=topic, partitions=[P(partition_index=0, committed_offset=0)])]), 8)
    listed = {x.group_id: [x.protocol_type, x.group_state] for x in t.raw(ListGroupsRequest(), 4).groups if x.group_id in (g_active, g_empty)}
    deleted = {error_name(x.error_code) for x in t.raw(DeleteGroupsRequest(groups_names=[g_active]), 2).results}
    deleted_empty = [error_name(x.error_code) for x in t.raw(DeleteGroupsRequest(groups_names=[g_empty]), 2).results]
    return {
        "listed": [listed.get(g_active), listed.get(g_empty)],
        "delete_active": sorted(deleted),
        "delete_empty": deleted_empty,
        "empty_after": describe(t, g_empty)["state"],
    }


@scenario
def sc_group_heartbeat_versions(t: Target) -> Any:
    g = t.group("hbv")
    m, gen = joined(t, g)
    out = {}
    for v in (0, 3, 4):
        r = t.raw(HeartbeatRequest(group_id=g, generation_id=gen, member_id=m), v)
        assert isinstance(r, HeartbeatResponse)
        out[str(v)] = error_name(r.error_code)
    return out
