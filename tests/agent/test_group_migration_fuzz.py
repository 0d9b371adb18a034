"""Fuzz of one group spoken to in both protocols at once (online migration, issue 16).

Random interleavings, through the real handlers on a Broker over SQLite with a
ManualClock, of: well-behaved classic members (JoinGroup with MEMBER_ID_REQUIRED,
SyncGroup with the leader's assignment, Heartbeat, LeaveGroup), well-behaved
consumer-protocol members (ConsumerGroupHeartbeat join/beat/leave), garbage
classic requests (unknown and huge member ids, wrong generations, other protocol
types and names, random subscription bytes, bad session timeouts, instance ids),
OffsetCommits with random members and generations, and clock jumps past session
and rebalance timeouts. So the group is upgraded, downgraded and upgraded again
at random moments. No handler may raise; every answer (the deferred ones too)
carries a Kafka error code from the allowed set; after every step no partition is
in two members' current assignments of a consumer group.
"""

from __future__ import annotations

import asyncio
import tempfile
import uuid
from types import SimpleNamespace
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent.broker import Broker
from agent.clock import ManualClock
from agent.config import AgentConfig
from agent.connection import Deferred
from agent.handlers.consumer_group_heartbeat import handle as cg_heartbeat
from agent.handlers.heartbeat import handle as heartbeat
from agent.handlers.join_group import handle as join
from agent.handlers.leave_group import handle as leave
from agent.handlers.offset_commit import handle as commit
from agent.handlers.sync_group import handle as sync
from kafka_protocol.errors import ErrorCode as E
from kafka_protocol.framing import RequestHeader
from kafka_protocol.messages import (
    ConsumerGroupHeartbeatRequest,
    ConsumerProtocolAssignment,
    ConsumerProtocolSubscription,
    HeartbeatRequest,
    JoinGroupRequest,
    LeaveGroupRequest,
    OffsetCommitRequest,
    SyncGroupRequest,
)
from metastore import open_metastore
from objectstore import open_object_store
from tests.agent.test_consumer_groups_fuzz import assert_no_partition_in_two_members

HB = ConsumerGroupHeartbeatRequest
ALLOWED = {
    E.NONE, E.UNKNOWN_MEMBER_ID, E.ILLEGAL_GENERATION, E.REBALANCE_IN_PROGRESS, E.MEMBER_ID_REQUIRED,
    E.INCONSISTENT_GROUP_PROTOCOL, E.INVALID_SESSION_TIMEOUT, E.FENCED_INSTANCE_ID, E.GROUP_MAX_SIZE_REACHED,
    E.INVALID_GROUP_ID, E.COORDINATOR_NOT_AVAILABLE, E.NOT_COORDINATOR, E.GROUP_ID_NOT_FOUND, E.FENCED_MEMBER_EPOCH,
    E.STALE_MEMBER_EPOCH, E.UNSUPPORTED_VERSION, E.INVALID_REQUEST, E.UNRELEASED_INSTANCE_ID,
    E.UNKNOWN_TOPIC_OR_PARTITION,
}  # fmt: skip
API = {"join": (11, 9), "sync": (14, 5), "beat": (12, 4), "leave": (13, 5), "commit": (8, 9), "cg": (68, 1)}


def subscription(*topics: str) -> bytes:
    return b"\x00\x01" + ConsumerProtocolSubscription(topics=list(topics)).encode(1)


def assignment(parts: dict[str, list[int]]) -> bytes:
    tps = [ConsumerProtocolAssignment.TopicPartition(t, ps) for t, ps in parts.items()]
    return b"\x00\x01" + ConsumerProtocolAssignment(assigned_partitions=tps).encode(1)


