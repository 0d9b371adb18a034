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
from collections import defaultdict
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Protocol

PartitionKey = tuple[object, int]


class Subscriber(Protocol):
    def changed(self, key: PartitionKey) -> None: ...


class CommitNotifier:
    def __init__(self) -> None:
        # Bumped by every notification: what was read before it may miss a commit
        # (agent.fetch.watermark_views keeps a topic's watermarks while it is unchanged).
        self.generation = 0
        self._waiters: dict[PartitionKey, set[asyncio.Event]] = defaultdict(set)
        self._subscribers: dict[PartitionKey, set[Subscriber]] = {}

    def subscribe(self, sub: Subscriber, keys: Iterable[PartitionKey]) -> None:
        for k in keys:
            self._subscribers.setdefault(k, set()).add(sub)

    def unsubscribe(self, sub: Subscriber, keys: Iterable[PartitionKey]) -> None:
        for k in keys:
            subs = self._subscribers.get(k)
            if subs is not None:
                subs.discard(sub)
                if not subs:
                    del self._subscribers[k]

    @contextmanager
    def watch(self, keys: Iterable[PartitionKey]) -> Iterator[asyncio.Event]:
        """Register interest before re-checking state, so no commit is missed."""
        ev = asyncio.Event()
        ks = list(keys)
        for k in ks:
            self._waiters[k].add(ev)
        try:
            yield ev
        finally:
            for k in ks:
                s = self._waiters.get(k)
                if s is not None:
                    s.discard(ev)
                    if not s:
                        del self._waiters[k]

    def notify(self, keys: Iterable[PartitionKey]) -> None:
        self.generation += 1
        waiters, subscribers = self._waiters, self._subscribers
        for k in keys:
            for ev in waiters.get(k, ()):
                ev.set()
            for sub in subscribers.get(k, ()):
                sub.changed(k)

    def watched_keys(self) -> list[PartitionKey]:
        """Partitions some fetch is waiting on or some fetch session holds
        (cross-agent polling, agent.cluster)."""
        if not self._subscribers:
            return list(self._waiters)
        return list(self._waiters.keys() | self._subscribers.keys())

    def notify_all(self) -> None:
        self.generation += 1
        for evs in self._waiters.values():
            for ev in evs:
                ev.set()
        for k, subs in self._subscribers.items():
            for sub in subs:
                sub.changed(k)
