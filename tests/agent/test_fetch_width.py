"""Fetch at width: a request naming many partitions costs one watermark query and
one batched lookup, and answers exactly as the per-partition path does (issue 18)."""

from __future__ import annotations

import uuid

import agent.fetch.answer as fetch_answer
import agent.fetch.lookup as fetch_lookup
import agent.fetch.poll as fetch_poll
import agent.fetch.width as fetch_width
from tests.agent.test_fetch_protocol import fetch, make_topic, produce_batch


def _answer(resp):
    return [
        (t.topic, p.partition_index, p.error_code, p.high_watermark, p.log_start_offset, bytes(p.records))
        for t in resp.responses
        for p in t.partitions
    ]


def count_calls(monkeypatch, meta, names) -> list[str]:
    """The names of ``meta``'s methods called from now on, in call order."""
    calls: list[str] = []
    for name in names:
        real = getattr(meta, name)

        async def counted(*a, _real=real, _name=name, **kw):
            calls.append(_name)
            return await _real(*a, **kw)

        monkeypatch.setattr(meta, name, counted)
    return calls


def per_partition_answer(agent, monkeypatch, parts, calls: list[str], **kw):
    """The answer of the per-partition path (one ``find_batches`` per partition),
    to compare a wide path's answer with."""
    calls.clear()
    monkeypatch.setattr(fetch_width, "BULK_MIN", 1 << 30)
    monkeypatch.setattr(fetch_width, "SMALL_TOPIC", 0)
    monkeypatch.setattr(fetch_lookup, "LOOKUP_MANY_MIN", 1 << 30)
    answer = _answer(fetch(agent, parts, max_bytes=1 << 20, partition_max_bytes=1 << 16, **kw))
    assert set(calls) - {"stable_offsets"} == {"find_batches"}
    return answer


def test_wide_fetch_matches_per_partition_path(floe_agent, monkeypatch):
    make_topic(floe_agent, "fw", partitions=40)
    for p, n in ((1, 3), (1, 2), (7, 4), (30, 1)):
        produce_batch(floe_agent, "fw", p, n, tag=f"p{p}-")
    parts = [("fw", p, 0) for p in range(40)]
    parts += [("fw", 1, 3), ("fw", 1, 5), ("fw", 7, 9), ("fw", 40, 0), ("nope", 0, 0)]
    calls = count_calls(monkeypatch, floe_agent.broker.meta, ("find_batches", "find_batches_many", "topic_offsets"))
    monkeypatch.setattr(fetch_width, "BULK_MIN", 2)  # 5 partitions with data or errors
    wide = _answer(fetch(floe_agent, parts, max_bytes=1 << 20, partition_max_bytes=1 << 16))
    assert sorted(calls) == ["find_batches_many", "topic_offsets"]
    assert wide == per_partition_answer(floe_agent, monkeypatch, parts, calls)
    by_part = {(t, p): (err, hwm) for t, p, err, hwm, _, _ in wide}
    assert by_part[("fw", 1)] == (0, 5) and by_part[("fw", 7)] == (1, -1)  # last: 9 > hwm 4
    assert by_part[("fw", 40)][0] == 3 and by_part[("nope", 0)][0] == 3
    assert sum(1 for _, _, err, _, _, rec in wide if err == 0 and rec) == 4  # p1@0, p1@3, p7@0, p30@0


def test_fetch_of_a_few_partitions_is_one_lookup(floe_agent, monkeypatch):
    """A Fetch naming a few partitions of a large topic (a worker's share of a
    consumer's assignment, below BULK_MIN) looks them all up in one metastore call,
    not one call each."""
    make_topic(floe_agent, "fw3", partitions=fetch_width.SMALL_TOPIC + 1)
    for p in range(3):
        produce_batch(floe_agent, "fw3", p, 2, tag=f"p{p}-")
    calls = count_calls(monkeypatch, floe_agent.broker.meta, ("find_batches", "find_batches_many"))
    resp = fetch(floe_agent, [("fw3", p, 0) for p in range(3)], max_bytes=1 << 20, partition_max_bytes=1 << 16)
    assert calls == ["find_batches_many"]
    assert [(p.partition_index, p.error_code, p.high_watermark) for p in resp.responses[0].partitions] == [
        (0, 0, 2), (1, 0, 2), (2, 0, 2)
    ]
    assert all(p.records for p in resp.responses[0].partitions)


def test_small_topic_fetch_is_answered_from_watermarks_and_own_commits(floe_agent, monkeypatch):
    """A Fetch naming 3 partitions of a 6-partition topic (a Java consumer's share on
    one of two workers) costs one watermark query and no batch lookup when this
    agent committed the batches, read_committed included; the answer is the
    per-partition path's, byte for byte."""
    make_topic(floe_agent, "fs6", partitions=6)
    for p in range(3):
        produce_batch(floe_agent, "fs6", p, 2, tag=f"p{p}-")
    parts = [("fs6", 0, 0), ("fs6", 1, 1), ("fs6", 2, 2), ("fs6", 3, 0)]
    names = ("find_batches", "find_batches_many", "topic_offsets", "stable_offsets")
    calls = count_calls(monkeypatch, floe_agent.broker.meta, names)
    got = fetch(floe_agent, parts, max_bytes=1 << 20, partition_max_bytes=1 << 16, isolation_level=1)
    assert calls == ["topic_offsets"]
    answer = _answer(got)
    assert [(p, err, hwm, bool(rec)) for _, p, err, hwm, _, rec in answer] == [
        (0, 0, 2, True), (1, 0, 2, True), (2, 0, 2, False), (3, 0, 0, False)
    ]
    assert answer == per_partition_answer(floe_agent, monkeypatch, parts, calls, isolation_level=1)