SUB = subscription("a", "b")
PROTOCOLS = [JoinGroupRequest.JoinGroupRequestProtocol(name=n, metadata=SUB) for n in ("range", "cooperative-sticky")]
MEMBER_IDS = ["", "k1", "ghost", "x" * 300, " "]
garbage = st.one_of(
    st.builds(lambda m, st_ms, pt, names, meta, inst: ("join", JoinGroupRequest(
        group_id="g", session_timeout_ms=st_ms, rebalance_timeout_ms=5000, member_id=m, group_instance_id=inst,
        protocol_type=pt, protocols=[JoinGroupRequest.JoinGroupRequestProtocol(name=n, metadata=meta) for n in names])),
        st.sampled_from(MEMBER_IDS), st.sampled_from([0, 6000, 10**9]), st.sampled_from(["consumer", "connect", ""]),
        st.lists(st.sampled_from(["range", "roundrobin", ""]), max_size=2),
        st.one_of(st.just(SUB), st.binary(max_size=40)), st.sampled_from([None, "i1", ""])),
    st.builds(lambda m, gen, pt, pn: ("sync", SyncGroupRequest(
        group_id="g", generation_id=gen, member_id=m, protocol_type=pt, protocol_name=pn,
        assignments=[SyncGroupRequest.SyncGroupRequestAssignment(member_id=m, assignment=b"\x00")])),
        st.sampled_from(MEMBER_IDS), st.integers(-2, 12), st.sampled_from([None, "consumer", "x"]),
        st.sampled_from([None, "range", "nope"])),
    st.builds(lambda m, gen, inst: ("beat", HeartbeatRequest(group_id="g", generation_id=gen, member_id=m,
                                                             group_instance_id=inst)),
              st.sampled_from(MEMBER_IDS), st.integers(-2, 12), st.sampled_from([None, "i1"])),
    st.builds(lambda m, inst: ("leave", LeaveGroupRequest(group_id="g", members=[
        LeaveGroupRequest.MemberIdentity(member_id=m, group_instance_id=inst)])),
        st.sampled_from(MEMBER_IDS), st.sampled_from([None, "i1"])),
    st.builds(lambda m, gen, v: ("commit", OffsetCommitRequest(
        group_id="g", generation_id_or_member_epoch=gen, member_id=m, topics=[OffsetCommitRequest.OffsetCommitRequestTopic(
            name="a", partitions=[OffsetCommitRequest.OffsetCommitRequestTopic.OffsetCommitRequestPartition(
                partition_index=0, committed_offset=1)])]), v),
        st.sampled_from([*MEMBER_IDS, "m1"]), st.integers(-1, 12), st.sampled_from([8, 9])),
)  # fmt: skip
ops = st.lists(
    st.one_of(
        st.tuples(st.just("classic"), st.sampled_from(["k1", "k2"]), st.sampled_from(["join", "join", "sync", "beat", "leave"])),
        st.tuples(st.just("classic"), st.sampled_from(["k1", "k2"]), st.sampled_from(["join", "sync", "beat"])),
        st.tuples(st.just("consumer"), st.sampled_from(["m1", "m2"]), st.sampled_from(["join", "beat", "beat", "leave"])),
        st.tuples(st.just("garbage"), garbage),
        st.tuples(st.just("clock"), st.sampled_from([0.5, 3.0, 7.0, 50.0])),
    ),
    max_size=40,
)


