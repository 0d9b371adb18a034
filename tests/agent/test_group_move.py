"""A classic group moving between two coordinators over one metastore (issue 43).

When the ring moves a group (a starved ``floe dev`` losing and regaining a
worker), the new owner loads the group from the metastore. These tests move it
between two :class:`ClusteredGroupCoordinator` instances sharing one SQLite
metastore — between JoinGroup and SyncGroup, right after SyncGroup, back to a
stale copy, and with both serving it at once — and check what a member cares
about: every answer it gets is for a generation at least as new as the last
one, ILLEGAL_GENERATION never comes, and a generation number is never handed
out twice. The last test does the same to real confluent-kafka consumers.

The coordinators run on a ManualClock (timers fire when a test calls
``run_due``); waits poll real conditions (the metastore writes run on
aiosqlite's thread) with deadlines.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from agent.clock import ManualClock
from agent.cluster.groups import ClusteredGroupCoordinator
from agent.groups import GroupConfig, JoinRequest, JoinResult, SyncResult
from kafka_protocol.errors import ErrorCode as E
from metastore import Metastore, open_metastore
from tests.agent.test_groups_coordinator import subscription

G = "g"


class Fleet:
    """Two coordinators of one metastore and which of them the ring says owns ``G``."""

    def __init__(self, meta: Metastore, clock: ManualClock) -> None:
        self.meta, self.clock = meta, clock
        self.owners: set[str] = {"A"}
        self.c: dict[str, ClusteredGroupCoordinator] = {}
        for name in ("A", "B"):
            c = ClusteredGroupCoordinator(
                meta, clock, GroupConfig(initial_rebalance_delay_ms=100, min_session_timeout_ms=1000,
                                         agent_id=name, metrics_interval_s=0),
            )  # fmt: skip
            c.owns = self._owns(name)
            self.c[name] = c
        self.seen: list[tuple[str, int, int]] = []  # (api, error, generation) of every answer

    def _owns(self, name: str) -> Callable[[str], bool]:
        return lambda _group_id: name in self.owners

    def move(self, *owners: str) -> None:
        self.owners = set(owners)

    async def join(self, at: str, member_id: str = "", client: str = "c") -> JoinResult:
        req = JoinRequest(G, member_id, None, client, "/127.0.0.1", 60_000, 30_000, "consumer",
                          [("range", subscription("t"))], require_known_member_id=False)  # fmt: skip
        res = await self.c[at].join(req)
        self.seen.append(("join", res.error, res.generation))
        return res

    async def sync(self, at: str, res: JoinResult, assignments: dict[str, bytes] | None = None) -> SyncResult:
        out = await self.c[at].sync(G, res.generation, res.member_id, None, assignments or {})
        self.seen.append(("sync", out.error, res.generation))
        return out

    async def heartbeat(self, at: str, res: JoinResult) -> int:
        err = await self.c[at].heartbeat(G, res.generation, res.member_id, None)
        self.seen.append(("heartbeat", err, res.generation))
        return err

    async def drive(self, *aws: Awaitable[Any], step_s: float = 0.05, limit_s: float = 10.0) -> list[Any]:
        """Run ``aws`` to completion, moving the clock through join delays meanwhile."""
        tasks = [asyncio.ensure_future(a) for a in aws]
        loop = asyncio.get_running_loop()
        deadline = loop.time() + limit_s
        while not all(t.done() for t in tasks):
            assert loop.time() < deadline, "requests not answered"
            await asyncio.sleep(0.002)
            self.clock.advance(step_s)
            for c in self.c.values():
                c.timers.run_due()
        return [t.result() for t in tasks]

    async def form(self, at: str, *members: JoinResult | str) -> list[JoinResult]:
        """Everyone (re)joins at ``at``; the leader assigns ``member -> its id``; all sync."""
        joins = await self.drive(*(self.join(at, m if isinstance(m, str) else m.member_id) for m in members))
        assert all(j.error == E.NONE for j in joins), joins
        leader = next(j for j in joins if j.member_id == j.leader_id)
        plan = {mid: mid.encode() for mid, _, _ in leader.members}
        syncs = await self.drive(*(self.sync(at, j, plan if j is leader else None) for j in joins))
        assert [s.error for s in syncs] == [E.NONE] * len(joins)
        assert [s.assignment for s in syncs] == [j.member_id.encode() for j in joins]
        return joins

    def check(self) -> None:
        """What members saw: no ILLEGAL_GENERATION, generations never going back."""
        assert all(err != E.ILLEGAL_GENERATION for _, err, _ in self.seen), self.seen
        handed = [gen for api, err, gen in self.seen if api == "join" and err == E.NONE]
        assert handed == sorted(handed), self.seen


@pytest.fixture
async def fleet(tmp_path: Path) -> AsyncIterator[Fleet]:
    meta = await open_metastore(f"sqlite:///{tmp_path / 'meta.db'}")
    f = Fleet(meta, ManualClock())
    try:
        yield f
    finally:
        for c in f.c.values():
            await c.close()
        await meta.close()


async def stored_generation(meta: Metastore) -> int:
    rec = await meta.load_group(G)
    assert rec is not None
    return rec.generation


async def test_join_answers_only_once_the_generation_is_stored(fleet: Fleet) -> None:
    joins = await fleet.drive(fleet.join("A", client="x"), fleet.join("A", client="y"))
    assert [j.generation for j in joins] == [1, 1]
    # The answer left after the write: a successor loading now sees generation 1 and both members.
    rec = await fleet.meta.load_group(G)
    assert rec is not None and rec.generation == 1 and rec.state == "CompletingRebalance"
    assert sorted(m.member_id for m in rec.members) == sorted(j.member_id for j in joins)
    leader = next(j for j in joins if j.member_id == j.leader_id)
    await fleet.drive(*(fleet.sync("A", j, {j.member_id: b"p" for j in joins} if j is leader else None) for j in joins))
    rec = await fleet.meta.load_group(G)
    assert rec is not None and rec.state == "Stable" and {m.assignment for m in rec.members} == {b"p"}


async def test_move_between_join_and_sync(fleet: Fleet) -> None:
    joins = await fleet.drive(fleet.join("A", client="x"), fleet.join("A", client="y"))
    assert {j.generation for j in joins} == {1}
    fleet.move("B")
    # The old owner refuses; the new one loaded generation 1 mid-barrier and asks for a rejoin.
    assert (await fleet.sync("A", joins[0])).error == E.NOT_COORDINATOR
    assert {(await fleet.sync("B", j)).error for j in joins} == {E.REBALANCE_IN_PROGRESS}
    again = await fleet.form("B", *joins)
    assert {j.generation for j in again} == {2}
    assert [await fleet.heartbeat("B", j) for j in again] == [E.NONE, E.NONE]
    assert await stored_generation(fleet.meta) == 2
    fleet.check()


async def test_move_right_after_sync_and_back_to_a_stale_copy(fleet: Fleet) -> None:
    members = await fleet.form("A", "", "")
    fleet.move("B")
    # Taken over right after SyncGroup: same generation, same assignment, no rebalance.
    assert [await fleet.heartbeat("B", j) for j in members] == [E.NONE, E.NONE]
    described = await fleet.c["B"].describe(G)
    assert described is not None and described.state == "Stable"
    assert {m.member_id: m.assignment for m in described.members} == {j.member_id: j.member_id.encode() for j in members}
    # A newcomer at B: everyone rebalances there to generation 2.
    newcomer = asyncio.ensure_future(fleet.join("B", client="z"))
    await fleet.drive(asyncio.sleep(0.05))
    assert {await fleet.heartbeat("B", j) for j in members} == {E.REBALANCE_IN_PROGRESS}
    rejoined = await fleet.drive(*(fleet.join("B", j.member_id) for j in members), newcomer)
    everyone = list(rejoined)
    leader = next(j for j in everyone if j.member_id == j.leader_id)
    plan = {j.member_id: b"x" for j in everyone}
    syncs = await fleet.drive(*(fleet.sync("B", j, plan if j is leader else None) for j in everyone))
    assert {s.error for s in syncs} == {E.NONE} and {j.generation for j in everyone} == {2}
    # The ring moves the group back to A, whose copy still says generation 1:
    # a member at generation 2 makes it reload instead of hearing ILLEGAL_GENERATION.
    fleet.move("A")
    assert [await fleet.heartbeat("A", j) for j in everyone] == [E.NONE] * 3
    fleet.check()


async def test_two_owners_at_once_never_hand_out_one_generation_twice(fleet: Fleet) -> None:
    """The ~0.4 s of a starved dev where both workers think they own the group."""
    members = await fleet.form("A", "", "")
    fleet.move("A", "B")
    assert [await fleet.heartbeat("B", j) for j in members] == [E.NONE, E.NONE]  # B loads generation 1
    # A newcomer at each; the old members rejoin nowhere, so each barrier ends at the
    # rebalance timeout, at the same clock tick: both coordinators race to store generation 2.
    at_a = asyncio.ensure_future(fleet.join("A", client="na"))
    at_b = asyncio.ensure_future(fleet.join("B", client="nb"))
    await fleet.drive(asyncio.sleep(0.05), step_s=0.01)
    fleet.clock.advance(31)
    for c in fleet.c.values():
        c.timers.run_due()
    ra, rb = await fleet.drive(at_a, at_b)
    winners = [r for r in (ra, rb) if r.error == E.NONE]
    assert len(winners) == 1 and winners[0].generation == 2, (ra, rb)
    loser = rb if winners[0] is ra else ra
    assert loser.error == E.NOT_COORDINATOR  # the member looks the coordinator up again
    rec = await fleet.meta.load_group(G)
    assert rec is not None and rec.generation == 2 and [m.member_id for m in rec.members] == [winners[0].member_id]
    # The loser's coordinator dropped its copy; the retry loads generation 2 and moves on to 3.
    fleet.move("B" if loser is rb else "A")
    at = "B" if loser is rb else "A"
    retry = await fleet.join(at, loser.member_id)
    assert retry.error == E.UNKNOWN_MEMBER_ID  # not a member of the stored generation 2
    fresh = await fleet.drive(fleet.join(at, client="again"), fleet.join(at, winners[0].member_id))
    assert {j.generation for j in fresh} == {3}
    fleet.check()


async def test_failed_save_is_not_answered(fleet: Fleet, monkeypatch: pytest.MonkeyPatch) -> None:
    """A generation whose write failed is not handed out; the retried join is, once stored."""
    from metastore import MetastoreError

    real = fleet.meta.save_group
    failures = [MetastoreError("metastore down")]

    async def flaky(*args: Any, **kwargs: Any) -> bool:
        if failures:
            raise failures.pop()
        return await real(*args, **kwargs)

    monkeypatch.setattr(fleet.meta, "save_group", flaky)
    [first] = await fleet.drive(fleet.join("A"))
    # Two attempts (the barrier's save and the answer's retry) were needed: one failed.
    assert first.error == E.NONE and await stored_generation(fleet.meta) == 1
    # The leader's assignment cannot be stored (nor on the retry): SyncGroup says so ...
    failures.extend([MetastoreError("down"), MetastoreError("down")])
    [second] = await fleet.drive(fleet.sync("A", first, {first.member_id: b"p"}))
    assert second.error == E.COORDINATOR_NOT_AVAILABLE
    rec = await fleet.meta.load_group(G)
    assert rec is not None and rec.state == "CompletingRebalance"
    # ... and the retried SyncGroup gets the assignment once it is stored.
    [third] = await fleet.drive(fleet.sync("A", first))
    assert (third.error, third.assignment) == (E.NONE, b"p")
    rec = await fleet.meta.load_group(G)
    assert rec is not None and rec.state == "Stable" and rec.members[0].assignment == b"p"
    fleet.check()


# -- real consumers ---------------------------------------------------------------------


@pytest.mark.interop
def test_confluent_consumers_survive_moves(tmp_path: Path) -> None:
    """Two confluent-kafka consumers, the second joining later; in that second
    rebalance the agent's copy of the group is dropped (as on a ring move away and
    back) right after a JoinGroup answer and right after a SyncGroup answer, so
    the group is reloaded from the metastore each time. Every record is consumed,
    and no request of theirs is ever answered ILLEGAL_GENERATION."""
    from tests.agent.test_fetch_protocol import make_topic
    from tests.agent.test_groups_clients import PARTITIONS, ConfluentWorker, produce, wait_for
    from tests.fixtures.agent import start_agent

    agent = start_agent(tmp_path / "a", group_min_session_timeout_ms=1000, group_initial_rebalance_delay_ms=100)
    try:
        make_topic(agent, "t", PARTITIONS)
        groups = agent.broker.groups
        answers: list[tuple[str, int]] = []
        moves = {"join": 1, "sync": 2}  # how many answers may be followed by a move
        lock = threading.Lock()

        def wrap(api: str, call: Callable[..., Awaitable[Any]], error: Callable[[Any], int]) -> Any:
            async def wrapped(*args: Any, **kwargs: Any) -> Any:
                out = await call(*args, **kwargs)
                err = error(out)
                answers.append((api, err))
                gen = out.generation if api == "join" else args[1]
                with lock:  # moves in the second rebalance: the first leaves a stored generation behind
                    move = api in moves and err == E.NONE and gen >= 2 and moves[api] > 0
                    if move:
                        moves[api] -= 1
                if move:
                    groups.release("cg")  # moved away; the next request loads it back
                return out

            return wrapped

        groups.join = wrap("join", groups.join, lambda r: r.error)
        groups.sync = wrap("sync", groups.sync, lambda r: r.error)
        groups.heartbeat = wrap("heartbeat", groups.heartbeat, lambda r: r)
        groups.commit_offsets = wrap("commit", groups.commit_offsets, lambda r: r)

        workers = [ConfluentWorker(agent, "cg", "t") for _ in range(2)]
        workers[0].start()
        produce(agent, "t", 0, 60)
        wait_for(lambda: bool(workers[0].records), 30, "the first member to consume")
        workers[1].start()
        wait_for(lambda: {v for w in workers for _, _, v in w.records} == set(range(60)), 60, "all records")
        wait_for(lambda: moves["join"] == 0 and moves["sync"] < 2, 30, "the moves")
        produce(agent, "t", 60, 60)
        wait_for(lambda: {v for w in workers for _, _, v in w.records} == set(range(120)), 60, "records after moves")
        for w in workers:
            w.stop()
        assert not any(err == E.ILLEGAL_GENERATION for _, err in answers), answers
        assert sum(1 for api, err in answers if api == "heartbeat" and err == E.NONE) > 0
    finally:
        agent.stop()
