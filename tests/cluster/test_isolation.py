"""Slow-agent isolation (issue 43): the judgement, its publication through the
heartbeat, and a slow agent losing its partitions in a 3-agent cluster."""

from __future__ import annotations

import asyncio
import json
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from agent.clock import ManualClock
from agent.cluster import Peer
from agent.cluster.isolation import Isolation, IsolationSettings, Observations, cap_for, judge
from agent.cluster.membership import Membership
from agent.connection import Deferred
from agent.faults import Faults, wrap_dispatch
from agent.handlers._isolated import TURNED_AWAY
from metastore import open_metastore

S = IsolationSettings(slow_ms=500, factor=3, isolate_for_s=60, max_fraction=0.3)
FAST, SLOW = 4.0, 2100.0


def docs(
    probes: dict[str, dict[str, float]], isolated: dict[str, dict[str, int]] | None = None
) -> dict[str, Observations]:
    isolated = isolated or {}
    return {a: Observations(dict(p), dict(isolated.get(a, {}))) for a, p in probes.items()}


def test_one_slow_agent_of_three_is_isolated() -> None:
    v = judge(
        docs(
            {"a": {"b": SLOW, "c": FAST}, "b": {"a": FAST, "c": FAST}, "c": {"a": FAST, "b": SLOW}}
        ),
        1_000,
        S,
    )
    assert v.isolated == {"b": 1_000}
    assert v.scores["b"] == SLOW and v.best_ms == FAST


def test_one_observer_alone_does_not_isolate() -> None:
    """A majority of observers must see it slow: one (itself starved?) is not enough."""
    v = judge(
        docs(
            {"a": {"b": SLOW, "c": FAST}, "b": {"a": FAST, "c": FAST}, "c": {"a": FAST, "b": FAST}}
        ),
        0,
        S,
    )
    assert v.isolated == {} and v.slow == []


def test_two_slow_of_three_isolates_only_the_worst() -> None:
    probes = {
        "a": {"b": 2500.0, "c": 2100.0},
        "b": {"a": FAST, "c": 2100.0},
        "c": {"a": FAST, "b": 2500.0},
    }
    v = judge(docs(probes), 5_000, S)
    assert v.slow == ["b", "c"] and v.isolated == {"b": 5_000}
    # The next round (b's isolation now published): b keeps its place, c stays placed,
    # even when c has become the worse of the two.
    probes["a"]["c"] = probes["b"]["c"] = 9000.0
    v2 = judge(docs(probes, {"a": {"b": 5_000}, "b": {"b": 5_000}, "c": {"b": 5_100}}), 6_000, S)
    assert v2.isolated == {"b": 5_000}


def test_everything_slow_isolates_nobody() -> None:
    """A cluster-wide slowdown (network, metastore) is not one slow agent."""
    slow = {
        "a": {"b": 2000.0, "c": 2200.0},
        "b": {"a": 2100.0, "c": 2200.0},
        "c": {"a": 2100.0, "b": 2000.0},
    }
    assert judge(docs(slow), 0, S).isolated == {}


def test_a_starved_observer_judges_nobody() -> None:
    """Two agents on one CPU-starved host time each other slow; each one's own loop
    is late too, so neither publishes probes and neither is isolated."""
    agents = {name: Isolation(name, S) for name in ("a", "b")}
    for ms in (SLOW, 1800.0, 2500.0):  # the starved host's noise: a saw b far slower ...
        agents["a"].record("b", ms)
    for ms in (400.0, 300.0, 500.0):  # ... than b saw a: without the lag, b is isolated
        agents["b"].record("a", ms)
    assert judge({n: Observations.parse(i.report()) for n, i in agents.items()}, 0, S).slow == ["b"]
    for i in agents.values():
        i.note_lag(350.0)  # a probe round began 350 ms late: this agent is starved
    published = {n: Observations.parse(i.report()) for n, i in agents.items()}
    assert all(o.probes == {} for o in published.values())
    assert judge(published, 0, S).isolated == {}
    # On time again for a whole window, and fresh probes: judged again.
    a = agents["a"]
    for _ in range(S.window):
        a.note_lag(3.0)
        a.record("b", SLOW)
    assert Observations.parse(a.report()).probes == {"b": SLOW}


def test_a_slow_peer_is_still_judged_by_an_observer_on_time() -> None:
    a = Isolation("a", S)
    for _ in range(S.window):
        a.note_lag(20.0)  # a busy but not starved loop
        a.record("b", SLOW)
    assert Observations.parse(a.report()).probes == {"b": SLOW}


