"""The KIP-848 consumer-group coordinator, driven by a ManualClock (no sockets, no sleeps):
joins and epochs, incremental reconciliation (a partition goes to a new member only
after its previous owner revoked it), assignors, regex subscriptions, static
membership, leave, session and rebalance timeouts, offset-commit epoch checks, and a
takeover by a second coordinator from the metastore at the same epochs."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from agent.clock import ManualClock
from agent.groups.consumer import (
    ConsumerGroupConfig,
    ConsumerGroupCoordinator,
    Heartbeat,
    HeartbeatResult,
)
from agent.groups.consumer.assignors import TopicMeta, range_assign, uniform_assign
from kafka_protocol.errors import ErrorCode as E
from metastore import Metastore, open_metastore

SESSION_MS = 10_000


@pytest.fixture
async def meta(tmp_path: Path) -> AsyncIterator[Metastore]:
    ms = await open_metastore(f"sqlite:///{tmp_path / 'meta.db'}")
    for name, n in (("a", 6), ("b", 2), ("orders-eu", 2), ("orders-us", 2)):
        await ms.create_topic(name, n)
    yield ms
    await ms.close()


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


def make(meta: Metastore, clock: ManualClock) -> ConsumerGroupCoordinator:
    return ConsumerGroupCoordinator(
        meta, clock, meta.list_topics, ConsumerGroupConfig(session_timeout_ms=SESSION_MS, heartbeat_interval_ms=1000)
    )


@pytest.fixture
async def coord(meta: Metastore, clock: ManualClock) -> AsyncIterator[ConsumerGroupCoordinator]:
    c = make(meta, clock)
    yield c
    await c.close()


class Client:
    """A minimal KIP-848 member: holds what it was assigned, revokes what it lost."""

    def __init__(self, coord: ConsumerGroupCoordinator, member_id: str, topics: list[str] | None = None, *,
                 regex: str | None = None, instance: str | None = None, assignor: str | None = None) -> None:
        self.coord, self.member_id, self.topics, self.regex = coord, member_id, topics, regex
        self.instance, self.assignor = instance, assignor
        self.epoch = 0
        self.owned: dict[uuid.UUID, set[int]] = {}
        self.last: HeartbeatResult | None = None

    async def beat(self, *, full: bool = False) -> HeartbeatResult:
        join = self.epoch == 0
        res = await self.coord.heartbeat(Heartbeat(
            "g", self.member_id, self.epoch, instance_id=self.instance,
            rebalance_timeout_ms=30_000 if join else -1,
            subscribed_topic_names=self.topics if join or full else None,
            subscribed_topic_regex=self.regex if join or full else None,
            server_assignor=self.assignor if join else None,
            owned=None if join else {t: set(ps) for t, ps in self.owned.items()},
        ))  # fmt: skip
        self.last = res
        if res.error == E.NONE:
            self.epoch = res.member_epoch
            if res.assignment is not None:
                self.owned = {t: set(ps) for t, ps in res.assignment.items()}
        return res

    def count(self) -> int:
        return sum(len(p) for p in self.owned.values())

    def parts(self) -> set[tuple[uuid.UUID, int]]:
        return {(t, p) for t, ps in self.owned.items() for p in ps}


def assert_disjoint(*clients: Client) -> None:
    seen: set[tuple[uuid.UUID, int]] = set()
    for c in clients:
        assert not (seen & c.parts()), "a partition is owned by two members"
        seen |= c.parts()


async def converge(*clients: Client, rounds: int = 8) -> None:
    for _ in range(rounds):
        for c in clients:
            assert (await c.beat()).error == E.NONE
            assert_disjoint(*clients)


async def test_join_two_members_incremental(coord: ConsumerGroupCoordinator) -> None:
    c1 = Client(coord, "m1", ["a"])
    r = await c1.beat()
    assert r.error == E.NONE and r.member_epoch == 1 and c1.count() == 6 and r.heartbeat_interval_ms == 1000
    c2 = Client(coord, "m2", ["a"])
    r = await c2.beat()
    # m2 joins at epoch 2, but m1 still owns everything: m2 gets nothing yet.
    assert r.member_epoch == 2 and c2.count() == 0
    g = await coord.group("g")
    assert g is not None and g.group_epoch == 2 and g.state().value == "Reconciling"
    r = await c1.beat()  # m1 is told to give up 3 partitions, epoch unchanged
    assert r.member_epoch == 1 and c1.count() == 3
    r = await c2.beat()  # m1 has not confirmed yet: still nothing for m2
    assert c2.count() == 0
    await c1.beat()  # m1 reports it owns only 3 now -> epoch 2
    assert c1.epoch == 2
    await c2.beat()
    assert c2.count() == 3 and c2.epoch == 2
    assert_disjoint(c1, c2)
    await converge(c1, c2)
    assert g.state().value == "Stable" and g.assignor == "uniform"


async def test_leave_and_session_timeout(coord: ConsumerGroupCoordinator, clock: ManualClock) -> None:
    c1, c2, c3 = Client(coord, "m1", ["a"]), Client(coord, "m2", ["a"]), Client(coord, "m3", ["a"])
    await converge(c1, c2, c3)
    assert [c.count() for c in (c1, c2, c3)] == [2, 2, 2]
    r = await coord.heartbeat(Heartbeat("g", "m3", -1))
    assert (r.error, r.member_epoch) == (E.NONE, -1)
    await converge(c1, c2)
    assert c1.count() + c2.count() == 6
    # m2 crashes: after the session timeout its partitions go to m1.
    for _ in range(3):
        clock.advance(SESSION_MS / 1000 / 3)
        await c1.beat()
    coord.timers.run_due()
    await converge(c1)
    assert c1.count() == 6
    assert (await c2.beat()).error == E.UNKNOWN_MEMBER_ID


async def test_rebalance_timeout_removes_slow_revoker(coord: ConsumerGroupCoordinator, clock: ManualClock) -> None:
    c1 = Client(coord, "m1", ["a"])
    await c1.beat()
    c2 = Client(coord, "m2", ["a"])
    await c2.beat()
    # m1 is asked to revoke but never answers with its new ownership.
    for _ in range(4):  # both stay alive; m1 keeps heartbeating without reporting the revocation
        res = await coord.heartbeat(Heartbeat("g", "m1", c1.epoch))
        assert res.error == E.NONE
        await c2.beat()
        assert c2.count() == 0
        clock.advance(8)
        coord.timers.run_due()
    g = await coord.group("g")
    assert g is not None and list(g.members) == ["m2"]
    await converge(c2)
    assert c2.count() == 6


async def test_fenced_and_stale_epochs(coord: ConsumerGroupCoordinator) -> None:
    c1 = Client(coord, "m1", ["a"])
    await c1.beat()
    assert (await coord.heartbeat(Heartbeat("g", "m1", 7))).error == E.FENCED_MEMBER_EPOCH
    assert (await coord.heartbeat(Heartbeat("g", "nobody", 1))).error == E.UNKNOWN_MEMBER_ID
    # OffsetCommit v9+: member id + member epoch.
    assert await coord.validate_commit("g", "m1", c1.epoch, 9) == E.NONE
    assert await coord.validate_commit("g", "m1", c1.epoch - 1, 9) == E.STALE_MEMBER_EPOCH
    assert await coord.validate_commit("g", "m1", c1.epoch + 1, 9) == E.FENCED_MEMBER_EPOCH
    assert await coord.validate_commit("g", "ghost", 1, 9) == E.UNKNOWN_MEMBER_ID
    assert await coord.validate_commit("g", "", -1, 9) == E.UNKNOWN_MEMBER_ID  # not empty
    assert await coord.validate_commit("g", "m1", c1.epoch, 8) == E.UNSUPPORTED_VERSION
    assert await coord.validate_commit("other", "x", 1, 9) is None  # not a consumer group
    assert await coord.validate_fetch("g", "m1", c1.epoch) == E.NONE
    assert await coord.validate_fetch("g", "m1", 0) == E.STALE_MEMBER_EPOCH


async def test_invalid_requests(coord: ConsumerGroupCoordinator) -> None:
    cases = [
        Heartbeat("", "m", 0, rebalance_timeout_ms=1, subscribed_topic_names=["a"]),
        Heartbeat("g", "", 0, rebalance_timeout_ms=1, subscribed_topic_names=["a"]),
        Heartbeat("g", "m", 0, subscribed_topic_names=["a"]),  # no rebalance timeout
        Heartbeat("g", "m", 0, rebalance_timeout_ms=1),  # no subscription
        Heartbeat("g", "m", -3),
        Heartbeat("g", "m", -2),  # static leave without an instance id
        Heartbeat("g", "m", 0, rebalance_timeout_ms=1, subscribed_topic_names=["a"], owned={uuid.uuid4(): {0}}),
    ]
    for hb in cases:
        assert (await coord.heartbeat(hb)).error == E.INVALID_REQUEST, hb
    bad_assignor = Heartbeat("g", "m", 0, rebalance_timeout_ms=1, subscribed_topic_names=["a"], server_assignor="x")
    assert (await coord.heartbeat(bad_assignor)).error == E.UNSUPPORTED_ASSIGNOR
    bad_regex = Heartbeat("g", "m", 0, rebalance_timeout_ms=1, subscribed_topic_regex="(a")
    assert (await coord.heartbeat(bad_regex)).error == E.INVALID_REGULAR_EXPRESSION
    backref = Heartbeat("g", "m", 0, rebalance_timeout_ms=1, subscribed_topic_regex="(a)\\1")
    assert (await coord.heartbeat(backref)).error == E.INVALID_REGULAR_EXPRESSION  # RE2, not Perl
    assert await coord.group("g") is None


async def test_regex_subscription_and_new_topic(coord: ConsumerGroupCoordinator, meta: Metastore, clock: ManualClock) -> None:
    c1 = Client(coord, "m1", None, regex="orders-.*")
    await converge(c1)
    assert c1.count() == 4
    await meta.create_topic("orders-jp", 3)
    clock.advance(1.5)  # the topic list is cached for a second
    await converge(c1)
    assert c1.count() == 7
    g = await coord.group("g")
    assert g is not None and set(g.subscribed) == {"orders-eu", "orders-us", "orders-jp"}


async def test_range_assignor_selected(coord: ConsumerGroupCoordinator) -> None:
    c1, c2 = Client(coord, "m1", ["a", "b"], assignor="range"), Client(coord, "m2", ["a", "b"], assignor="range")
    await converge(c1, c2)
    g = await coord.group("g")
    assert g is not None and g.assignor == "range"
    # range: each topic split in consecutive ranges, the first member sorted by id gets the extra
    assert sorted(c1.owned[next(t for t in c1.owned if len(c1.owned[t]) == 3)]) == [0, 1, 2]
    assert c1.count() == 4 and c2.count() == 4


async def test_static_member_leaves_and_returns(coord: ConsumerGroupCoordinator) -> None:
    c1, c2 = Client(coord, "m1", ["a"], instance="i1"), Client(coord, "m2", ["a"])
    await converge(c1, c2)
    held = c1.parts()
    g = await coord.group("g")
    assert g is not None
    epoch = g.group_epoch
    r = await coord.heartbeat(Heartbeat("g", "m1", -2, instance_id="i1"))
    assert (r.error, r.member_epoch) == (E.NONE, -2)
    assert g.group_epoch == epoch  # no rebalance while a static member is away
    # The same instance id, still held by a live member, is refused.
    c3 = Client(coord, "m3", ["a"], instance="i2")
    await c3.beat()
    dup = Client(coord, "m4", ["a"], instance="i2")
    assert (await dup.beat()).error == E.UNRELEASED_INSTANCE_ID
    await coord.heartbeat(Heartbeat("g", "m3", -1))
    # i1 comes back under a new member id and gets its partitions back.
    back = Client(coord, "m1-new", ["a"], instance="i1")
    await back.beat()
    await converge(back, c2)
    assert held <= back.parts() or back.count() >= 3
    assert "m1" not in g.members and "m1-new" in g.members


async def test_takeover_continues_at_same_epoch(meta: Metastore, clock: ManualClock) -> None:
    first = make(meta, clock)
    c1, c2 = Client(first, "m1", ["a"]), Client(first, "m2", ["a"])
    await converge(c1, c2)
    g = await first.group("g")
    assert g is not None
    epochs = (g.group_epoch, g.assignment_epoch, c1.epoch, c2.epoch)
    await first.close()
    second = make(meta, clock)  # the new ring owner, after the first agent died
    c1.coord = c2.coord = second
    await converge(c1, c2)
    g2 = await second.group("g")
    assert g2 is not None and (g2.group_epoch, g2.assignment_epoch, c1.epoch, c2.epoch) == epochs
    assert c1.count() == 3 and c2.count() == 3
    c3 = Client(second, "m3", ["a"])
    await converge(c1, c2, c3)
    assert g2.group_epoch == epochs[0] + 1 and [c.count() for c in (c1, c2, c3)] == [2, 2, 2]
    await second.close()


async def test_empty_group_conversion_rules(meta: Metastore, clock: ManualClock) -> None:
    """An empty consumer group gives its id to a classic JoinGroup (the non-empty
    cases, online migration, are in test_group_migration.py)."""
    from agent.groups.coordinator import JoinRequest

    c = ConsumerGroupCoordinator(meta, clock, meta.list_topics)
    hb = Heartbeat("idle", "m", 0, rebalance_timeout_ms=1000, subscribed_topic_names=["a"])
    assert (await c.heartbeat(hb)).error == E.NONE
    await c.heartbeat(Heartbeat("idle", "m", -1))
    join = JoinRequest("idle", "", None, "c", "/h", 10_000, 10_000, "consumer", [("range", b"")])
    assert await c.classic_join(join) is None  # empty: converted back to classic
    assert await c.group("idle") is None and await meta.load_consumer_group("idle") is None
    await c.close()


def test_assignors_balanced_and_sticky() -> None:
    topics = {n: TopicMeta(uuid.UUID(int=i + 1), n, p) for i, (n, p) in enumerate((("x", 7), ("y", 5)))}
    members = {f"m{i}": {"x", "y"} for i in range(3)}
    first = uniform_assign(members, topics, {})
    counts = sorted(sum(len(p) for p in a.values()) for a in first.values())
    assert counts == [4, 4, 4]
    members["m3"] = {"x", "y"}
    second = uniform_assign(members, topics, first)
    assert sorted(sum(len(p) for p in a.values()) for a in second.values()) == [3, 3, 3, 3]
    moved = sum(len(first[m].get(t, set()) - second[m].get(t, set())) for m in first for t in first[m])
    assert moved == 3  # only what the new member needs moves
    ranged = range_assign(members, topics, {})
    assert ranged["m0"][topics["x"].id] == {0, 1} and ranged["m3"][topics["x"].id] == {6}
    hetero = uniform_assign({"p": {"x"}, "q": {"x", "y"}}, topics, {})
    assert sum(len(v) for v in hetero["p"].values()) == 6 and sum(len(v) for v in hetero["q"].values()) == 6


async def test_lag_metrics(coord: ConsumerGroupCoordinator, meta: Metastore) -> None:
    from agent.groups.consumer.metrics import LAG, MEMBERS, refresh
    from metastore.types import GroupOffset
    from tests.metastore.helpers import batch

    c1 = Client(coord, "m1", ["b"])
    await converge(c1)
    tid = next(iter(c1.owned))
    await meta.commit_object(f"obj/{uuid.uuid4()}", 100, "a", [batch(tid, 0, 5), batch(tid, 1, 2)])
    await meta.commit_offsets("g", [GroupOffset(tid, 0, 1, -1, "", 1, None), GroupOffset(tid, 1, 2, -1, "", 1, None)])
    assert await refresh(coord) == {"g": 4}
    assert LAG.labels("g")._value.get() == 4 and MEMBERS.labels("g")._value.get() == 1


async def test_ring_change_releases_and_reloads(meta: Metastore, clock: ManualClock) -> None:
    mine = {"yes": True}
    c = ConsumerGroupCoordinator(meta, clock, meta.list_topics, owns=lambda _g: mine["yes"])
    m = Client(c, "m1", ["a"])
    await converge(m)
    mine["yes"] = False
    c.release_unowned()
    assert c._groups == {} and not c.timers.is_scheduled(("session", "g", "m1"))
    assert (await m.beat()).error == E.NOT_COORDINATOR
    mine["yes"] = True  # it comes back: the group is reloaded at its epoch
    assert (await m.beat()).error == E.NONE and m.epoch == 1
    await c.close()
