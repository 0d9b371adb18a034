"""Fetch sessions (KIP-227) at the wire level: creation, incremental requests and
responses, epochs, forgetting, closing, long-poll wake-ups, and the cache."""

from __future__ import annotations

import threading
import time
import uuid
from typing import Any

from agent.fetch.session import FetchSessionCache, next_epoch
from agent.metrics import METRICS
from agent.notify import CommitNotifier
from kafka_protocol.messages import FetchRequest, FetchResponse
from tests.agent.test_fetch_protocol import make_topic, produce_batch, raw_call

FT = FetchRequest.FetchTopic
FP = FetchRequest.FetchTopic.FetchPartition
FG = FetchRequest.ForgottenTopic


def sfetch(
    agent: Any,
    session_id: int,
    epoch: int,
    parts: list[tuple[str, int, int]] = (),  # type: ignore[assignment]
    *,
    forget: list[tuple[str, int]] = (),  # type: ignore[assignment]
    version: int = 12,
    max_wait_ms: int = 0,
    topic_ids: dict[str, uuid.UUID] | None = None,
) -> FetchResponse:
    ids = topic_ids or {}
    topics: dict[str, FT] = {}
    for name, p, off in parts:
        t = topics.setdefault(name, FT(topic=name, topic_id=ids.get(name, uuid.UUID(int=0))))
        t.partitions.append(FP(partition=p, fetch_offset=off, partition_max_bytes=1 << 20))
    forgotten: dict[str, FG] = {}
    for name, p in forget:
        forgotten.setdefault(name, FG(topic=name, topic_id=ids.get(name, uuid.UUID(int=0)))).partitions.append(p)
    req = FetchRequest(
        replica_id=-1, max_wait_ms=max_wait_ms, min_bytes=1, max_bytes=50 << 20,
        session_id=session_id, session_epoch=epoch, topics=list(topics.values()),
        forgotten_topics_data=list(forgotten.values()),
    )
    return raw_call(agent, req, version)


def entries(resp: FetchResponse) -> dict[tuple[str, int], Any]:
    return {(t.topic, p.partition_index): p for t in resp.responses for p in t.partitions}


def test_session_sends_and_receives_only_changes(floe_agent):
    make_topic(floe_agent, "s1", partitions=50)
    produce_batch(floe_agent, "s1", 3, 2)
    full = sfetch(floe_agent, 0, 0, [("s1", p, 0) for p in range(50)])
    assert full.error_code == 0 and full.session_id != 0
    sid = full.session_id
    assert len(entries(full)) == 50 and entries(full)[("s1", 3)].high_watermark == 2
    # Idle: nothing changed, nothing comes back (the client moves partition 3 to 2).
    idle = sfetch(floe_agent, sid, 1, [("s1", 3, 2)])
    assert idle.error_code == 0 and idle.session_id == sid and entries(idle) == {}
    idle = sfetch(floe_agent, sid, 2)
    assert entries(idle) == {}
    # New data on two partitions: exactly those.
    produce_batch(floe_agent, "s1", 7, 3)
    produce_batch(floe_agent, "s1", 3, 1)
    changed = entries(sfetch(floe_agent, sid, 3))
    assert set(changed) == {("s1", 3), ("s1", 7)}
    assert changed[("s1", 7)].high_watermark == 3 and changed[("s1", 3)].high_watermark == 3
    assert len(bytes(changed[("s1", 7)].records)) > 0
    # The client did not move its offsets: the unread data is offered again.
    again = entries(sfetch(floe_agent, sid, 4))
    assert set(again) == {("s1", 3), ("s1", 7)}
    # It moves them: quiet again.
    assert entries(sfetch(floe_agent, sid, 5, [("s1", 3, 3), ("s1", 7, 3)])) == {}


def forms() -> dict[str, float]:
    get = METRICS.registry.get_sample_value
    return {f: get("floe_fetch_forms_total", {"form": f}) or 0.0 for f in ("sessionless", "full", "incremental")}


def test_epochs_forgetting_and_closing(floe_agent):
    make_topic(floe_agent, "s2", partitions=3)
    before = forms()
    sid = sfetch(floe_agent, 0, 0, [("s2", 0, 0), ("s2", 1, 0)]).session_id
    assert sfetch(floe_agent, sid, 2).error_code == 71  # INVALID_FETCH_SESSION_EPOCH (expects 1)
    assert sfetch(floe_agent, sid, 1).error_code == 0
    assert sfetch(floe_agent, sid, 1).error_code == 71  # epochs do not repeat
    assert sfetch(floe_agent, sid + 1 if sid < 2**31 - 1 else 1, 1).error_code == 70
    # Add partition 2 (new: answered), forget partition 0 (no longer answered).
    resp = sfetch(floe_agent, sid, 2, [("s2", 2, 0)], forget=[("s2", 0)])
    assert set(entries(resp)) == {("s2", 2)}
    produce_batch(floe_agent, "s2", 0, 1)
    produce_batch(floe_agent, "s2", 1, 1)
    assert set(entries(sfetch(floe_agent, sid, 3))) == {("s2", 1)}
    # Epoch -1 closes the session and fetches sessionless.
    closing = sfetch(floe_agent, sid, -1, [("s2", 0, 0)])
    assert closing.session_id == 0 and set(entries(closing)) == {("s2", 0)}
    assert sfetch(floe_agent, sid, 4).error_code == 70
    # Epoch 0 with an id replaces it with a new session.
    new = sfetch(floe_agent, 0, 0, [("s2", 0, 0)])
    newer = sfetch(floe_agent, new.session_id, 0, [("s2", 1, 0)])
    assert newer.session_id not in (0, new.session_id)
    assert sfetch(floe_agent, new.session_id, 1).error_code == 70
    # floe_fetch_forms counts the requests served by form (closing with epoch -1 is
    # sessionless; the ones refused with a session error are not counted).
    after = forms()
    assert {f: after[f] - before[f] for f in after} == {"sessionless": 1, "full": 3, "incremental": 3}


