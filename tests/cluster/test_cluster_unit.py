"""Fast tests of the cluster pieces: rings and zones, membership on a manual clock,
NOT_COORDINATOR and group release, the polling wake-ups, the RPC encoding."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Any

from agent.clock import ManualClock
from agent.cluster import ClusteredGroupCoordinator, Peer, Rings, client_zone, node_id_for
from agent.cluster.membership import DuplicateAgentError, Membership
from agent.cluster.peer_cache import resolve_peer_address
from agent.cluster.wakeups import PollWakeups, decode_keys, encode_keys
from agent.groups import JoinRequest
from agent.notify import CommitNotifier
from kafka_protocol.errors import ErrorCode
from metastore import open_metastore
from metastore.rpc import decode, encode
from metastore.types import ErrorCode as ME
from metastore.types import FindResult, GroupOffset
from tests.metastore.helpers import batch

PEERS = [
    Peer("a1", "10.0.0.1", 9092, "a", 9644),
    Peer("a2", "10.0.0.2", 9092, "a", 9644),
    Peer("b1", "10.0.0.3", 9092, "b", None),
]


def test_rings_agree_and_zones_fall_back() -> None:
    r1, r2 = Rings(PEERS), Rings(list(reversed(PEERS)))
    keys = [f"t:{i}" for i in range(200)]
    assert [r1.all.owner(k) for k in keys] == [r2.all.owner(k) for k in keys]
    assert {r1.zone("b").owner(k).agent_id for k in keys} == {"b1"}
    assert {r1.zone("a").owner(k).agent_id for k in keys} == {"a1", "a2"}
    assert {r1.zone("c").owner(k).agent_id for k in keys} == {
        "a1",
        "a2",
        "b1",
    }  # no agent in c: all
    # Removing one agent only moves the keys it owned.
    r3 = Rings(PEERS[:2])
    moved = [k for k in keys if r1.all.owner(k) != r3.all.owner(k)]
    assert all(r1.all.owner(k).agent_id == "b1" for k in moved)
    assert (
        client_zone("app floe_az=eu-1a x") == "eu-1a"
        and client_zone("app") is None
        and client_zone(None) is None
    )
    assert node_id_for("a1") == PEERS[0].node_id > 0 and node_id_for("7") == 7
    assert len({node_id_for(f"agent-{i}") for i in range(1000)}) == 1000
    assert Peer("x", "lb", 9092, None, 9644, "10.1.2.3").admin_url == "http://10.1.2.3:9644"
    assert PEERS[0].admin_url == "http://10.0.0.1:9644"
    assert resolve_peer_address("10.9.9.9", "0.0.0.0", 9644) == ("10.9.9.9", 9644)
    assert resolve_peer_address("10.9.9.9:7000", "0.0.0.0", 9644) == ("10.9.9.9", 7000)
    assert resolve_peer_address("", "127.0.0.1", 9644) == ("127.0.0.1", 9644)
    assert resolve_peer_address("auto", "0.0.0.0", 9644)[0] not in ("", "0.0.0.0")


async def test_membership_heartbeats_and_timeouts(tmp_path: Path) -> None:
    clock = ManualClock()
    ms = await open_metastore(f"sqlite:///{tmp_path / 'm.db'}", now_ms=clock.now_ms)
    try:
        changes: list[int] = []
        m1 = Membership(
            ms, PEERS[0], clock, dead_after_s=5, on_change=lambda r: changes.append(len(r.all))
        )
        m2 = Membership(ms, PEERS[1], clock, dead_after_s=5)
        await m1._register()
        await m2._register()
        assert len((await m1.refresh()).all) == 2 and len((await m2.refresh()).all) == 2
        assert m1.rings.all.owner("x") == m2.rings.all.owner("x")
        for _ in range(6):  # m1 beats on time; m2 last heartbeat 6 s ago
            clock.advance(1)
            await m1.tick()
        assert [p.agent_id for p in m1.rings.peers] == ["a1"]
        await m2.tick()  # m2 comes back
        await m1.refresh()
        assert changes == [2, 1, 2]
        # Another agent on the same advertised address is a third member, not a
        # replacement: nobody is evicted (identity is not address).
        m3 = Membership(ms, Peer("a3", "10.0.0.2", 9092, "a", 9645, "10.1.0.3"), clock)
        await m3.start()
        assert sorted(p.agent_id for p in (await m1.refresh()).peers) == ["a1", "a2", "a3"]
        assert (await m1.refresh()).all.peers["a3"].admin_url == "http://10.1.0.3:9645"
        # A second live process with the id a3 is refused at start, with the reason.
        dup = Membership(ms, Peer("a3", "10.0.0.9", 9092, "a", 9645), clock)
        try:
            await dup.start()
            raise AssertionError("duplicate id accepted")
        except DuplicateAgentError as e:
            assert "'a3' is already used by a live agent" in str(e) and "10.1.0.3" in str(e)
        await m3.stop()
        assert sorted(p.agent_id for p in (await m1.refresh()).peers) == ["a1", "a2"]
        assert m1.evictions == m2.evictions == 0
    finally:
        await ms.close()


async def test_fresh_rings_does_not_trust_a_refresh_still_in_flight(tmp_path: Path) -> None:
    """The heartbeat's refresh began before another agent registered and is still
    reading (a slow metastore): a Metadata request meanwhile must read again, not
    answer with the rings that refresh is about to replace (CI: an agent listed only
    itself right after a second one started)."""
    clock = ManualClock()
    ms = await open_metastore(f"sqlite:///{tmp_path / 'm.db'}", now_ms=clock.now_ms)
    try:
        m1, m2 = Membership(ms, PEERS[0], clock), Membership(ms, PEERS[1], clock)
        await m1._register()
        m1.started = True
        clock.advance(1)  # the start's refresh is long past
        gate, entered = asyncio.Event(), asyncio.Event()
        real = ms.live_agents

        async def slow_first(since: int) -> Any:
            rows = await real(since)  # read before a2 registers
            if not entered.is_set():
                entered.set()
                await gate.wait()
            return rows

        ms.live_agents = slow_first  # type: ignore[method-assign]
        heartbeat = asyncio.create_task(m1.refresh())
        await entered.wait()
        await m2._register()  # a2 joins while the heartbeat's read is in flight
        rings = await m1.fresh_rings(0.05)  # no time passed on the clock
        assert sorted(p.agent_id for p in rings.peers) == ["a1", "a2"]
        gate.set()
        await heartbeat  # its older read does not undo the newer one
        assert sorted(p.agent_id for p in m1.rings.peers) == ["a1", "a2"]
    finally:
        await ms.close()


async def test_not_coordinator_and_release(tmp_path: Path) -> None:
    clock = ManualClock()
    ms = await open_metastore(f"sqlite:///{tmp_path / 'm.db'}")
    try:
        coord = ClusteredGroupCoordinator(ms, clock)
        mine = {"g": True}
        coord.owns = lambda gid: mine.get(gid, False)  # type: ignore[method-assign]
        req = JoinRequest(
            "g",
            "",
            None,
            "c",
            "h",
            10000,
            10000,
            "consumer",
            [("range", b"")],
            require_known_member_id=False,
        )
        join = asyncio.ensure_future(coord.join(req))
        deadline = asyncio.get_running_loop().time() + 30
        while asyncio.get_running_loop().time() < deadline:  # the join loads the (absent) group first
            if coord.group_state("g") is not None:
                break
            await asyncio.sleep(0.01)
        assert coord.group_state("g") is not None
        assert (await coord.heartbeat("other", 1, "m", None)) == ErrorCode.NOT_COORDINATOR
        assert (
            await coord.join(
                JoinRequest("other", "", None, "c", "h", 10000, 10000, "consumer", [("r", b"")])
            )
        ).error == ErrorCode.NOT_COORDINATOR
        mine["g"] = False  # the ring moved the group away
        coord.release_unowned()
        assert (await asyncio.wait_for(join, 30)).error == ErrorCode.NOT_COORDINATOR
        assert coord.group_state("g") is None
        assert (await coord.commit_offsets("g", 1, "m", None, [])) == ErrorCode.NOT_COORDINATOR
        await coord.close()
    finally:
        await ms.close()


async def test_poll_wakeups_see_other_agents_commits(tmp_path: Path) -> None:
    ms = await open_metastore(f"sqlite:///{tmp_path / 'm.db'}")
    try:
        await ms.create_topic("t", 2)
        topic = await ms.get_topic("t")
        assert topic is not None
        notifier = CommitNotifier()
        poll = PollWakeups(ms, notifier)
        with notifier.watch([(topic.id, 1)]) as ev:
            assert await poll.poll_once() == []  # baseline
            await ms.commit_object("k1", 100, "other-agent", [batch(topic.id, 1)])
            assert await poll.poll_once() == [(topic.id, 1)]
            assert ev.is_set()
        assert await poll.poll_once() == []  # nobody waiting: no queries
        # Eight watched partitions of one topic: one metastore read per poll, not eight.
        calls: list[str] = []
        orig_po, orig_lo = ms.partition_offsets, ms.list_offsets

        async def counted_po(*a: Any) -> Any:
            calls.append("partition_offsets")
            return await orig_po(*a)

        async def counted_lo(*a: Any, **kw: Any) -> Any:
            calls.append("list_offsets")
            return await orig_lo(*a, **kw)

        await ms.create_topic("wide", 8)
        wide = await ms.get_topic("wide")
        assert wide is not None
        ms.partition_offsets, ms.list_offsets = counted_po, counted_lo  # type: ignore[method-assign]
        with notifier.watch([(wide.id, p) for p in range(8)]):
            assert await poll.poll_once() == []
            await ms.commit_object("k2", 100, "other-agent", [batch(wide.id, 5)])
            assert await poll.poll_once() == [(wide.id, 5)]
        assert calls == ["partition_offsets", "partition_offsets"]
        keys = [(uuid.uuid4(), i) for i in range(500)]
        payloads = encode_keys(keys)
        assert len(payloads) > 1 and all(len(p) <= 7000 for p in payloads)
        assert [k for p in payloads for k in decode_keys(p)] == keys
        # A commit at width: two topics' partitions interleaved, as a set gives them.
        a, b = uuid.uuid4(), uuid.uuid4()
        wide = [(t, i) for i in range(600) for t in (a, b)]
        payloads = encode_keys(wide)
        assert len(payloads) > 1 and all(len(p) <= 7000 for p in payloads)
        assert [k for p in payloads for k in decode_keys(p)] == wide
    finally:
        await ms.close()


def test_rpc_encoding_round_trips() -> None:
    tid = uuid.uuid4()
    values = [
        FindResult(ME.NONE, 0, 5, []),
        [batch(tid, 3, 2)],
        {"a": b"\x00\xff", "$x": {1, 2}, "t": (1, "x")},
        {(tid, 1): GroupOffset(tid, 1, 5, -1, None, 0)}
        if hasattr(GroupOffset, "__dataclass_fields__")
        else {},
        ME.OUT_OF_ORDER_SEQUENCE_NUMBER,
        None,
    ]
    for v in values:
        assert decode(encode(v)) == v
    assert type(decode(encode(ME.NONE))) is ME
