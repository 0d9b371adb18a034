"""The agent's commit loop with two commits in flight (metastore/commit_order.py).

A metastore that sequences calls in turn order (``ordered_commits``) gets the
next group while the previous one is still committing; groups are answered
strictly in seal order; a group that fails after it was sequenced is not
retried (a later group may already hold the offsets after it) and its requests
get a retriable error, while one that fails before is retried ahead of the
next. The fake sequences on SQLite (its single writer) and marks the turn when
it holds the write lock, like Postgres does once its partition rows are locked.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from agent.clock import ManualClock
from agent.produce import KAFKA_STORAGE_ERROR, ProducePipeline
from metastore import ErrorCode, MetastoreError, open_metastore
from objectstore import open_object_store
from tests.agent.test_produce_pipeline import batch, item


def _started_pipeline(meta: Any) -> ProducePipeline:
    """An agent's produce pipeline over ``meta``: every batch seals at once (flush_bytes
    1), no ticker, a manual clock."""
    p = ProducePipeline(
        open_object_store("memory://", retry=False), meta, agent_id="agent-1",
        flush_bytes=1, flush_interval_ms=250, upload_concurrency=4,
        max_buffered_bytes=1 << 20, clock=ManualClock(),
    )  # fmt: skip
    p.start(ticker=False)
    return p


class _OrderedMeta:
    """SQLite underneath; per call a script: ``hold`` (sequenced, answer held until
    released), ``fail-after`` (sequenced, then an error, nothing stored),
    ``fail-before`` (an error before taking its turn)."""

    ordered_commits = True

    def __init__(self, meta) -> None:
        self.meta = meta
        self.script: list[str] = []
        self.calls: list[list[str]] = []
        self.release = asyncio.Event()
        self.arrived: list[asyncio.Event] = [asyncio.Event() for _ in range(8)]
        self.returned: list[asyncio.Event] = [asyncio.Event() for _ in range(8)]
        self.in_flight = 0
        self.max_in_flight = 0

    async def commit_objects(self, objects, *, turn):
        n = len(self.calls)
        self.calls.append([o.key for o in objects])
        what = self.script[n] if n < len(self.script) else "ok"
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        self.arrived[n].set()
        try:
            await turn.begin()
            if what == "fail-before":
                await self.arrived[n + 1].wait()  # the next group is in flight meanwhile
                raise MetastoreError("lost connection before the locks")
            await turn.wait()
            if what == "fail-after":
                turn.done()
                await self.arrived[n + 1].wait()
                raise MetastoreError("COMMIT failed")
            res = await self.meta.commit_objects(objects)
            turn.done()
            if what == "hold":
                await self.release.wait()
            return res
        finally:
            self.in_flight -= 1
            self.returned[n].set()

    def __getattr__(self, name):
        return getattr(self.meta, name)


@pytest.fixture
async def meta(tmp_path) -> AsyncIterator:
    ms = await open_metastore(f"sqlite:///{tmp_path / 'meta.db'}")
    yield ms
    await ms.close()


async def _run(meta, script: list[str], n: int):
    """``n`` requests, one segment each (to partitions 0 and 1); returns the
    ordered metastore, the futures, and the order in which they were answered."""
    topic = (await meta.create_topic("t", 2)).topic
    ordered = _OrderedMeta(meta)
    ordered.script = script
    p = _started_pipeline(ordered)
    answered: list[int] = []
    futs = []
    data = batch(10)
    for i in range(n):
        await p.reserve(len(data))
        fut = p.append([item(topic.id, 0, data), item(topic.id, 1, data)], len(data))
        fut.add_done_callback(lambda _f, i=i: answered.append(i))
        futs.append(fut)
        if i == 0:
            await asyncio.wait_for(ordered.arrived[0].wait(), 10)
    return p, ordered, futs, answered, topic


async def test_two_in_flight_answered_in_seal_order(meta) -> None:
    p, ordered, futs, answered, _topic = await _run(meta, ["hold"], 2)
    await asyncio.wait_for(ordered.arrived[1].wait(), 10)  # second group while the first is held
    assert ordered.max_in_flight == 2
    # the second group's commit has returned, but it is answered after the first
    await asyncio.wait_for(ordered.returned[1].wait(), 10)
    assert ordered.in_flight == 1
    assert answered == [] and not futs[1].done()
    ordered.release.set()
    results = await asyncio.wait_for(asyncio.gather(*futs), 10)
    assert answered == [0, 1]
    assert [[r.base_offset for r in rs] for rs in results] == [[0, 0], [10, 10]]
    assert all(r.error == ErrorCode.NONE for rs in results for r in rs)
    await p.close()


async def test_first_fails_after_sequencing_second_in_flight(meta) -> None:
    p, ordered, futs, answered, topic = await _run(meta, ["fail-after"], 2)
    results = await asyncio.wait_for(asyncio.gather(*futs), 10)
    assert answered == [0, 1]
    assert [r.error for r in results[0]] == [KAFKA_STORAGE_ERROR] * 2  # the clients retry
    assert len(ordered.calls) == 2  # not retried: it would be sequenced after the second
    assert [(r.error, r.base_offset) for r in results[1]] == [(ErrorCode.NONE, 0)] * 2
    # nothing acknowledged is missing, offsets contiguous
    for part in (0, 1):
        found = await meta.find_batches(topic.id, part, 0, 1 << 20)
        assert [b.base_offset for b in found.batches] == [0]
        assert found.high_watermark == 10
    await p.close()


async def test_first_fails_before_sequencing_is_retried_ahead_of_second(meta) -> None:
    p, ordered, futs, answered, _topic = await _run(meta, ["fail-before"], 2)
    results = await asyncio.wait_for(asyncio.gather(*futs), 10)
    assert answered == [0, 1]
    assert len(ordered.calls) == 3 and ordered.calls[2] == ordered.calls[0]  # retried
    assert [[r.base_offset for r in rs] for rs in results] == [[0, 0], [10, 10]]
    assert all(r.error == ErrorCode.NONE for rs in results for r in rs)
    await p.close()


async def test_without_ordered_commits_one_in_flight(meta) -> None:
    topic = (await meta.create_topic("t", 2)).topic

    class Plain:  # the same fake, without the class flag: calls come one at a time
        def __init__(self) -> None:
            self.in_flight = 0
            self.max_in_flight = 0

        async def commit_objects(self, objects):
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
            try:
                return await meta.commit_objects(objects)
            finally:
                self.in_flight -= 1

    plain = Plain()
    p = _started_pipeline(plain)
    data = batch(10)
    futs = []
    for _ in range(6):
        await p.reserve(len(data))
        futs.append(p.append([item(topic.id, 0, data)], len(data)))
    results = await asyncio.wait_for(asyncio.gather(*futs), 10)
    assert [rs[0].base_offset for rs in results] == [0, 10, 20, 30, 40, 50]
    assert plain.max_in_flight == 1
    await p.close()