def test_session_by_topic_id_and_errors(floe_agent):
    tid = make_topic(floe_agent, "s3", partitions=2)
    ghost = uuid.uuid4()
    full = sfetch(floe_agent, 0, 0, [("s3", 0, 0), ("g", 0, 0)], version=13, topic_ids={"s3": tid, "g": ghost})
    assert full.session_id != 0
    by_id = {(t.topic_id, p.partition_index): p.error_code for t in full.responses for p in t.partitions}
    assert by_id == {(tid, 0): 0, (ghost, 0): 100}  # UNKNOWN_TOPIC_ID
    # Errors are answered every time; the healthy idle partition is not.
    inc = sfetch(floe_agent, full.session_id, 1, version=13, topic_ids={"s3": tid, "g": ghost})
    assert {(t.topic_id, p.partition_index) for t in inc.responses for p in t.partitions} == {(ghost, 0)}
    # An offset beyond the high watermark: OFFSET_OUT_OF_RANGE in the session too.
    inc = sfetch(floe_agent, full.session_id, 2, [("s3", 1, 5)], forget=[("g", 0)], version=13,
                 topic_ids={"s3": tid, "g": ghost})
    assert [(p.partition_index, p.error_code) for t in inc.responses for p in t.partitions] == [(1, 1)]
    # A session started by topic id cannot be continued by name.
    assert sfetch(floe_agent, full.session_id, 3, version=12).error_code == 71


def test_idle_session_long_poll_wakes_on_commit(floe_agent):
    make_topic(floe_agent, "s4", partitions=20)
    sid = sfetch(floe_agent, 0, 0, [("s4", p, 0) for p in range(20)]).session_id
    timer = threading.Timer(0.3, produce_batch, (floe_agent, "s4", 11, 2))
    t0 = time.monotonic()
    timer.start()
    try:
        resp = sfetch(floe_agent, sid, 1, max_wait_ms=20_000)
    finally:
        timer.join()
    assert time.monotonic() - t0 < 15  # woken by the commit, not by max_wait_ms
    assert set(entries(resp)) == {("s4", 11)}
    t0 = time.monotonic()
    quiet = sfetch(floe_agent, sid, 2, [("s4", 11, 2)], max_wait_ms=300)
    assert entries(quiet) == {} and time.monotonic() - t0 >= 0.25  # waited, then empty


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_cache_eviction_and_epochs():
    clock = _Clock()
    cache = FetchSessionCache(CommitNotifier(), clock, slots=2, min_eviction_s=120)
    a = cache.create(10, False)
    b = cache.create(5, False)
    assert a is not None and b is not None and len(cache) == 2
    a.upsert(("t", 0), _part())
    clock.now = 10
    assert cache.create(3, False) is None  # nothing idle, nothing smaller
    c = cache.create(8, False)  # evicts b, the least recently used with fewer partitions
    assert c is not None and cache.get(b.id) is None and cache.evictions == 1
    clock.now = 200
    assert cache.get(c.id) is c  # used now
    d = cache.create(1, False)  # a is idle for 200 s: evictable by anyone
    assert d is not None and cache.get(a.id) is None
    assert cache.create(1, False) is None or len(cache) <= 2
    assert next_epoch(0) == 1 and next_epoch(2**31 - 1) == 1 and next_epoch(-1) == -1
    assert FetchSessionCache(CommitNotifier(), clock, slots=0).create(1, False) is None


def test_notifier_marks_sessions_changed():
    notifier = CommitNotifier()
    cache = FetchSessionCache(notifier, _Clock(), slots=4)
    s = cache.create(2, True)
    assert s is not None
    tid = uuid.uuid4()
    s.upsert((tid, 0), _part(tid, 0))
    s.upsert((tid, 1), _part(tid, 1))
    s.take_candidates()
    notifier.notify([(tid, 1), (uuid.uuid4(), 0)])
    assert s.event.is_set() and [k for k, _ in s.take_candidates()] == [(tid, 1)]
    assert not s.event.is_set() and s.take_candidates() == []
    cache.remove(s.id)
    notifier.notify([(tid, 1)])
    assert notifier.watched_keys() == []


def _part(tid: uuid.UUID | None = None, p: int = 0) -> Any:
    from agent.fetch.session import SessionPartition

    return SessionPartition("t", uuid.UUID(int=0), tid or uuid.uuid4(), p, 0, 1 << 20)
