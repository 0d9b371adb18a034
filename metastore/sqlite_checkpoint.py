"""WAL checkpoints of a file-backed SQLite metastore, off the commit path.

Where it sits: beside :mod:`metastore.engine`. :func:`metastore.open_metastore`
starts one :class:`WalCheckpointer` per file-backed SQLite metastore (``floe
dev``, a single-node agent) and :meth:`metastore.base.SqlBase.close` stops it.

Why: in WAL mode the connection that commits runs the checkpoint itself once
the WAL holds ``wal_autocheckpoint`` pages (1,000 by default). A group commit
at width touches a page of every index per partition - about 2,500 pages for
one object over 1,000 partitions - so nearly every commit also copied its
pages back into the database file, inside the write transaction the produce
pipeline waits for: 60-75 ms of a ~230 ms commit (loadtest/HISTORY.md,
2026-11-28). Here a PASSIVE checkpoint runs every ``interval`` seconds on its
own connection in a worker thread. It takes no lock a writer or reader waits
for, and the sqlite3 module releases the GIL while it runs, so it uses the
other core. The writer's own threshold is raised to
``SQLITE_WAL_AUTOCHECKPOINT_PAGES`` (:mod:`metastore.engine`) rather than
turned off: if this task stops, commits still bound the WAL.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sqlite3
from concurrent.futures import ThreadPoolExecutor

log = logging.getLogger(__name__)

CHECKPOINT_INTERVAL_S = 0.1


class WalCheckpointer:
    """PASSIVE checkpoints of the database at ``path`` every ``interval`` seconds.

    Its connection lives on one thread of its own: a checkpoint and the close
    that follows it run one after the other there, never at once (closing a
    sqlite3 connection while another thread steps it is a use after free)."""

    def __init__(self, path: str, interval: float = CHECKPOINT_INTERVAL_S) -> None:
        self.path = path
        self.interval = interval
        self._conn: sqlite3.Connection | None = None
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="floe-sqlite-checkpoint")
        self._task: asyncio.Task[None] | None = None
        self._closed = False

    def start(self) -> WalCheckpointer:
        self._task = asyncio.get_running_loop().create_task(self._loop(), name="floe-sqlite-checkpoint")
        return self

    async def _loop(self) -> None:
        while True:
            await asyncio.sleep(self.interval)
            await self.run_once()

    async def run_once(self) -> tuple[int, int, int] | None:
        """One PASSIVE checkpoint: ``(busy, frames in the WAL, frames checkpointed)``,
        or None if SQLite refused (logged; the next one tries again)."""
        try:
            return await asyncio.get_running_loop().run_in_executor(self._thread, self._checkpoint)
        except sqlite3.Error as e:
            log.warning("sqlite checkpoint of %s failed: %s", self.path, e)
            return None

    def _checkpoint(self) -> tuple[int, int, int]:
        if self._conn is None:
            self._conn = sqlite3.connect(self.path, timeout=1.0, check_same_thread=False, isolation_level=None)
        busy, frames, done = self._conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
        return int(busy), int(frames), int(done)

    def _close_conn(self) -> None:
        if self._conn is not None:
            conn, self._conn = self._conn, None
            conn.close()

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        if self._closed:
            return
        self._closed = True
        # Queued behind a checkpoint still running on the thread, if any.
        await asyncio.get_running_loop().run_in_executor(self._thread, self._close_conn)
        self._thread.shutdown(wait=False)
