"""Online migration between the classic and the consumer group protocol (issue 16),
both coordinators driven by a ManualClock (no sockets, no sleeps): a non-empty
classic group is upgraded by the first ConsumerGroupHeartbeat, its classic
members keep their partitions and are reconciled through JoinGroup/SyncGroup/
Heartbeat (REBALANCE_IN_PROGRESS), a partition is never held by two members, a
second coordinator continues from the metastore, and the group goes back to
classic when its last consumer-protocol member leaves. Kafka 4.x's rules:
``group.consumer.migration.policy``, the embedded protocol type, epochs."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from agent.clock import ManualClock
from agent.groups import GroupConfig, GroupCoordinator, GroupState, JoinRequest, JoinResult
from agent.groups.consumer import ConsumerGroupConfig, ConsumerGroupCoordinator, Heartbeat
from agent.groups.consumer.migration import MigrationPolicy
from kafka_protocol.errors import ErrorCode as E
from kafka_protocol.messages import ConsumerProtocolAssignment, ConsumerProtocolSubscription
from metastore import Metastore, open_metastore

A = ConsumerProtocolAssignment


def sub(*topics: str, owned: list[int] | None = None) -> bytes:
    parts = [ConsumerProtocolSubscription.TopicPartition("a", owned)] if owned else []
    return b"\x00\x01" + ConsumerProtocolSubscription(topics=list(topics), owned_partitions=parts).encode(1)


def assignment(ps: list[int]) -> bytes:
    return b"\x00\x01" + A(assigned_partitions=[A.TopicPartition("a", ps)]).encode(1)


def parts(data: bytes) -> set[int]:
    if not data:
        return set()
    decoded = A.decode(memoryview(data)[2:], int.from_bytes(data[:2], "big"))
    return {p for tp in decoded.assigned_partitions for p in tp.partitions}


@pytest.fixture
async def meta(tmp_path: Path) -> AsyncIterator[Metastore]:
    ms = await open_metastore(f"sqlite:///{tmp_path / 'meta.db'}")
    await ms.create_topic("a", 6)
    yield ms
    await ms.close()


class Pair:
    """The two coordinators of one agent, routed like the handlers route."""

    def __init__(self, meta: Metastore, clock: ManualClock, policy: MigrationPolicy = MigrationPolicy.BIDIRECTIONAL) -> None:
        self.clock = clock
        self.classic = GroupCoordinator(meta, clock, GroupConfig(initial_rebalance_delay_ms=100, min_session_timeout_ms=1000))
        cfg = ConsumerGroupConfig(session_timeout_ms=10_000, heartbeat_interval_ms=1000, migration_policy=policy)
        self.consumer = ConsumerGroupCoordinator(meta, clock, meta.list_topics, cfg, classic=self.classic)

    async def join(self, req: JoinRequest) -> JoinResult:
        res = await self.consumer.classic_join(req)
        return res if res is not None else await self.classic.join(req)

    async def heartbeat(self, member_id: str, generation: int) -> int:
        res = await self.consumer.classic_heartbeat("g", generation, member_id, None)
        return res if res is not None else await self.classic.heartbeat("g", generation, member_id, None)

    async def sync(self, member_id: str, generation: int, assignments: dict[str, bytes] | None = None) -> tuple[int, set[int]]:
        res = await self.consumer.classic_sync("g", generation, member_id, None, "consumer", "range")
        if res is None:
            res = await self.classic.sync("g", generation, member_id, None, assignments or {}, "consumer", "range")
        return res.error, parts(res.assignment)

    def run_due(self, seconds: float) -> None:
        self.clock.advance(seconds)
        self.classic.timers.run_due()
        self.consumer.timers.run_due()

    async def close(self) -> None:
        await self.consumer.close()
        await self.classic.close()


def join_req(member_id: str, owned: list[int] | None = None, protocol_type: str = "consumer", client: str = "") -> JoinRequest:
    return JoinRequest("g", member_id, None, client or member_id, "/127.0.0.1", 10_000, 20_000, protocol_type,
                       [("range", sub("a", owned=owned))], require_known_member_id=False)  # fmt: skip


async def classic_group(pair: Pair) -> tuple[int, str, str]:
    """A Stable classic group: k1 owns a0-a2, k2 a3-a5; its generation and the two member ids."""
    t1 = asyncio.ensure_future(pair.join(join_req("", client="k1")))
    t2 = asyncio.ensure_future(pair.join(join_req("", client="k2")))
    deadline = asyncio.get_running_loop().time() + 10
    while not (t1.done() and t2.done()):  # the metastore runs on aiosqlite's thread
        assert asyncio.get_running_loop().time() < deadline, "classic group did not form"
        await asyncio.sleep(0.001)
        g = pair.classic.group_state("g")
        if g is not None and len(g.members) == 2:  # both in: let the initial delay pass
            pair.run_due(0.1)
    r1, r2 = t1.result(), t2.result()
    assert r1.error == r2.error == E.NONE and r1.generation == r2.generation
    k1, k2 = r1.member_id, r2.member_id
    leader, follower = (k1, k2) if r1.leader_id == k1 else (k2, k1)
    f = asyncio.ensure_future(pair.sync(follower, r1.generation))
    await asyncio.sleep(0)
    plan = {k1: assignment([0, 1, 2]), k2: assignment([3, 4, 5])}
    assert await pair.sync(leader, r1.generation, plan) == (E.NONE, {0, 1, 2} if leader == k1 else {3, 4, 5})
    assert (await f)[0] == E.NONE
    return r1.generation, k1, k2


class Consumer:
    def __init__(self, pair: Pair, member_id: str) -> None:
        self.pair, self.member_id, self.epoch = pair, member_id, 0
        self.owned: dict[uuid.UUID, set[int]] = {}

    async def beat(self) -> int:
        join = self.epoch == 0
        res = await self.pair.consumer.heartbeat(Heartbeat(
            "g", self.member_id, self.epoch, rebalance_timeout_ms=20_000 if join else -1,
            subscribed_topic_names=["a"] if join else None, owned=None if join else self.owned,
        ))  # fmt: skip
        if res.error == E.NONE:
            self.epoch = res.member_epoch
            if res.assignment is not None:
                self.owned = {t: set(ps) for t, ps in res.assignment.items()}
        return res.error

    def parts(self) -> set[int]:
        return {p for ps in self.owned.values() for p in ps}


async def test_upgrade_reconcile_takeover_and_downgrade(meta: Metastore) -> None:
    pair = Pair(meta, ManualClock())
    gen, k1, k2 = await classic_group(pair)
    owned = {k1: {0, 1, 2}, k2: {3, 4, 5}}
    gens = {k1: gen, k2: gen}
    c1 = Consumer(pair, "c1")
    assert await c1.beat() == E.NONE  # the upgrade: c1 joins, everything is still held
    assert c1.parts() == set() and pair.classic.group_state("g") is None
    g = await pair.consumer.group("g")
    assert g is not None and g.group_epoch == gen + 1 and {m.member_id for m in g.members.values() if m.classic} == {k1, k2}
    stored = await meta.load_consumer_group("g")
    assert stored is not None and len(stored.members) == 3
    old = await meta.load_group("g")
    assert old is not None and old.members == []

    def disjoint() -> None:
        everyone = [owned[k1], owned[k2], c1.parts()]
        assert sum(len(x) for x in everyone) == len(set().union(*everyone)), everyone

    # Classic members learn of the rebalance from Heartbeat, rejoin (eager: owning
    # nothing), sync their new assignment; c1 picks up what they released.
    for _ in range(4):
        for k in (k1, k2):
            err = await pair.heartbeat(k, gens[k])
            assert err in (E.NONE, E.REBALANCE_IN_PROGRESS)
            if err == E.REBALANCE_IN_PROGRESS:
                owned[k] = set()
                r = await pair.join(join_req(k))
                assert r.error == E.NONE and r.leader_id == "" and r.protocol_name == "range"
                gens[k] = r.generation
                err, got = await pair.sync(k, r.generation)
                assert err == E.NONE
                owned[k] = got
            disjoint()
        assert await c1.beat() == E.NONE
        disjoint()
    assert len(owned[k1]) == len(owned[k2]) == len(c1.parts()) == 2
    assert await pair.consumer.validate_commit("g", k1, gens[k1], 8) == E.NONE
    assert await pair.consumer.validate_commit("g", k1, gens[k1] - 1, 8) == E.ILLEGAL_GENERATION

    # A second coordinator (failover) continues from the metastore at the same epochs.
    second = Pair(meta, ManualClock())
    assert await second.heartbeat(k1, gens[k1]) == E.NONE
    assert await second.sync(k2, gens[k2]) == (E.NONE, owned[k2])
    await pair.close()
    pair = second
    c1.pair = pair

    # Downgrade: the last consumer-protocol member leaves.
    res = await pair.consumer.heartbeat(Heartbeat("g", "c1", -1))
    assert res.error == E.NONE
    cg = pair.classic.group_state("g")
    assert cg is not None and cg.state is GroupState.PREPARING_REBALANCE and set(cg.members) == {k1, k2}
    assert await pair.consumer.group("g") is None and await meta.load_consumer_group("g") is None
    stored_classic = await meta.load_group("g")
    assert stored_classic is not None and {m.member_id for m in stored_classic.members} == {k1, k2}
    down_gen = cg.generation
    assert await pair.heartbeat(k1, down_gen) == E.REBALANCE_IN_PROGRESS
    t1 = asyncio.ensure_future(pair.join(join_req(k1)))
    t2 = asyncio.ensure_future(pair.join(join_req(k2)))
    r1, r2 = await t1, await t2
    assert r1.error == r2.error == E.NONE and r1.generation == down_gen + 1 and r1.leader_id in (k1, k2)
    await pair.close()


@pytest.mark.parametrize("policy", [MigrationPolicy.DISABLED, MigrationPolicy.DOWNGRADE])
async def test_upgrade_refused_by_policy(meta: Metastore, policy: MigrationPolicy) -> None:
    pair = Pair(meta, ManualClock(), policy)
    await classic_group(pair)
    assert await Consumer(pair, "c1").beat() == E.GROUP_ID_NOT_FOUND
    assert pair.classic.group_state("g") is not None
    await pair.close()


async def test_downgrade_refused_by_policy(meta: Metastore) -> None:
    pair = Pair(meta, ManualClock(), MigrationPolicy.UPGRADE)
    await classic_group(pair)
    c1 = Consumer(pair, "c1")
    assert await c1.beat() == E.NONE
    assert (await pair.consumer.heartbeat(Heartbeat("g", "c1", -1))).error == E.NONE
    g = await pair.consumer.group("g")
    assert g is not None and len(g.members) == 2 and all(m.classic for m in g.members.values())  # stays a consumer group of classic members
    await pair.close()


async def test_classic_member_rules_in_consumer_group(meta: Metastore) -> None:
    pair = Pair(meta, ManualClock())
    gen, k1, k2 = await classic_group(pair)
    assert await Consumer(pair, "c1").beat() == E.NONE
    # wrong protocol type or unsupported protocol: refused; unknown member: UNKNOWN_MEMBER_ID
    assert (await pair.join(join_req("k3", protocol_type="connect"))).error == E.INCONSISTENT_GROUP_PROTOCOL
    assert await pair.heartbeat("ghost", gen) == E.UNKNOWN_MEMBER_ID
    assert await pair.heartbeat(k1, gen - 1) == E.ILLEGAL_GENERATION
    assert (await pair.sync(k1, gen))[0] == E.REBALANCE_IN_PROGRESS  # must rejoin first
    # a consumer-protocol heartbeat naming a classic member is refused
    assert (await pair.consumer.heartbeat(Heartbeat("g", k1, gen))).error == E.UNKNOWN_MEMBER_ID
    # k2 is told to rejoin and never does: fenced after its rebalance timeout (20 s),
    # while k1 (rejoined) and c1 stay.
    assert await pair.heartbeat(k2, gen) == E.REBALANCE_IN_PROGRESS
    c1 = Consumer(pair, "c1")
    c1.epoch = (await pair.consumer.group("g")).members["c1"].member_epoch  # type: ignore[union-attr]
    r = await pair.join(join_req(k1))
    assert r.error == E.NONE and (await pair.sync(k1, r.generation))[0] == E.NONE
    for _ in range(5):
        pair.run_due(5)
        assert await c1.beat() == E.NONE
        assert await pair.heartbeat(k1, r.generation) in (E.NONE, E.REBALANCE_IN_PROGRESS)
    g = await pair.consumer.group("g")
    assert g is not None and k2 not in g.members and k1 in g.members
    # k1 leaves with LeaveGroup; c1 is the only member left
    assert await pair.consumer.classic_leave("g", [(k1, None)]) == (E.NONE, [E.NONE])
    assert set(g.members) == {"c1"}
    await pair.close()


async def test_static_classic_member_replacing_last_consumer_member_downgrades(meta: Metastore) -> None:
    """Kafka's validateOnlineDowngradeWithReplacedMemberId: a classic static member
    restarting in place of the last consumer-protocol static member (same
    group.instance.id) takes its partitions and the group becomes classic at once,
    without a rebalance."""
    pair = Pair(meta, ManualClock())
    gen, k1, k2 = await classic_group(pair)
    assert await pair.consumer.classic_leave("g", [(k2, None)]) is None  # still classic: the classic coordinator's
    assert await pair.classic.leave("g", [(k2, None)]) == (E.NONE, [E.NONE])
    res = await pair.consumer.heartbeat(Heartbeat("g", "c1", 0, instance_id="i1", rebalance_timeout_ms=20_000,
                                                  subscribed_topic_names=["a"]))  # fmt: skip
    assert res.error == E.NONE
    g = await pair.consumer.group("g")
    assert g is not None and set(g.members) == {k1, "c1"}
    # k1 rejoins (eager) so that c1 gets its share
    assert await pair.heartbeat(k1, gen) == E.REBALANCE_IN_PROGRESS
    r = await pair.join(join_req(k1))
    assert (await pair.sync(k1, r.generation))[0] == E.NONE
    owned: dict[uuid.UUID, set[int]] = {}
    for _ in range(3):
        res = await pair.consumer.heartbeat(Heartbeat("g", "c1", res.member_epoch, owned=owned))
        owned = res.assignment if res.assignment is not None else owned
    held = {p for ps in owned.values() for p in ps}
    assert held
    # c1's process is replaced by a classic one with the same instance id
    req = JoinRequest("g", "", "i1", "c1b", "/127.0.0.1", 10_000, 20_000, "consumer", [("range", sub("a"))])
    r = await pair.join(req)
    assert r.error == E.NONE
    cg = pair.classic.group_state("g")
    assert cg is not None and cg.state is GroupState.STABLE and cg.static_members["i1"] == r.member_id
    assert await pair.consumer.group("g") is None and await meta.load_consumer_group("g") is None
    assert await pair.sync(r.member_id, r.generation) == (E.NONE, held)
    await pair.close()


async def test_downgrade_write_retried_when_the_metastore_fails(meta: Metastore, monkeypatch: pytest.MonkeyPatch) -> None:
    """The downgrade's one transaction fails once (metastore unreachable): it is
    retried, and meanwhile the stale consumer row is never loaded back."""
    from metastore import MetastoreError

    pair = Pair(meta, ManualClock())
    await classic_group(pair)
    assert await Consumer(pair, "c1").beat() == E.NONE
    real = meta.switch_group_protocol
    calls = []

    async def flaky(*args: object) -> None:
        calls.append(args)
        if len(calls) == 1:
            raise MetastoreError("connection refused")
        await real(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(meta, "switch_group_protocol", flaky)
    assert (await pair.consumer.heartbeat(Heartbeat("g", "c1", -1))).error == E.NONE
    assert await pair.consumer.group("g") is None  # not resurrected from the consumer row
    deadline = asyncio.get_running_loop().time() + 20
    while await meta.load_consumer_group("g") is not None:
        assert asyncio.get_running_loop().time() < deadline, "the downgrade was never written"
        await asyncio.sleep(0.05)
    stored = await meta.load_group("g")
    assert len(calls) >= 2 and stored is not None and len(stored.members) == 2
    await pair.close()


async def test_upgrade_during_a_classic_rebalance(meta: Metastore) -> None:
    """The upgrade comes while the classic group waits in its join barrier: the
    waiting JoinGroup gets REBALANCE_IN_PROGRESS and the member's retry joins the
    consumer group (Kafka's convertToConsumerGroup completes the join futures)."""
    pair = Pair(meta, ManualClock())
    gen, k1, k2 = await classic_group(pair)
    waiting = asyncio.ensure_future(pair.join(join_req(k2, owned=[3, 4, 5])))  # new metadata: PreparingRebalance
    deadline = asyncio.get_running_loop().time() + 10
    while (cg := pair.classic.group_state("g")) is None or cg.state is not GroupState.PREPARING_REBALANCE:
        assert asyncio.get_running_loop().time() < deadline
        await asyncio.sleep(0.001)
    assert await Consumer(pair, "c1").beat() == E.NONE
    assert (await waiting).error == E.REBALANCE_IN_PROGRESS
    r = await pair.join(join_req(k2))
    assert r.error == E.NONE and r.generation == gen + 1
    g = await pair.consumer.group("g")
    assert g is not None and g.members[k2].classic and g.members[k1].classic and not g.members["c1"].classic
    await pair.close()
