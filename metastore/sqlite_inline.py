"""SQLite reads on the event loop's own thread: an aiosqlite connection without a thread.

Where it sits: under :mod:`metastore.engine`, which builds the read engine of a
file-backed SQLite metastore (``floe dev``, a single-node agent) from these
connections; :meth:`metastore.base.SqlBase._read` runs every read transaction
on it. Writes stay on aiosqlite's threads (a writer may wait for another
process's lock, and that wait must not stop the event loop).

Why: CPython's sqlite3 releases the GIL around every ``sqlite3_step`` (every
row) and takes it back after; a thread that wants it back behind a busy event
loop waits for the switch interval (1 ms in an agent, ``agent.server``). A
Fetch naming 500 partitions costs about 1,500 steps, so on aiosqlite's thread
it took up to a second and a half of waiting, for ~3 ms of SQLite work
(measured: 1,000 point queries 1.6 ms alone, 450 ms on a thread beside a busy
interpreter at a 1 ms switch interval). A WAL reader never waits for a lock,
so running reads inline blocks the loop only for the SQLite work itself.
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from collections.abc import Callable, Generator
from functools import partial
from typing import Any

import aiosqlite


class _Inline:
    """Stands for aiosqlite's queue to its thread: runs each call at once."""

    def put_nowait(self, item: tuple[asyncio.Future[Any] | None, Callable[[], Any]]) -> None:
        future, function = item
        try:
            result = function()
        except BaseException as e:  # handed to the waiter, as aiosqlite's thread does
            if future is not None and not future.done():
                future.set_exception(e)
            return
        if future is not None and not future.done():
            future.set_result(result)


class InlineConnection(aiosqlite.Connection):
    """An ``aiosqlite.Connection`` whose calls run on the caller's thread.

    Every aiosqlite operation (and SQLAlchemy's isolation-level setter) goes
    through ``_execute`` or the queue ``_tx``; both run the call directly here,
    so no thread is started and nothing waits for the GIL."""

    def __init__(self, connector: Callable[[], sqlite3.Connection], iter_chunk_size: int = 64) -> None:
        super().__init__(connector, iter_chunk_size)
        self._tx = _Inline()  # type: ignore[assignment]

    async def _execute(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        if not self._running or not self._connection:
            raise ValueError("Connection closed")
        return fn(*args, **kwargs)

    def __await__(self) -> Generator[Any, None, aiosqlite.Connection]:
        return self._connect().__await__()  # no thread to start


def inline_creator(path: str) -> Callable[[], InlineConnection]:
    """SQLAlchemy's ``async_creator`` for inline connections to the file ``path``."""
    # check_same_thread=False: the pool may close a connection from another thread
    # (engine disposal at interpreter exit); it is only ever used from one loop.
    return partial(InlineConnection, partial(sqlite3.connect, path, check_same_thread=False))


class InlineReader:
    """Raw read transactions on the caller's thread, without SQLAlchemy.

    The hot reads of a file-backed metastore (a Fetch's batch lookups, a topic's
    watermarks, read_committed's stable offsets) are already raw statements; what
    each still paid was SQLAlchemy's pool checkout, ``BEGIN`` through the event
    listener and the transaction's end around them (2-4% of the agents' samples at
    5 MB/s with a journal, where ~150 commits a second wake the Fetches). :meth:`run` keeps one
    ``query_only`` sqlite3 connection per thread and runs ``fn(db, *args)``
    between ``BEGIN`` and ``COMMIT``: one snapshot, as a ``_read()`` transaction."""

    def __init__(self, path: str, busy_timeout_ms: int) -> None:
        self._path = path
        self._busy_timeout_ms = busy_timeout_ms
        self._local = threading.local()
        self._all: list[sqlite3.Connection] = []

    def _connect(self) -> sqlite3.Connection:
        db = sqlite3.connect(self._path, isolation_level=None, check_same_thread=False)
        db.execute(f"PRAGMA busy_timeout = {int(self._busy_timeout_ms)}")
        db.execute("PRAGMA query_only = ON")
        self._local.db = db
        self._all.append(db)
        return db

    def run(self, fn: Callable[..., Any], *args: Any) -> Any:
        db: sqlite3.Connection | None = getattr(self._local, "db", None)
        if db is None:
            db = self._connect()
        db.execute("BEGIN")
        try:
            return fn(db, *args)
        finally:
            db.execute("COMMIT")

    def close(self) -> None:
        for db in self._all:
            db.close()
        self._all.clear()
        self._local = threading.local()