async def _run(sequence: list[Any], db: str) -> dict[str, int]:
    meta = await open_metastore(f"sqlite:///{db}")
    for name, n in (("a", 4), ("b", 2)):
        await meta.create_topic(name, n)
    clock = ManualClock()
    config = AgentConfig(metastore="sqlite:///:memory:", objects="memory://", consumer_group_session_timeout_ms=10_000,
                         group_initial_rebalance_delay_ms=0)  # fmt: skip
    broker = Broker(config, meta, open_object_store("memory://", retry=False), clock=clock)
    broker.start(ticker=False)
    pending: list[tuple[str, str, asyncio.Future[Any]]] = []
    classic: dict[str, dict[str, Any]] = {}  # name -> member_id, generation, leader, members
    consumer: dict[str, tuple[int, dict[uuid.UUID, list[int]]]] = {}

    async def call(kind: str, fn: Any, req: Any, version: int | None = None) -> Any:
        key, v = API[kind]
        ctx = SimpleNamespace(header=RequestHeader(key, version or v, 1, "fuzz"), client_id="fuzz", client_host="127.0.0.1")
        return await fn(broker, ctx, req)

    def error_of(resp: Any) -> list[int]:
        if hasattr(resp, "error_code"):
            return [resp.error_code] + [m.error_code for m in getattr(resp, "members", None) or [] if hasattr(m, "error_code")]
        return [p.error_code for t in resp.topics for p in t.partitions]

    def drain() -> None:
        for item in [x for x in pending if x[2].done()]:
            pending.remove(item)
            kind, name, fut = item
            resp = fut.result()  # a handler that raised fails here
            assert all(e in ALLOWED for e in error_of(resp)), (kind, resp)
            if name and kind == "join":
                st_ = classic.setdefault(name, {})
                if resp.error_code in (E.NONE, E.MEMBER_ID_REQUIRED):
                    st_["member_id"] = resp.member_id
                if resp.error_code == E.NONE:
                    st_.update(generation=resp.generation_id, leader=resp.leader == resp.member_id,
                               members=[m.member_id for m in resp.members])  # fmt: skip
                elif resp.error_code in (E.UNKNOWN_MEMBER_ID, E.ILLEGAL_GENERATION):
                    classic.pop(name, None)

    seen_types = {"mixed": 0, "downgraded": 0}
    was_mixed = False

    def invariant() -> None:
        nonlocal was_mixed
        cg = broker.consumer_groups._groups.get("g")
        if cg is not None and any(m.classic for m in cg.members.values()):
            seen_types["mixed"] += 1
            was_mixed = True
        elif was_mixed and broker.groups.group_state("g") is not None:
            seen_types["downgraded"] += 1
            was_mixed = False
        assert_no_partition_in_two_members(broker)

    async def send(kind: str, name: str, fn: Any, req: Any, version: int | None = None) -> None:
        out = await call(kind, fn, req, version)
        fut: asyncio.Future[Any] = asyncio.ensure_future(out.awaitable) if isinstance(out, Deferred) else asyncio.get_running_loop().create_future()
        if not isinstance(out, Deferred):
            fut.set_result(out)
        pending.append((kind, name, fut))
        await asyncio.sleep(0)

    fns = {"join": join, "sync": sync, "beat": heartbeat, "leave": leave, "commit": commit}
    try:
        for op in sequence:
            if op[0] == "classic":
                name, what = op[1], op[2]
                me = classic.get(name, {})
                mid, gen = me.get("member_id", ""), me.get("generation", -1)
                if what == "join" or not mid:
                    await send("join", name, join, JoinGroupRequest(
                        group_id="g", session_timeout_ms=6000, rebalance_timeout_ms=5000, member_id=mid,
                        protocol_type="consumer", protocols=PROTOCOLS))  # fmt: skip
                elif what == "sync":
                    plan = {}
                    if me.get("leader"):
                        others = me.get("members") or [mid]
                        plan = {m: assignment({"a": [p for p in range(4) if p % len(others) == i]}) for i, m in enumerate(others)}
                    await send("sync", name, sync, SyncGroupRequest(
                        group_id="g", generation_id=gen, member_id=mid, protocol_type="consumer", protocol_name="range",
                        assignments=[SyncGroupRequest.SyncGroupRequestAssignment(member_id=m, assignment=a) for m, a in plan.items()]))  # fmt: skip
                elif what == "beat":
                    await send("beat", name, heartbeat, HeartbeatRequest(group_id="g", generation_id=gen, member_id=mid))
                else:
                    await send("leave", name, leave, LeaveGroupRequest(group_id="g", members=[LeaveGroupRequest.MemberIdentity(member_id=mid)]))
                    classic.pop(name, None)
            elif op[0] == "consumer":
                mid, what = op[1], op[2]
                ep, owned = consumer.get(mid, (0, {}))
                if what == "join" or mid not in consumer:
                    req = HB(group_id="g", member_id=mid, member_epoch=0, rebalance_timeout_ms=5000, subscribed_topic_names=["a", "b"])
                elif what == "leave":
                    req = HB(group_id="g", member_id=mid, member_epoch=-1)
                else:
                    req = HB(group_id="g", member_id=mid, member_epoch=ep,
                             topic_partitions=[HB.TopicPartitions(topic_id=t, partitions=ps) for t, ps in owned.items()])  # fmt: skip
                resp = await call("cg", cg_heartbeat, req)
                assert resp.error_code in ALLOWED, resp
                if resp.error_code == E.NONE and req.member_epoch >= 0:
                    new = owned if resp.assignment is None else {t.topic_id: list(t.partitions) for t in resp.assignment.topic_partitions}
                    consumer[mid] = (resp.member_epoch, new)
                else:
                    consumer.pop(mid, None)
            elif op[0] == "garbage":
                kind, req, *version = op[1]
                await send(kind, "", fns[kind], req, version[0] if version else None)
            else:
                clock.advance(op[1])
                broker.groups.timers.run_due()
                broker.consumer_groups.timers.run_due()
            for _ in range(3):
                await asyncio.sleep(0)
            drain()
            invariant()
        for _ in range(10):  # let every barrier time out
            clock.advance(60)
            broker.groups.timers.run_due()
            broker.consumer_groups.timers.run_due()
            await asyncio.sleep(0.001)
            drain()
            invariant()
    finally:
        await broker.close()
        await asyncio.sleep(0)
        drain()
        for _, _, fut in pending:
            fut.cancel()
        await asyncio.gather(*(f for _, _, f in pending), return_exceptions=True)
        await meta.close()
    return seen_types


def test_mixed_protocol_scenario() -> None:
    """The fuzz's driver on one fixed story: a classic group upgraded by a consumer
    member, its classic member rejoining, then downgraded when that member leaves."""
    seq = [("classic", "k1", "join"), ("classic", "k1", "join"), ("clock", 0.5), ("classic", "k1", "sync"),
           ("consumer", "m1", "join"), ("consumer", "m1", "beat"), ("classic", "k1", "beat"), ("classic", "k1", "join"),
           ("classic", "k1", "sync"), ("consumer", "m1", "beat"), ("consumer", "m1", "leave"), ("classic", "k1", "beat"),
           ("classic", "k1", "join")]  # fmt: skip
    with tempfile.TemporaryDirectory() as d:
        seen = asyncio.run(_run(seq, f"{d}/meta.db"))
    assert seen["mixed"] > 0 and seen["downgraded"] > 0, seen


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops)
def test_mixed_protocol_requests_fuzz(sequence: list[Any]) -> None:
    with tempfile.TemporaryDirectory() as d:
        seen = asyncio.run(_run(sequence, f"{d}/meta.db"))
    MIGRATIONS["mixed"] += seen["mixed"] > 0
    MIGRATIONS["downgraded"] += seen["downgraded"] > 0


MIGRATIONS = {"mixed": 0, "downgraded": 0}  # how many fuzz examples reached each (printed with -s)


def test_fuzz_reached_migrations() -> None:
    print(f"mixed-protocol fuzz: examples with a mixed group {MIGRATIONS['mixed']}, with a downgrade {MIGRATIONS['downgraded']}")
