"""Wake-ups for long-polling fetches when new data is committed.

The produce committer calls :meth:`CommitNotifier.notify` for every partition it
advanced; a fetch that found too few bytes waits on the partitions it asked for.
Each waiter gets its own event, so one commit wakes exactly the fetches that
care about that partition.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Iterable, Iterator
from contextlib import contextmanager

PartitionKey = tuple[object, int]


class CommitNotifier:
    def __init__(self) -> None:
        self._waiters: dict[PartitionKey, set[asyncio.Event]] = defaultdict(set)

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
        for k in keys:
            for ev in self._waiters.get(k, ()):
                ev.set()

    def watched_keys(self) -> list[PartitionKey]:
        """Partitions some fetch is waiting on (cross-agent polling, agent.cluster)."""
        return list(self._waiters)

    def notify_all(self) -> None:
        for evs in self._waiters.values():
            for ev in evs:
                ev.set()
