"""The share-partition state machine (KIP-932), as pure functions over ranges.

Where it sits: ``agent.groups.share.manager`` loads a share partition's
:class:`~metastore.types.SharePartitionState` from the metastore, applies one of
these functions for a ShareFetch / ShareAcknowledge, and writes the result back
by compare-and-swap before answering. Nothing here does I/O; time comes in as
``now_ms`` (the injected clock), so lock expiry is tested without sleeping.

A record moves AVAILABLE -> ACQUIRED (delivery count + 1, locked until now +
``share.record.lock.duration.ms`` for one member) -> ACKNOWLEDGED (ACCEPT) or
ARCHIVED (REJECT, or a GAP the client found no record at) or back to AVAILABLE
(RELEASE, lock expiry) -- ARCHIVED instead when the delivery count has reached
``share.delivery.count.limit``. Records below the share-partition start offset
(SPSO) are all done; the ranges cover ``[start_offset, end_offset)``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence

from metastore.types import InflightRange, SharePartitionState

AVAILABLE, ACQUIRED, ACKNOWLEDGED, ARCHIVED = 0, 1, 2, 4
GAP, ACCEPT, RELEASE, REJECT = 0, 1, 2, 3
DONE = (ACKNOWLEDGED, ARCHIVED)


class InvalidRecordState(Exception):
    """An acknowledgement of records this member does not hold (INVALID_RECORD_STATE)."""


@dataclasses.dataclass(frozen=True, slots=True)
class Limits:
    lock_ms: int = 30_000
    delivery_limit: int = 5
    max_locks: int = 2000


def _merge(ranges: Iterable[InflightRange]) -> list[InflightRange]:
    out: list[InflightRange] = []
    for r in ranges:
        if out:
            p = out[-1]
            if p.last + 1 == r.first and p[2:] == r[2:]:
                out[-1] = p._replace(last=r.last)
                continue
        out.append(r)
    return out


def _split(ranges: Sequence[InflightRange], first: int, last: int) -> list[InflightRange]:
    """``ranges`` with boundaries at ``first`` and ``last + 1``."""
    out: list[InflightRange] = []
    for r in ranges:
        cuts = [c for c in (first, last + 1) if r.first < c <= r.last]
        start = r.first
        for c in cuts:
            out.append(r._replace(first=start, last=c - 1))
            start = c
        out.append(r._replace(first=start))
    return out


def _after_release(r: InflightRange, limit: int) -> InflightRange:
    if r.delivery_count >= limit:
        return r._replace(state=ARCHIVED, lock_until_ms=0, member_id="")
    return r._replace(state=AVAILABLE, lock_until_ms=0, member_id="")


def _trim(st: SharePartitionState, ranges: list[InflightRange], log_start: int = 0) -> SharePartitionState:
    """Drop the leading finished ranges (and anything below ``log_start``): the SPSO moves up."""
    start = st.start_offset
    if log_start > start:
        ranges = [r._replace(first=max(r.first, log_start)) for r in ranges if r.last >= log_start]
        start = log_start
    while ranges and ranges[0].state in DONE:
        start = ranges[0].last + 1
        ranges = ranges[1:]
    end = max(st.end_offset, start)
    return dataclasses.replace(st, start_offset=start, end_offset=end, ranges=_merge(ranges))


def expire(st: SharePartitionState, now_ms: int, limits: Limits) -> SharePartitionState:
    """Acquisition locks that ran out: those records are AVAILABLE again (or ARCHIVED)."""
    if not any(r.state == ACQUIRED and r.lock_until_ms <= now_ms for r in st.ranges):
        return st
    ranges = [
        _after_release(r, limits.delivery_limit) if r.state == ACQUIRED and r.lock_until_ms <= now_ms else r
        for r in st.ranges
    ]
    return _trim(st, ranges)


def next_expiry(st: SharePartitionState) -> int | None:
    locks = [r.lock_until_ms for r in st.ranges if r.state == ACQUIRED]
    return min(locks) if locks else None


def first_available(st: SharePartitionState) -> int:
    """Where an acquisition would start reading the log."""
    for r in st.ranges:
        if r.state == AVAILABLE:
            return r.first
    return st.end_offset


def acquire(
    st: SharePartitionState,
    member_id: str,
    now_ms: int,
    limits: Limits,
    *,
    max_records: int,
    upto: int,
    lo: int = 0,
    log_start: int = 0,
) -> tuple[SharePartitionState, list[tuple[int, int, int]]]:
    """Acquire up to ``max_records`` records in ``[lo, upto)`` (what the caller
    read from the log) for ``member_id``.

    AVAILABLE in-flight records go first, then new records from ``end_offset``
    while in-flight records stay within ``max_locks``. Returns the new state and
    the acquired ``(first, last, delivery count)`` ranges."""
    st = _trim(st, list(st.ranges), log_start)
    lock_until = now_ms + limits.lock_ms
    budget = max_records
    ranges: list[InflightRange] = []
    got: list[tuple[int, int, int]] = []
    for r in st.ranges:
        if budget <= 0 or r.state != AVAILABLE or r.first >= upto or r.last < lo:
            ranges.append(r)
            continue
        if r.first < lo:
            ranges.append(r._replace(last=lo - 1))
            r = r._replace(first=lo)
        last = min(r.last, upto - 1, r.first + budget - 1)
        taken = InflightRange(r.first, last, ACQUIRED, r.delivery_count + 1, lock_until, member_id)
        ranges.append(taken)
        got.append((taken.first, taken.last, taken.delivery_count))
        budget -= last - r.first + 1
        if last < r.last:
            ranges.append(r._replace(first=last + 1))
    end = st.end_offset
    room = st.start_offset + limits.max_locks - end
    n = min(budget, upto - end, room) if end >= lo else 0
    if n > 0:
        ranges.append(InflightRange(end, end + n - 1, ACQUIRED, 1, lock_until, member_id))
        got.append((end, end + n - 1, 1))
        end += n
    new = dataclasses.replace(st, end_offset=end, ranges=_merge(ranges))
    return new, _merge_got(got)


def _merge_got(got: list[tuple[int, int, int]]) -> list[tuple[int, int, int]]:
    out: list[tuple[int, int, int]] = []
    for g in got:
        if out and out[-1][1] + 1 == g[0] and out[-1][2] == g[2]:
            out[-1] = (out[-1][0], g[1], g[2])
        else:
            out.append(g)
    return out


def acknowledge(
    st: SharePartitionState,
    member_id: str,
    batches: Sequence[tuple[int, int, Sequence[int]]],
    limits: Limits,
) -> SharePartitionState:
    """Apply ``(first, last, types)`` acknowledgements of ``member_id``.

    ``types`` has one entry for the whole range or one per offset. Every record
    must be ACQUIRED by this member (else :class:`InvalidRecordState`, nothing
    applied)."""
    ranges = list(st.ranges)
    for first, last, types in batches:
        if last < first or not types or (len(types) != 1 and len(types) != last - first + 1):
            raise InvalidRecordState(f"bad acknowledgement batch {first}-{last}")
        if any(t not in (GAP, ACCEPT, RELEASE, REJECT) for t in types):
            raise InvalidRecordState(f"unknown acknowledge type in {first}-{last}")
        if first < st.start_offset or last >= st.end_offset:
            raise InvalidRecordState(f"offsets {first}-{last} are not in flight")
        for off_first, off_last, t in _runs(first, last, types):
            ranges = _split(ranges, off_first, off_last)
            out: list[InflightRange] = []
            for r in ranges:
                if r.last < off_first or r.first > off_last:
                    out.append(r)
                    continue
                if r.state != ACQUIRED or r.member_id != member_id:
                    raise InvalidRecordState(f"offsets {r.first}-{r.last} are not acquired by this member")
                if t == ACCEPT:
                    out.append(r._replace(state=ACKNOWLEDGED, lock_until_ms=0, member_id=""))
                elif t == RELEASE:
                    out.append(_after_release(r, limits.delivery_limit))
                else:  # REJECT, GAP
                    out.append(r._replace(state=ARCHIVED, lock_until_ms=0, member_id=""))
            ranges = out
    return _trim(st, ranges)


def _runs(first: int, last: int, types: Sequence[int]) -> list[tuple[int, int, int]]:
    if len(types) == 1:
        return [(first, last, types[0])]
    out: list[tuple[int, int, int]] = []
    for i, t in enumerate(types):
        off = first + i
        if out and out[-1][2] == t and out[-1][1] + 1 == off:
            out[-1] = (out[-1][0], off, t)
        else:
            out.append((off, off, t))
    return out


def release_member(st: SharePartitionState, member_id: str, limits: Limits) -> SharePartitionState:
    """Everything ``member_id`` holds goes back (its session closed or it left)."""
    if not any(r.state == ACQUIRED and r.member_id == member_id for r in st.ranges):
        return st
    ranges = [
        _after_release(r, limits.delivery_limit) if r.state == ACQUIRED and r.member_id == member_id else r
        for r in st.ranges
    ]
    return _trim(st, ranges)


def counts(st: SharePartitionState) -> dict[int, int]:
    """Records per state in flight (for describe and /metrics)."""
    out = {AVAILABLE: 0, ACQUIRED: 0, ACKNOWLEDGED: 0, ARCHIVED: 0}
    for r in st.ranges:
        out[r.state] = out.get(r.state, 0) + r.last - r.first + 1
    return out
