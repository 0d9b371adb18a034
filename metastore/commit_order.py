"""Commits sequenced in call order while several are in flight.

Where it sits: between an agent's commit loop (:mod:`agent.produce.commit`),
which keeps up to two ``commit_objects`` calls in flight, and a metastore that
advertises ``ordered_commits`` (today :class:`~metastore.postgres.PostgresMetastore`).
The caller hands every call a :class:`CommitTurn` from one :class:`CommitOrder`,
in the order the calls must be sequenced. The metastore begins (plans) after the
previous call has begun, waits for the previous turn before it takes any partition lock, and marks its own turn ``sequenced``
as soon as its partition locks are held (its offsets are then fixed: a later
call blocks on those rows until this one commits). So the next call's network
round trips, object rows and COPY overlap this one's, and still gets its
offsets and producer checks after it.

A metastore never marks a turn on failure: the caller does, once it has given
up or retried (a retry is only allowed while the turn is unmarked, that is,
while no later call can have been sequenced). A metastore that never marks
turns is still correct, it just overlaps less.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field


@dataclass(slots=True)
class CommitTurn:
    """One call's place in the order. The metastore calls :meth:`begin` first,
    :meth:`wait` before taking any partition lock, :meth:`done` once its locks
    are held; the caller calls :meth:`wait` then :meth:`done` when the call is over."""

    after: asyncio.Event | None  # the previous call's ``sequenced``
    after_begun: asyncio.Event | None  # the previous call's ``begun``
    sequenced: asyncio.Event = field(default_factory=asyncio.Event)
    begun: asyncio.Event = field(default_factory=asyncio.Event)

    async def begin(self) -> None:
        """Until the previous call has begun: a metastore that plans from in-memory
        state (expected high watermarks) plans in turn order, whatever order the
        callers' tasks run in. Nothing is held while waiting."""
        if self.after_begun is not None:
            await self.after_begun.wait()
        self.begun.set()

    async def wait(self) -> None:
        """Until the previous call is sequenced (its locks held) or over."""
        if self.after is not None:
            await self.after.wait()

    def done(self) -> None:
        self.begun.set()
        self.sequenced.set()

    @property
    def is_sequenced(self) -> bool:
        return self.sequenced.is_set()


class CommitOrder:
    """Hands out turns in call order (turns hold events, not each other: no chain)."""

    def __init__(self) -> None:
        self._tail: CommitTurn | None = None

    def next(self) -> CommitTurn:
        tail = self._tail
        turn = CommitTurn(None, None) if tail is None else CommitTurn(tail.sequenced, tail.begun)
        self._tail = turn
        return turn
