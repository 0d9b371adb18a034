"""Watermark views (issue 18): the Fetches planned between two commits share one read
of a topic's watermarks; a notified commit, DeleteRecords or the lifetime renews it."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from agent.clock import ManualClock
from agent.fetch.watermark_views import WatermarkViews
from agent.metrics import METRICS
from agent.notify import CommitNotifier
from kafka_protocol import messages as M
from metastore.types import MetastoreError, PartitionOffsets, TopicOffsets
from tests.agent.test_fetch_protocol import make_topic, produce_batch
from tests.agent.test_fetch_width import count_calls
from tests.interop._raw import RawConn

TOPIC = uuid.UUID(int=7)


class _Meta:
    """``topic_offsets`` answering the high watermark ``hwm`` once ``gate`` opens."""

    def __init__(self) -> None:
        self.hwm = 5
        self.calls = 0
        self.gate = asyncio.Event()
        self.gate.set()
        self.fail = False

    async def topic_offsets(self, topic_id: uuid.UUID) -> TopicOffsets:
        self.calls += 1
        hwm = self.hwm  # the snapshot is taken when the read begins
        await self.gate.wait()
        if self.fail:
            raise MetastoreError("down")
        return TopicOffsets([PartitionOffsets(0, 0, hwm)], True)


def _setup(ttl_ms: int = 100, *, gated: bool = False) -> tuple[_Meta, CommitNotifier, ManualClock, WatermarkViews]:
    """A metastore stand-in (its reads held until ``gate`` opens when ``gated``), a
    notifier, a clock and the views over them."""
    meta, notifier, clock = _Meta(), CommitNotifier(), ManualClock()
    if gated:
        meta.gate.clear()
    views = WatermarkViews(meta, clock, lambda: notifier.generation, ttl_ms=ttl_ms)  # type: ignore[arg-type]
    return meta, notifier, clock, views


def _hwm(got: TopicOffsets) -> int:
    return got.partitions[0].high_watermark


async def test_reads_between_commits_share_one_query() -> None:
    meta, notifier, clock, views = _setup(gated=True)
    first = asyncio.ensure_future(views.topic_offsets(TOPIC))
    second = asyncio.ensure_future(views.topic_offsets(TOPIC))
    await asyncio.sleep(0)
    meta.gate.set()
    assert [_hwm(await first), _hwm(await second)] == [5, 5]
    assert _hwm(await views.topic_offsets(TOPIC)) == 5
    assert meta.calls == 1 and views.reads == 1

    meta.hwm = 9  # a commit, notified: the next plan reads again
    notifier.notify([(TOPIC, 0)])
    assert _hwm(await views.topic_offsets(TOPIC)) == 9 and meta.calls == 2

    meta.hwm = 11  # not notified (another agent's DeleteRecords, say): the lifetime bounds it
    clock.advance(0.099)
    assert _hwm(await views.topic_offsets(TOPIC)) == 9
    clock.advance(0.002)
    assert _hwm(await views.topic_offsets(TOPIC)) == 11 and meta.calls == 3


async def test_a_read_overtaken_by_a_commit_answers_its_waiters_but_is_not_kept() -> None:
    meta, notifier, _, views = _setup(gated=True)
    first = asyncio.ensure_future(views.topic_offsets(TOPIC))
    for _ in range(3):  # until the read has begun (the task, then the query)
        await asyncio.sleep(0)
    assert meta.calls == 1
    meta.hwm = 6
    notifier.notify_all()  # a commit lands while the read runs
    late = asyncio.ensure_future(views.topic_offsets(TOPIC))  # after it: does not join that read
    await asyncio.sleep(0)
    meta.gate.set()
    assert _hwm(await first) == 5 and _hwm(await late) == 6
    assert _hwm(await views.topic_offsets(TOPIC)) == 6 and meta.calls == 2


async def test_a_failed_read_reaches_every_waiter_and_is_not_kept() -> None:
    meta, _, _, views = _setup(gated=True)
    meta.fail = True
    waiters = [asyncio.ensure_future(views.topic_offsets(TOPIC)) for _ in range(2)]
    await asyncio.sleep(0)
    meta.gate.set()
    for w in waiters:
        with pytest.raises(MetastoreError):
            await w
    meta.fail = False
    assert _hwm(await views.topic_offsets(TOPIC)) == 5 and meta.calls == 2


async def test_a_cancelled_fetch_leaves_the_read_to_the_others() -> None:
    meta, _, _, views = _setup(gated=True)
    first = asyncio.ensure_future(views.topic_offsets(TOPIC))
    second = asyncio.ensure_future(views.topic_offsets(TOPIC))
    await asyncio.sleep(0)
    first.cancel()
    meta.gate.set()
    assert _hwm(await second) == 5 and meta.calls == 1
    assert first.cancelled()


async def test_lifetime_zero_reads_every_time() -> None:
    meta, _, _, views = _setup(ttl_ms=0)
    for _ in range(3):
        await views.topic_offsets(TOPIC)
    assert meta.calls == 3


PARTS = 12


def _wide(conn: RawConn, topic: str, offsets: dict[int, int]) -> dict[int, tuple[int, int, int, bool]]:
    """Partition -> (error, high watermark, log start, has records) of one sessionless
    read_committed Fetch naming every partition (from ``offsets``, else 0)."""
    F = M.FetchRequest.FetchTopic
    parts = [
        F.FetchPartition(partition=p, fetch_offset=offsets.get(p, 0), partition_max_bytes=1 << 20)
        for p in range(PARTS)
    ]
    req = M.FetchRequest(
        replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=1 << 20, isolation_level=1,
        session_id=0, session_epoch=-1, topics=[F(topic=topic, partitions=parts)],
    )  # fmt: skip
    resp = conn.request(req, M.FetchResponse, 11)
    return {
        p.partition_index: (p.error_code, p.high_watermark, p.log_start_offset, bool(p.records))
        for p in resp.responses[0].partitions
    }


def test_wide_fetches_share_the_watermarks_until_a_commit_or_delete_records(agent_factory, monkeypatch) -> None:
    # A lifetime far beyond the test: only notifications renew the view here.
    agent = agent_factory(metadata_cache_ms=600_000)
    make_topic(agent, "wv", partitions=PARTS)
    produce_batch(agent, "wv", 1, 3)
    calls = count_calls(monkeypatch, agent.broker.meta, ("topic_offsets", "partition_offsets"))
    shared = METRICS.watermark_reads.labels("shared")
    with RawConn(agent.port) as a, RawConn(agent.port) as b:
        first = _wide(a, "wv", {})
        assert first[1] == (0, 3, 0, True) and first[2] == (0, 0, 0, False)
        before = shared._value.get()
        assert _wide(b, "wv", {1: 3}) == {**first, 1: (0, 3, 0, False)}  # another consumer, caught up
        assert calls == ["topic_offsets"] and shared._value.get() == before + 1

        produce_batch(agent, "wv", 2, 2)  # a commit: the next Fetch reads again, and sees it
        after = _wide(a, "wv", {1: 3})
        assert calls == ["topic_offsets"] * 2
        assert after[2] == (0, 2, 0, True) and after[1] == (0, 3, 0, False)

        D = M.DeleteRecordsRequest.DeleteRecordsTopic
        req = M.DeleteRecordsRequest(
            topics=[D(name="wv", partitions=[D.DeleteRecordsPartition(partition_index=1, offset=2)])],
            timeout_ms=1000,
        )
        assert a.request(req, M.DeleteRecordsResponse, 2).topics[0].partitions[0].error_code == 0
        moved = _wide(b, "wv", {1: 3})
        assert calls == ["topic_offsets"] * 3
        assert moved[1] == (0, 3, 2, False)  # the new log start, at once
        assert _wide(b, "wv", {})[1][0] == 1  # below it: OFFSET_OUT_OF_RANGE
