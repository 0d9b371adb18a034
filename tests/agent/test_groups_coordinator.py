"""The group coordinator's state machine, driven by a ManualClock: no sockets, no sleeps.

Timers only fire when a test moves the clock and calls ``timers.run_due()``.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from agent.clock import ManualClock
from agent.groups import GroupConfig, GroupCoordinator, GroupState, JoinRequest, JoinResult
from kafka_protocol.errors import ErrorCode as E
from kafka_protocol.messages import ConsumerProtocolSubscription
from metastore import Metastore, open_metastore
from metastore.types import GroupOffset

DELAY_MS = 100


def subscription(*topics: str) -> bytes:
    return b"\x00\x01" + ConsumerProtocolSubscription(topics=list(topics)).encode(1)


@pytest.fixture
async def meta(tmp_path: Path) -> AsyncIterator[Metastore]:
    ms = await open_metastore(f"sqlite:///{tmp_path / 'meta.db'}")
    yield ms
    await ms.close()


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
async def coord(meta: Metastore, clock: ManualClock) -> AsyncIterator[GroupCoordinator]:
    c = GroupCoordinator(meta, clock, GroupConfig(initial_rebalance_delay_ms=DELAY_MS, min_session_timeout_ms=1000))
    yield c
    await c.close()


def req(member_id: str = "", *, group: str = "g", instance: str | None = None, session_ms: int = 10_000,
        rebalance_ms: int = 30_000, protocols: list[tuple[str, bytes]] | None = None, client: str = "c",
        protocol_type: str = "consumer") -> JoinRequest:
    return JoinRequest(group, member_id, instance, client, "/127.0.0.1", session_ms, rebalance_ms, protocol_type,
                       [("range", subscription("t"))] if protocols is None else protocols)


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


async def until(cond: Any, limit_s: float = 5.0) -> None:
    """Poll a condition (a metastore load runs on aiosqlite's thread) with a deadline."""
    deadline = asyncio.get_running_loop().time() + limit_s
    while not cond():
        assert asyncio.get_running_loop().time() < deadline, "condition not reached"
        await asyncio.sleep(0.001)


def advance(coord: GroupCoordinator, clock: ManualClock, seconds: float) -> int:
    clock.advance(seconds)
    return coord.timers.run_due()


async def run_delay(coord: GroupCoordinator, clock: ManualClock, tasks: list[Any]) -> None:
    """Move the clock through the initial delay (extended once per wave of arrivals)."""
    for _ in range(5):
        advance(coord, clock, DELAY_MS / 1000)
        await settle()
    await until(lambda: all(t.done() for t in tasks))  # answered once the generation is stored


async def new_member(coord: GroupCoordinator, **kw: Any) -> str:
    """The KIP-394 round trip: the first join only hands out a member id."""
    first = await coord.join(req(**kw))
    assert first.error == E.MEMBER_ID_REQUIRED and first.member_id
    return first.member_id


async def form_group(coord: GroupCoordinator, clock: ManualClock, n: int) -> tuple[list[str], list[JoinResult]]:
    ids = [await new_member(coord, client=f"c{i}") for i in range(n)]
    tasks = [asyncio.ensure_future(coord.join(req(mid, client=f"c{i}"))) for i, mid in enumerate(ids)]
    await settle()
    assert not any(t.done() for t in tasks)  # the initial delay holds the barrier
    await run_delay(coord, clock, tasks)
    results = [t.result() for t in tasks]
    return ids, results


async def sync_all(coord: GroupCoordinator, ids: list[str], generation: int, leader: str) -> dict[str, bytes]:
    followers = [asyncio.ensure_future(coord.sync("g", generation, m, None, {})) for m in ids if m != leader]
    await settle()
    assert not any(f.done() for f in followers)  # they wait for the leader
    plan = {m: f"assignment-{m}".encode() for m in ids}
    lead = await coord.sync("g", generation, leader, None, plan)
    out = {leader: lead.assignment}
    for m, f in zip([m for m in ids if m != leader], followers, strict=True):
        res = await f
        assert res.error == E.NONE
        out[m] = res.assignment
    return out


async def test_join_sync_heartbeat_and_persist(coord: GroupCoordinator, clock: ManualClock, meta: Metastore) -> None:
    ids, results = await form_group(coord, clock, 3)
    assert {r.error for r in results} == {E.NONE}
    assert {r.generation for r in results} == {1}
    leader = results[0].leader_id
    assert leader == ids[0]
    by_id = {r.member_id: r for r in results}
    assert sorted(m for m, _, _ in by_id[leader].members) == sorted(ids)
    assert all(by_id[m].members == [] for m in ids if m != leader)
    assert by_id[leader].protocol_name == "range"
    g = coord.group_state("g")
    assert g is not None and g.state is GroupState.COMPLETING_REBALANCE
    assert await coord.heartbeat("g", 1, ids[1], None) == E.NONE

    assignments = await sync_all(coord, ids, 1, leader)
    assert assignments == {m: f"assignment-{m}".encode() for m in ids}
    assert g.state is GroupState.STABLE
    # Stable: a late sync gets the stored assignment at once.
    assert (await coord.sync("g", 1, ids[2], None, {})).assignment == f"assignment-{ids[2]}".encode()
    assert await coord.heartbeat("g", 1, ids[1], None) == E.NONE
    assert await coord.heartbeat("g", 0, ids[1], None) == E.ILLEGAL_GENERATION
    assert await coord.heartbeat("g", 1, "nobody", None) == E.UNKNOWN_MEMBER_ID
    assert await coord.heartbeat("nogroup", 1, ids[1], None) == E.UNKNOWN_MEMBER_ID

    await coord.flush()
    rec = await meta.load_group("g")
    assert rec is not None and rec.state == "Stable" and rec.generation == 1 and rec.leader_id == leader
    assert {m.member_id: m.assignment for m in rec.members} == assignments
    assert rec.protocol == "range" and rec.protocol_type == "consumer"


async def test_leave_triggers_rebalance_and_generation_fencing(coord: GroupCoordinator, clock: ManualClock) -> None:
    ids, results = await form_group(coord, clock, 3)
    await sync_all(coord, ids, 1, results[0].leader_id)
    top, errors = await coord.leave("g", [(ids[2], None), ("ghost", None)])
    assert (top, errors) == (E.NONE, [E.NONE, E.UNKNOWN_MEMBER_ID])
    g = coord.group_state("g")
    assert g is not None and g.state is GroupState.PREPARING_REBALANCE
    # The survivors learn it from their heartbeats; commits are still allowed.
    assert await coord.heartbeat("g", 1, ids[0], None) == E.REBALANCE_IN_PROGRESS
    off = [GroupOffset(uuid.uuid4(), 0, 5)]
    assert await coord.commit_offsets("g", 1, ids[0], None, off) == E.NONE
    assert await coord.commit_offsets("g", 1, ids[2], None, off) == E.UNKNOWN_MEMBER_ID
    assert (await coord.sync("g", 1, ids[0], None, {})).error == E.REBALANCE_IN_PROGRESS

    j0 = asyncio.ensure_future(coord.join(req(ids[0])))
    await settle()
    assert not j0.done()
    j1 = await coord.join(req(ids[1]))  # the last one completes the barrier, no timer needed
    r0 = await j0
    assert (r0.generation, j1.generation) == (2, 2)
    assert g.state is GroupState.COMPLETING_REBALANCE
    # Generation 2 is waiting for the leader's assignment.
    assert await coord.commit_offsets("g", 2, ids[0], None, off) == E.REBALANCE_IN_PROGRESS
    assert await coord.commit_offsets("g", 1, ids[0], None, off) == E.ILLEGAL_GENERATION
    await sync_all(coord, ids[:2], 2, r0.leader_id)
    assert await coord.commit_offsets("g", 2, ids[1], None, off) == E.NONE
    assert await coord.commit_offsets("g", -1, "", None, off) == E.UNKNOWN_MEMBER_ID  # not empty


async def test_rebalance_timeout_drops_members_that_do_not_rejoin(coord: GroupCoordinator, clock: ManualClock) -> None:
    ids, results = await form_group(coord, clock, 2)
    await sync_all(coord, ids, 1, results[0].leader_id)
    # A third member arrives; only one of the old members rejoins.
    newcomer = await new_member(coord, client="late")
    t_new = asyncio.ensure_future(coord.join(req(newcomer, client="late")))
    t_old = asyncio.ensure_future(coord.join(req(ids[0])))
    await settle()
    assert not t_new.done() and not t_old.done()
    # ids[1] keeps heartbeating but never rejoins: the rebalance timeout (30 s) drops it.
    for _ in range(3):
        advance(coord, clock, 9)
        assert await coord.heartbeat("g", 1, ids[1], None) == E.REBALANCE_IN_PROGRESS
    advance(coord, clock, 3.5)
    r_new, r_old = await t_new, await t_old
    assert r_new.generation == r_old.generation == 2
    g = coord.group_state("g")
    assert g is not None and set(g.members) == {ids[0], newcomer}
    assert await coord.heartbeat("g", 1, ids[1], None) == E.UNKNOWN_MEMBER_ID


async def test_session_expiry_removes_member(coord: GroupCoordinator, clock: ManualClock) -> None:
    ids, results = await form_group(coord, clock, 2)
    await sync_all(coord, ids, 1, results[0].leader_id)
    g = coord.group_state("g")
    assert g is not None
    for _ in range(4):  # ids[0] heartbeats every 4 s, ids[1] is silent
        advance(coord, clock, 4)
        await coord.heartbeat("g", 1, ids[0], None)
    assert ids[1] not in g.members and g.state is GroupState.PREPARING_REBALANCE
    res = await coord.join(req(ids[0]))  # alone now: completes at once
    assert res.error == E.NONE and res.generation == 2 and res.leader_id == ids[0]


async def test_initial_delay_extends_while_members_arrive(coord: GroupCoordinator, clock: ManualClock) -> None:
    a = await new_member(coord, client="a")
    ta = asyncio.ensure_future(coord.join(req(a)))
    await settle()
    advance(coord, clock, 0.09)
    b = await new_member(coord, client="b")
    tb = asyncio.ensure_future(coord.join(req(b)))
    await settle()
    advance(coord, clock, 0.011)  # the first delay ends, but b arrived during it
    assert not ta.done()
    advance(coord, clock, 0.1)
    await settle()
    assert (await ta).generation == (await tb).generation == 1


async def test_join_validation(coord: GroupCoordinator, clock: ManualClock) -> None:
    assert (await coord.join(req(group=""))).error == E.INVALID_GROUP_ID
    assert (await coord.join(req(session_ms=10))).error == E.INVALID_SESSION_TIMEOUT
    assert (await coord.join(req(protocols=[]))).error == E.INCONSISTENT_GROUP_PROTOCOL
    assert (await coord.join(req("unknown-member"))).error == E.UNKNOWN_MEMBER_ID
    await form_group(coord, clock, 1)
    # A member speaking none of the group's protocols, or another protocol type.
    assert (await coord.join(req(protocols=[("sticky", b"")]))).error == E.INCONSISTENT_GROUP_PROTOCOL
    assert (await coord.join(req(protocol_type="connect"))).error == E.INCONSISTENT_GROUP_PROTOCOL


async def test_protocol_vote(coord: GroupCoordinator, clock: ManualClock) -> None:
    prefs = [[("range", b"1"), ("roundrobin", b"2")], [("roundrobin", b"3"), ("range", b"4")],
             [("roundrobin", b"5"), ("sticky", b"6"), ("range", b"7")]]
    ids = [await new_member(coord, client=f"c{i}", protocols=p) for i, p in enumerate(prefs)]
    tasks = [asyncio.ensure_future(coord.join(req(m, protocols=p))) for m, p in zip(ids, prefs, strict=True)]
    await settle()
    await run_delay(coord, clock, tasks)
    results = [await t for t in tasks]
    assert {r.protocol_name for r in results} == {"roundrobin"}
    leader = next(r for r in results if r.members)
    assert sorted(meta for _, _, meta in leader.members) == [b"2", b"3", b"5"]


async def test_static_member_rejoin_without_rebalance(coord: GroupCoordinator, clock: ManualClock) -> None:
    # Static members get their id at once (no MEMBER_ID_REQUIRED).
    ta = asyncio.ensure_future(coord.join(req(instance="a")))
    tb = asyncio.ensure_future(coord.join(req(instance="b")))
    await until(lambda: (g := coord.group_state("g")) is not None and len(g.members) == 2)
    await run_delay(coord, clock, [ta, tb])
    ra, rb = await ta, await tb
    assert ra.error == rb.error == E.NONE and ra.member_id.startswith("a-")
    await sync_all(coord, [ra.member_id, rb.member_id], 1, ra.leader_id)
    follower = rb if ra.leader_id == ra.member_id else ra
    instance = "b" if follower is rb else "a"
    # The follower restarts: a new member id, same generation, same assignment, no rebalance.
    again = await coord.join(req(instance=instance))
    assert again.error == E.NONE and again.generation == 1 and again.member_id != follower.member_id
    g = coord.group_state("g")
    assert g is not None and g.state is GroupState.STABLE
    synced = await coord.sync("g", 1, again.member_id, instance, {})
    assert synced.assignment == f"assignment-{follower.member_id}".encode()
    # The old incarnation is fenced.
    assert await coord.heartbeat("g", 1, follower.member_id, instance) == E.FENCED_INSTANCE_ID
    _, errs = await coord.leave("g", [(follower.member_id, instance)])
    assert errs == [E.FENCED_INSTANCE_ID]
    _, errs = await coord.leave("g", [("", instance)])
    assert errs == [E.NONE] and g.state is GroupState.PREPARING_REBALANCE


async def test_standalone_commits_delete_and_offset_delete(coord: GroupCoordinator, clock: ManualClock,
                                                           meta: Metastore) -> None:
    t = (await meta.create_topic("t", 2)).topic
    other = (await meta.create_topic("other", 1)).topic
    assert t is not None and other is not None
    offs = [GroupOffset(t.id, 0, 7), GroupOffset(other.id, 0, 3)]
    assert await coord.commit_offsets("simple", -1, "", None, offs) == E.NONE
    assert await coord.commit_offsets("unknown", 3, "m", None, offs) == E.ILLEGAL_GENERATION
    assert {(o.partition, o.offset) for o in await coord.fetch_offsets("simple")} == {(0, 7), (0, 3)}
    assert [x.group_id for x in await coord.list_groups()] == ["simple"]

    # A consumer group subscribed to "t": its offsets of "t" stay, those of "other" may go.
    ids, _ = await form_group(coord, clock, 1)
    await sync_all(coord, ids, 1, ids[0])
    assert await coord.commit_offsets("g", 1, ids[0], None, offs) == E.NONE
    top, errs = await coord.delete_offsets("g", [("t", t.id, 0), ("other", other.id, 0)])
    assert (top, errs) == (E.NONE, [E.GROUP_SUBSCRIBED_TO_TOPIC, E.NONE])
    assert [o.topic_id for o in await coord.fetch_offsets("g")] == [t.id]
    assert await coord.delete_group("g") == E.NON_EMPTY_GROUP
    assert (await coord.delete_offsets("nope", []))[0] == E.GROUP_ID_NOT_FOUND

    assert await coord.delete_group("simple") == E.NONE
    assert await coord.fetch_offsets("simple") == []
    assert await coord.delete_group("simple") == E.GROUP_ID_NOT_FOUND
    desc = await coord.describe("g")
    assert desc is not None and desc.state == "Stable" and desc.members[0].assignment == f"assignment-{ids[0]}".encode()
    assert await coord.describe("simple") is None


async def test_takeover_by_another_coordinator(coord: GroupCoordinator, clock: ManualClock, meta: Metastore) -> None:
    ids, results = await form_group(coord, clock, 2)
    assignments = await sync_all(coord, ids, 1, results[0].leader_id)
    await coord.flush()
    # A second coordinator on the same metastore loads the group on first access.
    other = GroupCoordinator(meta, clock, GroupConfig(min_session_timeout_ms=1000))
    try:
        assert await other.heartbeat("g", 1, ids[0], None) == E.NONE
        assert (await other.sync("g", 1, ids[1], None, {})).assignment == assignments[ids[1]]
        d = await other.describe("g")
        assert d is not None and d.state == "Stable" and d.protocol == "range"
        # Members that never talk to the new coordinator expire from its clock.
        clock.advance(11)
        other.timers.run_due()
        g = other.group_state("g")
        assert g is not None and not g.members
    finally:
        await other.close()


async def test_concurrent_first_access_makes_one_group(coord: GroupCoordinator) -> None:
    # A describe (load, nothing found) racing with joins (load, then create) must
    # not leave two copies of the group with members split between them.
    for _ in range(5):
        results = await asyncio.gather(coord.describe("race"), *(coord.join(req(group="race")) for _ in range(4)),
                                       coord.describe("race"), coord.join(req(group="race")))
        g = coord.group_state("race")
        assert g is not None
        joined = [r.member_id for r in results if isinstance(r, JoinResult)]
        assert g.pending_members >= set(joined)