def test_isolation_lasts_isolate_for_s_then_ends_or_renews() -> None:
    healthy = {
        "a": {"b": FAST, "c": FAST},
        "b": {"a": FAST, "c": FAST},
        "c": {"a": FAST, "b": FAST},
    }
    held = {"a": {"b": 10_000}, "c": {"b": 10_500}}
    # Recovered at once, still isolated for its minute, from the earliest published start.
    assert judge(docs(healthy, held), 69_999, S).isolated == {"b": 10_000}
    assert judge(docs(healthy, held), 70_000, S).isolated == {}
    # Still slow when its minute is over: a new isolation begins at once.
    slow_b = {"a": {"b": SLOW, "c": FAST}, "b": {"a": FAST, "c": FAST}, "c": {"a": FAST, "b": SLOW}}
    assert judge(docs(slow_b, held), 71_000, S).isolated == {"b": 71_000}


def test_failed_probes_count_as_slow() -> None:
    """A peer that errors is recorded at the probe timeout, so it is judged slow."""
    iso = Isolation("a", IsolationSettings(probe_timeout_s=3.0))
    for _ in range(3):
        iso.record("b", 3000.0, "ConnectionRefusedError: refused")
        iso.record("c", FAST)
    assert iso.medians() == {"b": 3000.0, "c": FAST}
    mine = Observations.parse(iso.report())
    v = judge(
        {
            "a": mine,
            "b": Observations({"a": FAST, "c": FAST}),
            "c": Observations({"a": FAST, "b": 3000.0}),
        },
        0,
        S,
    )
    assert v.isolated == {"b": 0}


def test_the_same_documents_give_the_same_verdict_whoever_judges() -> None:
    probes = {
        "a": {"b": 2500.0, "c": 2500.0},
        "b": {"a": FAST, "c": 2500.0},
        "c": {"a": FAST, "b": 2500.0},
    }
    texts = {k: Observations(v).dump() for k, v in probes.items()}
    verdicts = set()
    for order in (["a", "b", "c"], ["c", "b", "a"], ["b", "a", "c"]):
        parsed = {k: Observations.parse(texts[k]) for k in order}
        verdicts.add(json.dumps(judge(parsed, 42, S).isolated))
    assert verdicts == {'{"b": 42}'}  # equal scores: the id breaks the tie


def test_cap_is_thirty_percent_at_least_one_never_all() -> None:
    assert [cap_for(n, 0.3) for n in (1, 2, 3, 4, 7, 10, 20)] == [0, 1, 1, 1, 2, 3, 6]


def test_past_the_cap_the_one_isolated_longest_is_placed_first() -> None:
    healthy = {x: {y: FAST for y in "abc" if y != x} for x in "abc"}
    held = {"a": {"b": 1_000, "c": 2_000}}  # both held (a fourth agent left): cap 1 of 3
    assert judge(docs(healthy, held), 3_000, S).isolated == {"c": 2_000}


async def test_verdict_travels_through_the_heartbeat(tmp_path: Path) -> None:
    """Three agents publish their probes with their beats; each judges from the
    registry alone and they agree: the slow one is isolated everywhere."""
    clock = ManualClock()
    ms = await open_metastore(f"sqlite:///{tmp_path / 'm.db'}", now_ms=clock.now_ms)
    try:
        ids = ["a", "b", "c"]
        members, isos = [], []
        for i, x in enumerate(ids):
            m = Membership(ms, Peer(x, f"10.0.0.{i}", 9092, None, 9644), clock, dead_after_s=5)
            iso = Isolation(x, S)
            m.report = iso.report
            await m.start()
            members.append(m)
            isos.append(iso)
        for _ in range(4):
            clock.advance(1)
            for x, m, iso in zip(ids, members, isos, strict=True):
                for y in ids:
                    if y != x:
                        iso.record(y, SLOW if y == "b" else FAST)
                await m.tick()
            for m, iso in zip(members, isos, strict=True):
                iso.apply(m.rows, [p.agent_id for p in m.rings.peers], clock.now_ms())
        assert [iso.isolated for iso in isos] == [frozenset({"b"})] * 3
        assert len({json.dumps(iso.verdict.isolated) for iso in isos}) == 1  # same start everywhere
        for m in members:
            await m.stop()
    finally:
        await ms.close()


# -- three in-process agents -------------------------------------------------------------