def test_compacted_topic_is_never_read_from_the_tail_index(floe_agent, monkeypatch):
    """The compactor rewrites a compacted topic's batches: a Fetch of it asks the
    metastore what is left, never this agent's copies of what it committed."""
    make_topic(floe_agent, "fc6", partitions=6, config={"cleanup.policy": "compact"})
    for p in range(2):
        produce_batch(floe_agent, "fc6", p, 2, tag=f"p{p}-")
    calls = count_calls(monkeypatch, floe_agent.broker.meta, ("find_batches", "find_batches_many", "topic_offsets"))
    hits = floe_agent.broker.tail.hits
    got = fetch(floe_agent, [("fc6", 0, 0), ("fc6", 1, 0)], max_bytes=1 << 20, partition_max_bytes=1 << 16)
    assert calls == ["topic_offsets", "find_batches_many"] and floe_agent.broker.tail.hits == hits
    assert [bool(p.records) for p in got.responses[0].partitions] == [True, True]


def test_long_poll_looks_once_per_commit_and_misses_none(floe_agent, monkeypatch):
    """A caught-up consumer's long poll registers for commit wake-ups before its
    first look, so it waits right after one empty look (not two), and a commit
    landing while that look runs still wakes it at once."""
    import asyncio
    import threading
    import time

    make_topic(floe_agent, "lw", partitions=2)
    real = fetch_poll.fetch_once
    looks: list[int] = []
    looked, produced = threading.Event(), threading.Event()

    async def counted(*a, **kw):
        res = await real(*a, **kw)
        looks.append(sum(len(r.records) for r in res))
        if len(looks) == 1 and gate:
            looked.set()  # the first look found nothing; a commit lands before it returns
            assert await asyncio.to_thread(produced.wait, 30)
        return res

    monkeypatch.setattr(fetch_poll, "fetch_once", counted)
    gate = False
    t0 = time.monotonic()
    fetch(floe_agent, [("lw", 0, 0), ("lw", 1, 0)], max_wait_ms=300)
    assert looks == [0] and time.monotonic() - t0 >= 0.25  # one look, then the whole wait

    looks.clear()
    gate = True
    out = {}
    th = threading.Thread(target=lambda: out.update(r=fetch(floe_agent, [("lw", 0, 0), ("lw", 1, 0)],
                                                              max_wait_ms=30_000, timeout=60)))
    th.start()
    assert looked.wait(30)
    produce_batch(floe_agent, "lw", 1, 3)
    produced.set()
    th.join(60)
    assert not th.is_alive()
    assert looks[0] == 0 and looks[-1] > 0 and len(looks) == 2  # woken by that commit at once
    parts = out["r"].responses[0].partitions
    assert [(p.partition_index, bool(p.records)) for p in parts] == [(0, False), (1, True)]


def test_response_entries_share_the_tagged_defaults_and_encode_as_fresh_ones():
    """partition_data gives every entry the same default diverging epoch, current leader
    and snapshot id (building a response of 500 partitions: 3.0 -> 1.2 ms); the bytes
    are those of entries with their own defaults, and encoding leaves them untouched."""
    from agent.fetch.model import PartitionFetch
    from kafka_protocol.messages import FetchResponse

    PD = FetchResponse.FetchableTopicResponse.PartitionData

    def response(entries):
        topic = FetchResponse.FetchableTopicResponse(topic="t", topic_id=uuid.UUID(int=5), partitions=entries)
        return FetchResponse(throttle_time_ms=0, error_code=0, session_id=0, responses=[topic])

    live, failed = PartitionFetch(0, 2, 9, [], b"rec"), PartitionFetch(6)
    shared = [fetch_answer.partition_data(3, live), fetch_answer.partition_data(4, failed)]
    fresh = [
        PD(partition_index=3, error_code=0, high_watermark=9, last_stable_offset=9, log_start_offset=2,
           aborted_transactions=[], preferred_read_replica=-1, records=b"rec"),
        PD(partition_index=4, error_code=6, high_watermark=-1, last_stable_offset=-1, log_start_offset=-1,
           aborted_transactions=[], preferred_read_replica=-1, records=b""),
    ]  # fmt: skip
    assert shared[0].current_leader is shared[1].current_leader
    for version in (4, 11, 12, 16, 18):
        assert response(shared).encode(version) == response(fresh).encode(version)
    assert shared[0].current_leader == PD.LeaderIdAndEpoch() and shared[0].snapshot_id == PD.SnapshotId()
    assert shared[0].diverging_epoch == PD.EpochEndOffset()
