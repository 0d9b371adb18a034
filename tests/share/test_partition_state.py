"""The share-partition state machine (agent.groups.share.partition), clock injected."""

from __future__ import annotations

import uuid

import pytest

from agent.groups.share import partition as sp
from metastore.types import InflightRange, SharePartitionState

L = sp.Limits(lock_ms=1000, delivery_limit=3, max_locks=100)


def fresh(start: int = 0) -> SharePartitionState:
    return SharePartitionState("g", uuid.UUID(int=1), 0, start, start, [])


def test_acquire_new_records_then_lock_expiry_makes_them_available() -> None:
    st, got = sp.acquire(fresh(), "a", 0, L, max_records=10, upto=5)
    assert got == [(0, 4, 1)] and st.end_offset == 5
    st2, got2 = sp.acquire(st, "b", 500, L, max_records=10, upto=5)
    assert got2 == [] and st2 == st  # all held by a
    st3 = sp.expire(st, 999, L)
    assert st3 == st  # not yet
    st4 = sp.expire(st, 1000, L)
    assert [r.state for r in st4.ranges] == [sp.AVAILABLE]
    st5, got5 = sp.acquire(st4, "b", 1000, L, max_records=3, upto=5)
    assert got5 == [(0, 2, 2)]
    assert [(r.first, r.last, r.state, r.member_id) for r in st5.ranges] == [
        (0, 2, sp.ACQUIRED, "b"),
        (3, 4, sp.AVAILABLE, ""),
    ]


def test_accept_moves_start_offset_and_is_final() -> None:
    st, _ = sp.acquire(fresh(10), "a", 0, L, max_records=10, upto=20)
    st = sp.acknowledge(st, "a", [(10, 14, [sp.ACCEPT])], L)
    assert st.start_offset == 15 and st.ranges[0].first == 15
    with pytest.raises(sp.InvalidRecordState):
        sp.acknowledge(st, "a", [(12, 12, [sp.ACCEPT])], L)  # below the SPSO
    st = sp.expire(st, 10_000, L)
    st, got = sp.acquire(st, "b", 10_000, L, max_records=100, upto=20)
    assert got == [(15, 19, 2)]  # accepted 10..14 never come back


def test_reject_archives_and_release_archives_at_the_delivery_limit() -> None:
    st, _ = sp.acquire(fresh(), "a", 0, L, max_records=4, upto=4)
    st = sp.acknowledge(st, "a", [(0, 3, [sp.REJECT, sp.RELEASE, sp.ACCEPT, sp.GAP])], L)
    assert st.start_offset == 1
    assert [(r.first, r.last, r.state) for r in st.ranges] == [
        (1, 1, sp.AVAILABLE),
        (2, 2, sp.ACKNOWLEDGED),
        (3, 3, sp.ARCHIVED),
    ]
    counts = []
    for i in range(5):
        st, got = sp.acquire(st, "a", i, L, max_records=1, upto=4)
        if not got:
            break
        counts.append(got[0][2])
        st = sp.acknowledge(st, "a", [(1, 1, [sp.RELEASE])], L)
    assert counts == [2, 3]  # delivered 3 times in all, then archived
    assert st.start_offset == 4 and st.ranges == []


def test_ack_of_someone_elses_records_is_invalid_and_changes_nothing() -> None:
    st, _ = sp.acquire(fresh(), "a", 0, L, max_records=5, upto=5)
    with pytest.raises(sp.InvalidRecordState):
        sp.acknowledge(st, "b", [(0, 0, [sp.ACCEPT])], L)
    with pytest.raises(sp.InvalidRecordState):
        sp.acknowledge(st, "a", [(0, 1, [sp.ACCEPT, sp.ACCEPT, sp.ACCEPT])], L)  # wrong type count
    with pytest.raises(sp.InvalidRecordState):
        sp.acknowledge(st, "a", [(0, 0, [9])], L)


def test_max_locks_bounds_in_flight_records_and_release_member() -> None:
    lim = sp.Limits(lock_ms=1000, delivery_limit=3, max_locks=10)
    st, got = sp.acquire(fresh(), "a", 0, lim, max_records=100, upto=1000)
    assert got == [(0, 9, 1)]
    _, got2 = sp.acquire(st, "b", 0, lim, max_records=100, upto=1000)
    assert got2 == []
    st3 = sp.release_member(st, "a", lim)
    assert sp.counts(st3)[sp.AVAILABLE] == 10
    st4, got4 = sp.acquire(st3, "b", 0, lim, max_records=4, upto=1000, lo=2)
    assert got4 == [(2, 5, 2)]
    assert [r.state for r in st4.ranges] == [sp.AVAILABLE, sp.ACQUIRED, sp.AVAILABLE]


def test_log_start_moves_the_start_offset() -> None:
    st = SharePartitionState("g", uuid.UUID(int=1), 0, 0, 3, [InflightRange(0, 2, sp.AVAILABLE, 1)])
    st, got = sp.acquire(st, "a", 0, L, max_records=10, upto=8, lo=5, log_start=5)
    assert st.start_offset == 5 and got == [(5, 7, 1)]