def _post(url: str) -> int:
    try:
        with urllib.request.urlopen(urllib.request.Request(url, method="POST"), timeout=5) as r:
            return int(r.status)
    except urllib.error.HTTPError as e:
        return int(e.code)


def _wait(cond: Callable[[], Any], timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if v := cond():
            return v
        time.sleep(0.05)  # bounded poll on a real condition
    raise AssertionError(f"timed out waiting for {what}")


@pytest.mark.timeout(60)
def test_a_slow_agent_stops_leading_partitions(
    tmp_path: Path, agent_factory: Callable[..., Any]
) -> None:
    shared = {
        "metastore": f"sqlite:///{tmp_path / 'meta.db'}",
        "objects": f"file://{tmp_path / 'objects'}",
        "cluster_heartbeat_ms": 100,
        "cluster_dead_after_ms": 3000,
        "isolate_slow_ms": 200,
        "isolate_probe_timeout_ms": 400,
        "debug_faults": True,
    }
    agents = [agent_factory(agent_id=str(i), **shared) for i in (1, 2, 3)]
    off = agent_factory(agent_id="9", metastore=f"sqlite:///{tmp_path / 'other.db'}")
    assert _post(f"http://127.0.0.1:{off.server.admin_port}/debug/delay?ms=1000") == 404  # flag off

    def leaders_seen(a: Any) -> set[int]:
        return set(a.call(_leaders(a)))

    _wait(
        lambda: all(leaders_seen(a) == {1, 2, 3} for a in agents), 20, "3 agents leading partitions"
    )
    ad = AdminClient({"bootstrap.servers": agents[0].bootstrap})
    ad.create_topics([NewTopic("iso-topic", 12)])["iso-topic"].result(20)
    # A producer that learnt the leaders before the fault (agent 2 among them).
    acked: list[Any] = []
    prod = Producer({"bootstrap.servers": agents[0].bootstrap, "enable.idempotence": True})

    def produce(n: int) -> None:
        for i in range(n):
            prod.produce("iso-topic", f"v{i}".encode(), key=f"k{i}".encode(),
                         on_delivery=lambda e, m: acked.append(e))  # fmt: skip
        assert prod.flush(30) == 0

    produce(16)
    assert _post(f"http://127.0.0.1:{agents[1].server.admin_port}/debug/delay?ms=1000") == 200
    _wait(
        lambda: all(leaders_seen(a) == {1, 3} for a in agents), 15, "agent 2 isolated by everyone"
    )
    cluster = agents[0].broker.cluster
    assert cluster.isolation.isolated == {"2"}
    assert cluster.isolation.verdict.scores["2"] >= 200
    assert {p.agent_id for p in cluster.brokers()} == {"1", "2", "3"}  # still a member
    assert {cluster.coordinator(f"group-{i}").agent_id for i in range(50)} == {"1", "3"}
    # What a client sees: Metadata from agent 1 and 3 lists all three brokers, leaders 1 and 3.
    for a in (agents[0], agents[2]):
        md = AdminClient({"bootstrap.servers": a.bootstrap}).list_topics("iso-topic", timeout=10)
        assert set(md.brokers) == {1, 2, 3}
        assert {p.leader for p in md.topics["iso-topic"].partitions.values()} <= {1, 3}
    # The producer still sends agent 2's partitions there: it is told NOT_LEADER_OR_FOLLOWER,
    # refreshes its metadata and delivers everything to the new leaders.
    redirects0 = TURNED_AWAY._value.get()
    produce(16)
    assert acked == [None] * 32 and TURNED_AWAY._value.get() > redirects0


async def _leaders_of(a: Any) -> list[int]:
    return list(a.broker.cluster.leaders("topic-x", 64, None))


def _leaders(a: Any) -> Any:
    return _leaders_of(a)


async def test_fault_delay_wraps_every_answer() -> None:
    """The debug delay keeps each answer as the handler made it (plain, deferred,
    none for acks=0), only later; off, the dispatcher's answers pass untouched."""
    answers: list[Any] = ["plain", None]

    async def inner(*_: Any) -> Any:
        if answers:
            return answers.pop(0)
        fut: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        fut.set_result("later")
        return Deferred(fut)

    faults = Faults()
    dispatch = wrap_dispatch(inner, faults)
    assert await dispatch() == "plain"
    faults.set_delay(1)
    got = [await dispatch(), await dispatch()]
    assert all(isinstance(d, Deferred) for d in got)
    assert [await d.awaitable for d in got] == [None, "later"] and faults.delayed == 2
