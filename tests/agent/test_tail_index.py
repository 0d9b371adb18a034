"""The tail index (agent.fetch.tail_index): wide Fetches at the tail are answered from the
agent's own commits, exactly as the metastore would answer them (issue 18)."""

from __future__ import annotations

import uuid

import agent.fetch.lookup as fetch_lookup
import agent.fetch.width as fetch_width
from agent.clock import ManualClock
from agent.fetch.tail_index import TailIndex
from metastore.types import BatchLocation, BatchToCommit, CommitResult, ErrorCode
from tests.agent.test_fetch_protocol import fetch, make_topic, produce_batch
from tests.agent.test_fetch_width import _answer, count_calls, per_partition_answer

T = uuid.UUID(int=7)


def _batch(partition: int, pos: int, records: int = 1, size: int = 100) -> BatchToCommit:
    return BatchToCommit(T, partition, pos, size, records, records - 1, 0, 5, -1, -1, -1, False)


def _ok(base: int) -> CommitResult:
    return CommitResult(ErrorCode.NONE, base, 1, 0)


def _bases(found):
    return None if found is None else [(b.object_key, b.base_offset, b.last_offset) for b in found]


def test_a_chain_grows_by_consecutive_offsets_and_restarts_after_a_gap():
    clock = ManualClock()
    t = TailIndex(clock, ttl_ms=1000)
    t.committed("o1", [_batch(0, 0, 2), _batch(0, 100, 3), _batch(1, 200)], [_ok(10), _ok(12), _ok(0)])
    assert _bases(t.find(T, 0, 10, 1 << 20, 0)) == [("o1", 10, 11), ("o1", 12, 14)]
    assert _bases(t.find(T, 0, 13, 1 << 20, 0)) == [("o1", 12, 14)]  # the batch holding 13 first
    assert t.find(T, 0, 15, 1 << 20, 0) is None  # the chain's end: the metastore decides
    assert t.find(T, 0, 9, 1 << 20, 0) is None  # before the chain
    assert t.find(T, 0, 12, 1 << 20, 13) is None  # below the log start
    assert t.find(T, 2, 0, 1 << 20, 0) is None

    # A duplicate (answered with its original's offset) changes nothing.
    t.committed("o2", [_batch(0, 0, 3)], [_ok(12)])
    assert _bases(t.find(T, 0, 12, 1 << 20, 0)) == [("o1", 12, 14)]
    # The next offset extends the chain; a later one (another writer committed 16-19) restarts it.
    t.committed("o3", [_batch(0, 0, 1)], [_ok(15)])
    assert _bases(t.find(T, 0, 10, 1 << 20, 0))[-1] == ("o3", 15, 15)
    t.committed("o4", [_batch(0, 0, 2)], [_ok(20)])
    assert t.find(T, 0, 15, 1 << 20, 0) is None and t.find(T, 0, 10, 1 << 20, 0) is None
    assert _bases(t.find(T, 0, 21, 1 << 20, 0)) == [("o4", 20, 21)]


def test_failed_batches_and_answers_without_results_are_not_recorded():
    t = TailIndex(ManualClock(), ttl_ms=1000)
    t.committed("o1", [_batch(0, 0), _batch(0, 100)], [_ok(0), CommitResult(ErrorCode.INVALID_PRODUCER_EPOCH, -1, 1, 0)])
    t.committed("o2", [_batch(0, 0)], [])  # committed by an earlier attempt: no per-batch results
    assert _bases(t.find(T, 0, 0, 1 << 20, 0)) == [("o1", 0, 0)]
    assert t.find(T, 0, 1, 1 << 20, 0) is None


def test_answers_keep_the_byte_limit_and_expire():
    clock = ManualClock()
    t = TailIndex(clock, ttl_ms=1000)
    t.committed("o1", [_batch(0, 100 * i) for i in range(5)], [_ok(i) for i in range(5)])
    assert [b.base_offset for b in t.find(T, 0, 1, 250, 0)] == [1, 2]
    assert [b.base_offset for b in t.find(T, 0, 1, 1, 0)] == [1]  # the first batch always
    clock.advance(0.6)
    t.committed("o2", [_batch(0, 0)], [_ok(5)])
    clock.advance(0.6)  # o1's batches are 1.2 s old, o2's 0.6 s
    assert t.find(T, 0, 2, 1 << 20, 0) is None
    assert _bases(t.find(T, 0, 5, 1 << 20, 0)) == [("o2", 5, 5)]
    assert TailIndex(clock, ttl_ms=0).enabled is False


