"""Group commit: concurrent commits sequenced together, one transaction per group.

Where it sits: between the callers of ``commit_object`` / ``commit_objects``
that run concurrently in one process (the agents talking to ``floe metastore
serve``, the benchmark's committers) and the metastore's ``commit_objects``.
Every caller's objects wait in a queue; up to ``max_in_flight`` groups (2) are
committing at a time, and whatever arrived meanwhile forms the next group
(natural group commit: no timer is needed for groups to grow with load, and a
lone commit waits for nothing unless ``window_ms`` asks it to). Two groups in
flight keep both the database and this process busy, and groups touching
different partitions commit in parallel; groups touching the same ones
serialize on the partition rows, which every commit locks in one order. Each touched partition row
is then locked and updated once per group instead of once per object, and the
group is durable (one COMMIT) before any of its callers hears back. With
``split_min_batches`` set, a task that forms a group while the other is idle,
with at least two groups of that many batches waiting, takes about half: on
Postgres the two groups then COPY their batch rows at once, each on its own
backend (the optimistic path, metastore/expected_hwm.py), and seal in the
order they were planned. Off by default since the COPY writes one run row per
partition (metastore.runs): two halves of a wide group write twice the rows
and lock every partition twice (loadtest/HISTORY.md, "Run rows").

Each caller gets exactly its own outcome: the objects of one call stay
together and in their order; if a group fails as a whole (a lost connection, a
deadlock with a directly connected agent), every call in it is retried on its
own, so a failure reaches only the calls that fail alone.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from metastore.types import (
    BatchToCommit,
    CommitResult,
    ObjectAlreadyCommittedError,
    ObjectCommitResult,
    ObjectToCommit,
)

log = logging.getLogger(__name__)


@dataclass(slots=True)
class _Pending:
    objects: Sequence[ObjectToCommit]
    batches: int
    future: asyncio.Future[list[ObjectCommitResult]]


class GroupCommitter:
    """Queues ``commit_objects`` calls and commits them in groups through ``meta``."""

    def __init__(
        self,
        meta: Any,
        *,
        window_ms: float = 0.0,
        max_objects: int = 256,
        max_batches: int = 200_000,
        max_in_flight: int = 2,
        split_min_batches: int | None = None,
    ) -> None:
        self.meta = meta
        self.window = window_ms / 1000
        self.max_objects = max_objects
        self.max_batches = max_batches
        self._queue: asyncio.Queue[_Pending] = asyncio.Queue()
        self.max_in_flight = max_in_flight
        self.split_min_batches = split_min_batches
        self._waiting = 0  # batches of the calls queued or held, not yet in a group
        self._busy = 0  # tasks committing a group
        self._tasks: list[asyncio.Task[None]] = []
        self._held: deque[_Pending] = deque()  # taken from the queue, next groups' firsts
        # counters (metrics, tests, benchmarks)
        self.groups = 0
        self.objects = 0
        self.fallbacks = 0

    async def commit_objects(self, objects: Sequence[ObjectToCommit]) -> list[ObjectCommitResult]:
        if not self._tasks or any(t.done() for t in self._tasks):
            loop = asyncio.get_running_loop()
            self._tasks = [t for t in self._tasks if not t.done()]
            while len(self._tasks) < self.max_in_flight:
                self._tasks.append(loop.create_task(self._run(), name="group-commit"))
        fut: asyncio.Future[list[ObjectCommitResult]] = asyncio.get_running_loop().create_future()
        batches = sum(len(o.batches) for o in objects)
        self._waiting += batches
        self._queue.put_nowait(_Pending(objects, batches, fut))
        return await fut

    async def commit_object(
        self, key: str, size: int, agent_id: str, batches: Sequence[BatchToCommit]
    ) -> list[CommitResult]:
        (res,) = await self.commit_objects([ObjectToCommit(key, size, agent_id, batches)])
        if res.already_committed:
            raise ObjectAlreadyCommittedError(f"object {key!r} is already committed")
        return res.results

    async def close(self) -> None:
        """Stop the tasks; every caller still waiting gets ``CancelledError``.

        That includes the callers of a group that was committing: its outcome is
        unknown (the COMMIT may have landed), as for any commit whose answer was
        lost, and they must not wait for ever. A cancel of the task calling close()
        that arrives while the tasks stop is raised once they have ended; the
        tasks' own cancellation is not (``gather`` tells the two apart, which
        ``suppress(CancelledError)`` around each await did not)."""
        tasks, self._tasks = self._tasks, []
        for task in tasks:
            task.cancel()
        try:
            for outcome in await asyncio.gather(*tasks, return_exceptions=True):
                if isinstance(outcome, Exception):
                    raise outcome
        finally:
            pending = list(self._held)
            self._held.clear()
            while not self._queue.empty():
                pending.append(self._queue.get_nowait())
            for p in pending:
                if not p.future.done():
                    p.future.cancel()

    # -- the loop -------------------------------------------------------------------

    async def _next_group(self) -> list[_Pending]:
        # Calls held back (a group was full) come first. Both tasks may hold one
        # back, and one may do so while the other waits on the queue: a list, and
        # nothing cleared after an await, or a held call is lost.
        first = self._held.popleft() if self._held else await self._queue.get()
        group = [first]
        objects, batches = len(first.objects), first.batches
        limit = self.max_batches
        split = self.split_min_batches
        if split is not None and self._busy + 1 < self.max_in_flight and self._waiting >= 2 * split:
            # Another task is idle and there is enough for two COPY-sized groups:
            # take about half, the other task takes the rest, and their COPYs run
            # side by side (one Postgres backend each) instead of one after the other.
            limit = min(limit, self._waiting // 2)
        self._waiting -= first.batches
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.window
        while True:
            try:
                item = self._queue.get_nowait()
            except asyncio.QueueEmpty:
                remaining = deadline - loop.time()
                if remaining <= 0:
                    return group
                try:
                    item = await asyncio.wait_for(self._queue.get(), remaining)
                except TimeoutError:
                    return group
                except asyncio.CancelledError:  # close(): it answers the held calls
                    self._held.extendleft(reversed(group))
                    raise
            if objects + len(item.objects) > self.max_objects or batches + item.batches > limit:
                self._held.append(item)  # too big for this group: it opens a next one
                return group
            group.append(item)
            self._waiting -= item.batches
            objects += len(item.objects)
            batches += item.batches

    async def _run(self) -> None:
        while True:
            group = await self._next_group()
            self._busy += 1
            try:
                await self._commit(group)
            except asyncio.CancelledError:  # close(): see there
                for p in group:
                    if not p.future.done():
                        p.future.cancel()
                raise
            except Exception:  # never let one group stop the committer
                log.exception("group commit failed unexpectedly")
                for p in group:
                    if not p.future.done():
                        p.future.set_exception(RuntimeError("group commit failed"))
            finally:
                self._busy -= 1

    async def _commit(self, group: list[_Pending]) -> None:
        live = [p for p in group if not p.future.done()]  # callers may have gone
        if not live:
            return
        self.groups += 1
        self.objects += sum(len(p.objects) for p in live)
        objects = [o for p in live for o in p.objects]
        try:
            results = await self.meta.commit_objects(objects)
        except Exception as e:
            if len(live) == 1:
                if not live[0].future.done():
                    live[0].future.set_exception(e)
                return
            log.info("group commit of %d calls failed (%s); committing them one by one", len(live), e)
            self.fallbacks += 1
            for p in live:
                try:
                    own = await self.meta.commit_objects(p.objects)
                except Exception as e1:
                    if not p.future.done():
                        p.future.set_exception(e1)
                else:
                    if not p.future.done():
                        p.future.set_result(own)
            return
        pos = 0
        for p in live:
            end = pos + len(p.objects)
            if not p.future.done():
                p.future.set_result(results[pos:end])
            pos = end
