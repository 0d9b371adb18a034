"""GroupCommitter (metastore/group_commit.py) with a stand-in metastore whose
groups finish when the test says so.

Two groups in flight, ``max_objects`` 1: one task holds a call back for its
next group while the other task is between being woken by the queue and
running; that task then takes a newer call. The held call must still be
committed and answered (it used to be dropped: its caller waited for ever).
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable, Sequence

import pytest

from metastore.group_commit import GroupCommitter
from metastore.types import CommitResult, ErrorCode, ObjectCommitResult, ObjectToCommit


class _GatedMeta:
    """Each group waits until its first key's gate is open; records the groups."""

    def __init__(self) -> None:
        self.groups: list[list[str]] = []
        self.gates: dict[str, asyncio.Event] = {}

    def gate(self, key: str) -> asyncio.Event:
        return self.gates.setdefault(key, asyncio.Event())

    async def commit_objects(self, objects: Sequence[ObjectToCommit]) -> list[ObjectCommitResult]:
        self.groups.append([o.key for o in objects])
        await self.gate(objects[0].key).wait()
        return [ObjectCommitResult([CommitResult(ErrorCode.NONE, 0, 0, 0)]) for _ in objects]


async def _until(cond: Callable[[], bool]) -> None:
    for _ in range(10_000):  # ~10 s at least
        if cond():
            return
        await asyncio.sleep(0.001)
    raise AssertionError("condition not reached")


async def test_a_call_held_for_the_next_group_is_not_lost() -> None:
    meta = _GatedMeta()
    committer = GroupCommitter(meta, max_objects=1, max_in_flight=2)

    def commit(key: str) -> asyncio.Task[list[ObjectCommitResult]]:
        obj = ObjectToCommit(key, 1, "a", [])
        return asyncio.create_task(committer.commit_objects([obj]))

    async def open_gate(key: str) -> None:
        meta.gate(key).set()

    try:
        c1 = commit("o1")  # the first task commits o1; the second waits on the queue
        await _until(lambda: meta.groups == [["o1"]])
        # In this order: o1's group is woken first, then o2 wakes the waiting task.
        # The first task, back first, takes o2 and holds o3 back for its next
        # group; the other one, woken by o2, finds o4 (then holds o5 back).
        opener = asyncio.create_task(open_gate("o1"))
        later = [commit(f"o{i}") for i in range(2, 6)]
        await _until(lambda: ["o2"] in meta.groups and ["o4"] in meta.groups)
        for i in range(2, 6):
            meta.gate(f"o{i}").set()
        done = await asyncio.wait_for(asyncio.gather(c1, *later, opener), 10)
    finally:
        await committer.close()
    assert all(r[0].results[0].error is ErrorCode.NONE for r in done[:5])
    assert sorted(k for g in meta.groups for k in g) == [f"o{i}" for i in range(1, 6)]


CALLERS = 64


class _JitterMeta:
    """Answers each group after a pseudo-random number of loop turns."""

    def __init__(self) -> None:
        self.groups: list[list[str]] = []
        self.rng = random.Random(7)

    async def commit_objects(self, objects: Sequence[ObjectToCommit]) -> list[ObjectCommitResult]:
        self.groups.append([o.key for o in objects])
        for _ in range(self.rng.randint(0, 6)):
            await asyncio.sleep(0)
        return [ObjectCommitResult([CommitResult(ErrorCode.NONE, 0, 0, 0)]) for _ in objects]


@pytest.mark.parametrize("max_objects", [1, 2, 4, 8])
async def test_many_callers_small_groups_every_call_answered(max_objects: int) -> None:
    """Both tasks may hold a call back at once (each found its group full)."""
    meta = _JitterMeta()
    committer = GroupCommitter(meta, max_objects=max_objects, max_in_flight=2)
    rng = random.Random(max_objects)
    answered: list[str] = []

    async def caller(i: int) -> None:
        for n in range(30):
            for _ in range(rng.randint(0, 3)):
                await asyncio.sleep(0)
            key = f"{i}/{n}"
            (res,) = await committer.commit_objects([ObjectToCommit(key, 1, "a", [])])
            assert res.results[0].error is ErrorCode.NONE
            answered.append(key)

    try:
        await asyncio.wait_for(asyncio.gather(*(caller(i) for i in range(CALLERS))), 30)
    finally:
        await committer.close()
    assert len(answered) == CALLERS * 30
    assert sorted(k for g in meta.groups for k in g) == sorted(answered)  # each exactly once
    assert max(len(g) for g in meta.groups) <= max_objects


class _StuckMeta:
    """A group that commits until cancelled, then takes ``release`` to clean up."""

    def __init__(self) -> None:
        self.started = asyncio.Event()
        self.release = asyncio.Event()

    async def commit_objects(self, objects: Sequence[ObjectToCommit]) -> list[ObjectCommitResult]:
        self.started.set()
        try:
            await asyncio.Event().wait()
        finally:
            await self.release.wait()
        raise AssertionError("unreachable")


async def test_close_answers_the_committing_group_and_the_queued_calls() -> None:
    """Before: the callers of the group being committed waited for ever after close()."""
    meta = _StuckMeta()
    committer = GroupCommitter(meta, max_objects=1, max_in_flight=1)
    committing = asyncio.create_task(committer.commit_objects([ObjectToCommit("o1", 1, "a", [])]))
    await asyncio.wait_for(meta.started.wait(), 10)
    queued = asyncio.create_task(committer.commit_objects([ObjectToCommit("o2", 1, "a", [])]))
    await asyncio.sleep(0)
    meta.release.set()
    await committer.close()
    for caller in (committing, queued):
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(caller, 10)


async def test_close_passes_on_a_cancel_aimed_at_its_caller() -> None:
    """Before: close() swallowed it and its caller went on."""
    meta = _StuckMeta()
    committer = GroupCommitter(meta, max_objects=1, max_in_flight=1)
    caller = asyncio.create_task(committer.commit_objects([ObjectToCommit("o1", 1, "a", [])]))
    await asyncio.wait_for(meta.started.wait(), 10)
    went_on: list[str] = []

    async def shutdown() -> None:
        await committer.close()
        went_on.append("after close")

    closing = asyncio.create_task(shutdown())
    await asyncio.sleep(0)  # close() has cancelled the task, which waits for release
    closing.cancel()
    await asyncio.sleep(0)
    assert not closing.done()  # the committer's task has not ended yet
    meta.release.set()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(closing, 10)
    assert went_on == []
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(caller, 10)