def test_memory_is_bounded():
    t = TailIndex(ManualClock(), ttl_ms=1000, max_batches=50, per_partition=4)
    t.committed("o1", [_batch(0, i) for i in range(10)], [_ok(i) for i in range(10)])
    assert [b.base_offset for b in t.find(T, 0, 6, 1 << 20, 0)] == [6, 7, 8, 9]
    assert t.find(T, 0, 5, 1 << 20, 0) is None
    t.committed("o2", [_batch(p, 0) for p in range(1, 60)], [_ok(0)] * 59)  # over 50 in all: cleared
    assert t.find(T, 0, 9, 1 << 20, 0) is None and t.find(T, 1, 0, 1 << 20, 0) is None


def test_answers_carry_the_commit_and_topics_are_apart():
    t = TailIndex(ManualClock(), ttl_ms=1000)
    u = uuid.UUID(int=8)
    other = BatchToCommit(u, 0, 300, 50, 1, 0, 0, 6, -1, -1, -1, False)
    t.committed("o1", [_batch(0, 100, 2, size=70), other], [_ok(3), CommitResult(ErrorCode.NONE, 0, 9, 0)])
    want = [BatchLocation("o1", 100, 70, 3, 4, 2, 5, 1)]
    assert t.find(T, 0, 4, 1 << 20, 0) == want
    assert t.find(uuid.UUID(int=7), 0, 3, 1, 0) == want  # (asked again, by an equal id)
    assert t.find(u, 0, 0, 1 << 20, 0) == [BatchLocation("o1", 300, 50, 0, 0, 1, 6, 9)]
    t.forget(T, 0)
    assert t.find(T, 0, 3, 1 << 20, 0) is None and t.find(u, 0, 0, 1 << 20, 0) is not None


def test_wide_fetch_at_the_tail_needs_no_batch_lookup(floe_agent, monkeypatch):
    """A wide Fetch of partitions this agent just wrote is answered from the tail
    index (one watermark query, no batch lookup), byte for byte as the metastore's
    lookups answer it; the log start is still the metastore's."""
    make_topic(floe_agent, "tw", partitions=12)
    for p, n in ((1, 3), (1, 2), (7, 4), (11, 1)):
        produce_batch(floe_agent, "tw", p, n, tag=f"p{p}-")
    parts = [("tw", p, 0) for p in range(12)] + [("tw", 1, 3), ("tw", 1, 4), ("tw", 7, 4), ("tw", 7, 9)]
    meta = floe_agent.broker.meta
    calls = count_calls(monkeypatch, meta, ("find_batches", "find_batches_many", "topic_offsets"))
    tail = floe_agent.broker.tail
    hits = tail.hits
    wide = _answer(fetch(floe_agent, parts, max_bytes=1 << 20, partition_max_bytes=1 << 16))
    # Every partition with data came from the tail; only 7@9 (past the high
    # watermark: out of range) was left to the metastore.
    assert calls == ["topic_offsets", "find_batches"]
    assert tail.hits - hits == 5
    assert wide == per_partition_answer(floe_agent, monkeypatch, parts, calls)
    assert sum(1 for *_, err, _, _, rec in wide if err == 0 and rec) == 5

    # DeleteRecords moves the log start past the tail: the metastore answers out of range.
    async def delete() -> None:
        tid = (await meta.get_topic("tw")).id
        res = await meta.delete_records(tid, 1, 4)
        assert res.error == 0, res

    floe_agent.call(delete())
    # Announced as the DeleteRecords handler (or another agent's wake-up) does: the
    # agent's watermark views are renewed, so the log start is the metastore's.
    floe_agent.broker.notifier.notify_all()
    monkeypatch.setattr(fetch_width, "BULK_MIN", 8)
    monkeypatch.setattr(fetch_lookup, "LOOKUP_MANY_MIN", 2)
    resp = fetch(floe_agent, [("tw", p, 0) for p in range(12)] + [("tw", 1, 4)], max_bytes=1 << 20)
    got = {(p.partition_index, i): (p.error_code, p.log_start_offset)
           for i, p in enumerate(resp.responses[0].partitions)}  # fmt: skip
    assert got[(1, 1)] == (ErrorCode.OFFSET_OUT_OF_RANGE, -1)
    assert got[(1, 12)] == (0, 4)
