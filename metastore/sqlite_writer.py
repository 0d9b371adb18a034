"""The hot writes of a file-backed SQLite metastore in one hop to a thread of their own.

Where it sits: :meth:`metastore.log.LogMixin.commit_objects` (every produce commit)
and the consolidation's row moves (:mod:`metastore.sqlite_swap`) run here; every
other write stays on SQLAlchemy (:meth:`metastore.base.SqlBase._write`).

Why: through SQLAlchemy on aiosqlite a commit is four round trips between the event
loop and the connection's thread (``BEGIN IMMEDIATE``, the commit function,
``COMMIT``, the checkout), and each return waits for the event loop's next turn.
On a busy agent a turn is milliseconds, so a 3-4 ms commit took 21-25 ms on
average (2 workers, Java defaults at 5 MB/s with the journal), with the database
locked meanwhile. Here the thread takes the writers' file lock
(:mod:`metastore.sqlite_wlock`), begins, runs the function, commits and releases
in one call; the event loop sees one result. The in-process order of writers is
kept by the caller's asyncio lock, which is taken before this.

The connection is configured as the engine's writers are (WAL, ``synchronous``
from ``FLOE_SQLITE_SYNCHRONOUS``, busy timeout, foreign keys).
"""

from __future__ import annotations

import asyncio
import fcntl
import sqlite3
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from metastore.engine import (
    SQLITE_BUSY_TIMEOUT_MS,
    SQLITE_WAL_AUTOCHECKPOINT_PAGES,
    sqlite_synchronous,
)
from metastore.sqlite_wlock import FileWriteLock

T = TypeVar("T")


class SqliteWriter:
    """One connection on one thread; :meth:`run` is one write transaction."""

    def __init__(self, path: str, lock: FileWriteLock | None) -> None:
        self._path = path
        self._lock = lock
        self._db: sqlite3.Connection | None = None
        self._thread = ThreadPoolExecutor(1, thread_name_prefix="floe-sqlite-writer")

    def _connect(self) -> sqlite3.Connection:
        db = sqlite3.connect(self._path, isolation_level=None, check_same_thread=False)
        db.execute(f"PRAGMA busy_timeout = {SQLITE_BUSY_TIMEOUT_MS}")
        db.execute("PRAGMA journal_mode = WAL")
        db.execute(f"PRAGMA synchronous = {sqlite_synchronous()}")
        db.execute("PRAGMA foreign_keys = ON")
        db.execute(f"PRAGMA wal_autocheckpoint = {SQLITE_WAL_AUTOCHECKPOINT_PAGES}")
        return db

    def _transaction(self, fn: Callable[..., T], args: tuple[Any, ...]) -> T:
        if self._db is None:
            self._db = self._connect()
        db = self._db
        fd = self._lock.fileno() if self._lock is not None else None
        if fd is not None:
            fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            db.execute("BEGIN IMMEDIATE")
            try:
                out = fn(db, *args)
            except BaseException:
                db.execute("ROLLBACK")
                raise
            db.execute("COMMIT")
            return out
        finally:
            if fd is not None:
                fcntl.flock(fd, fcntl.LOCK_UN)

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(db, *args)`` inside ``BEGIN IMMEDIATE`` ... ``COMMIT`` (rolled back if it raises).

        If the caller is cancelled the transaction still ends on the thread, and
        the file lock is given back there."""
        return await asyncio.get_running_loop().run_in_executor(
            self._thread, self._transaction, fn, args
        )

    def _close(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None

    async def close(self) -> None:
        await asyncio.get_running_loop().run_in_executor(self._thread, self._close)
        self._thread.shutdown(wait=True)
