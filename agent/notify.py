"""Wake-ups for long-polling fetches when new data is committed.

The produce committer calls :meth:`CommitNotifier.notify` for every partition it
advanced (and ``agent.cluster`` for other agents' commits); a fetch that found
too few bytes waits on the partitions it asked for. Each waiter gets its own
event, so one commit wakes exactly the fetches that care about that partition.

Fetch sessions (``agent.fetch.session``) subscribe for as long as they live:
a commit marks the partition changed in every session holding it, so an
incremental fetch looks only at what changed, whatever the session's size.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Protocol

PartitionKey = tuple[object, int]


class Subscriber(Protocol):
    def changed(self, key: PartitionKey) -> None: ...


class _Interest:
    """Who cares about one partition: waiting fetches' events, and fetch sessions."""

    __slots__ = ("events", "subs")

    def __init__(self) -> None:
        self.events: set[asyncio.Event] = set()
        self.subs: set[Subscriber] = set()


class CommitNotifier:
    def __init__(self) -> None:
        # Bumped by every notification: what was read before it may miss a commit
        # (agent.fetch.watermark_views keeps a topic's watermarks while it is unchanged).
        self.generation = 0
        # Who waits on each partition, long-polls and sessions in one map, so a commit
        # looks each partition up once (a key's hash is UUID.__hash__, Python code).
        self._waiters: dict[PartitionKey, _Interest] = {}

    def _get(self, k: PartitionKey) -> _Interest:
        i = self._waiters.get(k)
        if i is None:
            i = self._waiters[k] = _Interest()
        return i

    def _drop_if_idle(self, k: PartitionKey, i: _Interest) -> None:
        if not i.events and not i.subs:
            del self._waiters[k]

    def subscribe(self, sub: Subscriber, keys: Iterable[PartitionKey]) -> None:
        for k in keys:
            self._get(k).subs.add(sub)

    def unsubscribe(self, sub: Subscriber, keys: Iterable[PartitionKey]) -> None:
        for k in keys:
            i = self._waiters.get(k)
            if i is not None:
                i.subs.discard(sub)
                self._drop_if_idle(k, i)

    @contextmanager
    def watch(self, keys: Iterable[PartitionKey]) -> Iterator[asyncio.Event]:
        """Register interest before re-checking state, so no commit is missed."""
        ev = asyncio.Event()
        ks = list(keys)
        for k in ks:
            self._get(k).events.add(ev)
        try:
            yield ev
        finally:
            for k in ks:
                i = self._waiters.get(k)
                if i is not None:
                    i.events.discard(ev)
                    self._drop_if_idle(k, i)

    def notify(self, keys: Iterable[PartitionKey]) -> None:
        self.generation += 1
        waiters = self._waiters
        if not waiters:
            return  # nobody fetching: no lookups (an agent that only takes produces)
        for k in keys:
            i = waiters.get(k)
            if i is not None:
                for ev in i.events:
                    ev.set()
                for sub in i.subs:
                    sub.changed(k)

    def watched_keys(self) -> list[PartitionKey]:
        """Partitions some fetch is waiting on or some fetch session holds
        (cross-agent polling, agent.cluster)."""
        return list(self._waiters)

    def notify_all(self) -> None:
        self.generation += 1
        for k, i in self._waiters.items():
            for ev in i.events:
                ev.set()
            for sub in i.subs:
                sub.changed(k)
