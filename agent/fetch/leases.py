"""Read leases for Kafka fetches in flight: what the agent just looked up, the GC keeps.

Where it sits: :class:`~agent.fetch.reader.FetchReader` reports the object keys of every
batch lookup (:meth:`FetchLeases.seen`); at most once per ``WINDOW_S`` those keys
are registered under a fresh read lease of this agent (``agent-<id>-fetch-<n>``,
``Metastore.acquire_read_lease``) that lasts ``TTL_MS`` and is never renewed. So
an object a consumer is reading from is not deleted by the compactor's GC for
``TTL_MS`` after the agent last looked it up, whatever the delete grace period
(even ``--delete-grace-ms 0``) - the same mechanism that protects Spark jobs. A
fetch that still loses its object (looked up within the last window, claimed
meanwhile) fails that partition with a retriable error and re-plans on retry.
One small metastore write per window per agent, only while fetches run.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Iterable
from typing import Any

from metastore.types import MetastoreError

log = logging.getLogger(__name__)

WINDOW_S = 1.0
TTL_MS = 15_000


class FetchLeases:
    def __init__(self, meta: Any, agent_id: str) -> None:
        self.meta = meta
        self.prefix = f"agent-{agent_id}-fetch-"
        self._ids = itertools.count(1)
        self._pending: set[str] = set()
        self._last = -1e9
        self._timer: asyncio.TimerHandle | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self.flushes = 0

    def seen(self, keys: Iterable[str]) -> None:
        """Note objects a lookup returned (called on the event loop)."""
        before = len(self._pending)
        self._pending.update(keys)
        if len(self._pending) == before or self._timer is not None:
            return
        loop = asyncio.get_running_loop()
        delay = max(0.0, self._last + WINDOW_S - loop.time())
        self._timer = loop.call_later(delay, self._start)

    def _start(self) -> None:
        self._timer = None
        keys, self._pending = sorted(self._pending), set()
        if not keys:
            return
        self._last = asyncio.get_running_loop().time()
        task = asyncio.get_running_loop().create_task(self._flush(keys))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _flush(self, keys: list[str]) -> None:
        lease = f"{self.prefix}{next(self._ids)}"
        try:
            await self.meta.acquire_read_lease(lease, keys, TTL_MS, owner="agent fetches")
            self.flushes += 1
        except (MetastoreError, OSError) as e:  # the delete grace period still applies
            log.warning("fetch read lease %s failed: %s", lease, e)

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        for t in self._tasks:
            t.cancel()
