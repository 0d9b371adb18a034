"""Adaptive sealing (AutoBatch): the open segment is sealed once flush_min_interval
has passed since the previous seal and every waiting connection is blocked at its
learned in-flight limit, or the agent is idle; never before the minimum, always by
the interval. Injected clock, no sleeps."""

from __future__ import annotations

import asyncio

from agent.clock import ManualClock
from agent.metrics import METRICS
from agent.produce.autobatch import ProduceFlow, SealPolicy
from objectstore import open_object_store
from tests.agent.test_produce_pipeline import batch, item, make, meta, topic  # noqa: F401


def seals(reason: str) -> float:
    return METRICS.registry.get_sample_value("floe_segment_seals_total", {"reason": reason}) or 0.0


def test_policy_learns_the_limit_and_tracks_blocked_flows():
    pol = SealPolicy()
    a, b = ProduceFlow(), ProduceFlow()
    for _ in range(5):
        pol.appended(a, 0.0)
    assert (a.outstanding, a.limit) == (5, 5) and pol.all_blocked
    pol.appended(b, 0.0)
    assert pol.all_blocked  # b's first request: at its (so far) limit of 1
    pol.released(a)  # a got an answer: it can send again
    assert not pol.all_blocked
    pol.appended(a, 0.0)
    assert pol.all_blocked
    pol.sealed()
    assert not pol.all_blocked and a.in_open == 0
    for _ in range(5):
        pol.released(a)
    pol.appended(a, 0.0)
    assert a.limit == 5 and not pol.all_blocked  # 1 of 5: more may come


async def _settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


async def test_blocked_connections_seal_at_the_minimum_interval(meta, topic):  # noqa: F811
    clock = ManualClock()
    store = open_object_store("memory://", retry=False)
    p = make(store, meta, clock, flush_interval_ms=250, flush_min_interval_ms=100)
    p.start(ticker=False)
    data = batch()
    flow = ProduceFlow()
    before = seals("blocked")
    await p.reserve(len(data))
    fut = p.append([item(topic.id, 0, data)], len(data), flow)
    p.tick()  # blocked (a synchronous client so far) but younger than the minimum
    await _settle()
    assert not fut.done()
    clock.advance(0.1)
    p.tick()
    await asyncio.wait_for(fut, 10)
    assert seals("blocked") == before + 1
    assert flow.outstanding == 0
    await p.close()


async def test_minimum_counts_from_the_previous_seal_not_the_first_request(meta, topic):  # noqa: F811
    """A blocked client's next request arrives only after its previous segment was
    committed; the minimum must not start again there, or every cycle is the
    minimum plus the commit."""
    clock = ManualClock()
    store = open_object_store("memory://", retry=False)
    p = make(store, meta, clock, flush_interval_ms=250, flush_min_interval_ms=100)
    p.start(ticker=False)
    data = batch()
    flow = ProduceFlow()  # a synchronous client: one request in flight
    before = seals("blocked")
    await p.reserve(len(data))
    first = p.append([item(topic.id, 4, data)], len(data), flow)
    clock.advance(0.1)
    p.tick()
    await asyncio.wait_for(first, 10)  # sealed at t = 0.1
    clock.advance(0.06)  # the commit took 60 ms; the next request comes now
    await p.reserve(len(data))
    second = p.append([item(topic.id, 4, data)], len(data), flow)
    await _settle()
    assert not second.done()  # blocked, but only 60 ms since the last seal
    clock.advance(0.038)
    p.tick()
    await _settle()
    assert not second.done()  # 98 ms since the last seal
    clock.advance(0.003)
    p.tick()  # 101 ms since the last seal, 41 ms after the request: sealed
    await asyncio.wait_for(second, 10)
    assert seals("blocked") == before + 2
    await p.close()


async def test_learned_limit_seals_on_the_request_that_reaches_it(meta, topic):  # noqa: F811
    clock = ManualClock()
    store = open_object_store("memory://", retry=False)
    p = make(store, meta, clock, flush_interval_ms=250, flush_min_interval_ms=100)
    p.start(ticker=False)
    data = batch()
    flow = ProduceFlow()
    # An idempotent producer: 5 requests in flight, then it waits.
    futs = []
    for _ in range(5):
        await p.reserve(len(data))
        futs.append(p.append([item(topic.id, 1, data)], len(data), flow))
    clock.advance(0.25)
    p.tick()
    await asyncio.wait_for(asyncio.gather(*futs), 10)
    assert flow.limit == 5
    # Next round: 4 requests, the last ones past the minimum interval, still
    # arriving (no idle gap of 25 ms): no seal.
    before = seals("blocked")
    futs = []
    for step in (0.09, 0.01, 0.01, 0.0):
        await p.reserve(len(data))
        futs.append(p.append([item(topic.id, 1, data)], len(data), flow))
        clock.advance(step)
    p.tick()
    await _settle()
    assert not any(f.done() for f in futs)
    # The 5th reaches the learned limit: waiting cannot bring more, sealed at once.
    await p.reserve(len(data))
    futs.append(p.append([item(topic.id, 1, data)], len(data), flow))
    results = await asyncio.wait_for(asyncio.gather(*futs), 10)
    assert seals("blocked") == before + 1
    assert [r[0].base_offset for r in results] == [15, 18, 21, 24, 27]
    await p.close()


async def test_idle_agent_seals_and_busy_one_waits_for_the_interval(meta, topic):  # noqa: F811
    clock = ManualClock()
    store = open_object_store("memory://", retry=False)
    p = make(store, meta, clock, flush_interval_ms=250, flush_min_interval_ms=100)
    p.start(ticker=False)
    data = batch()
    flow = ProduceFlow()
    flow.limit = 1000  # librdkafka with idempotence off: never blocked
    before_idle, before_interval = seals("idle"), seals("interval")
    # Busy: a request every 10 ms, the idle gap (25 ms) never passes.
    futs = []
    for _ in range(20):
        await p.reserve(len(data))
        futs.append(p.append([item(topic.id, 2, data)], len(data), flow))
        clock.advance(0.01)
        p.tick()
    await _settle()
    assert not any(f.done() for f in futs)
    clock.advance(0.051)
    p.tick()  # 250 ms: the upper bound
    await asyncio.wait_for(asyncio.gather(*futs), 10)
    assert seals("interval") == before_interval + 1
    # Idle: one request, then nothing; sealed at the minimum interval.
    await p.reserve(len(data))
    fut = p.append([item(topic.id, 2, data)], len(data), flow)
    clock.advance(0.098)
    p.tick()
    await _settle()
    assert not fut.done()
    clock.advance(0.003)
    p.tick()
    await asyncio.wait_for(fut, 10)
    assert seals("idle") == before_idle + 1
    await p.close()


async def test_fixed_interval_when_minimum_is_not_below_it(meta, topic):  # noqa: F811
    clock = ManualClock()
    store = open_object_store("memory://", retry=False)
    p = make(store, meta, clock, flush_interval_ms=250, flush_min_interval_ms=250)
    p.start(ticker=False)
    data = batch()
    await p.reserve(len(data))
    fut = p.append([item(topic.id, 3, data)], len(data), ProduceFlow())
    clock.advance(0.2)
    p.tick()
    await _settle()
    assert not fut.done()
    clock.advance(0.051)
    p.tick()
    await asyncio.wait_for(fut, 10)
    await p.close()
