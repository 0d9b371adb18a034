"""Shared plumbing of the SQL metastores: engine, injected clock, transactions.

Every operation runs in one transaction from ``_read()`` or ``_write()``. Writes
on SQLite are serialised in-process by a lock, across processes by a file lock
(:mod:`metastore.sqlite_wlock`), and take the database write lock up front
(``BEGIN IMMEDIATE``), so concurrent writers queue instead of failing with
SQLITE_BUSY. Database exceptions become ``MetastoreError`` here, at the
boundary (SQLAlchemy's, and sqlite3's from the raw statements run on the
connection: ``metastore.sqlite_log``, ``metastore.sqlite_commit``); business
outcomes never raise.
"""

from __future__ import annotations

import asyncio
import sqlite3
import time
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from contextlib import asynccontextmanager, nullcontext
from typing import Any

from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from metastore.engine import IMMEDIATE, SQLITE_READ_BUSY_TIMEOUT_MS
from metastore.sqlite_checkpoint import WalCheckpointer
from metastore.sqlite_inline import InlineReader
from metastore.sqlite_wlock import write_lock_for
from metastore.sqlite_writer import SqliteWriter
from metastore.types import MetastoreError


def chunks(items: Sequence[Any], size: int) -> Iterator[Sequence[Any]]:
    """``items`` in slices of at most ``size``: the IN (...) lists of one statement
    each (SQLite allows 32,766 bound variables per statement)."""
    for start in range(0, len(items), size):
        yield items[start : start + size]


Clock = Callable[[], int]


async def _on_raw(conn: AsyncConnection, fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(db, *args)`` on the sqlite3 connection under ``conn`` (in its transaction),
    on aiosqlite's thread or inline, as the connection runs calls."""
    raw = await conn.get_raw_connection()
    aio: Any = raw.driver_connection
    return await aio._execute(fn, aio._conn, *args)

# What a transaction of ``_read()`` / ``_write()`` may fail with: SQLAlchemy's errors,
# and sqlite3's from raw statements run on the driver connection.
DB_ERRORS = (SQLAlchemyError, sqlite3.Error)


def system_clock_ms() -> int:
    return time.time_ns() // 1_000_000


class SqlBase:
    """Holds the engine and the clock; mixins add the operations."""

    def __init__(
        self,
        engine: AsyncEngine,
        now_ms: Clock | None = None,
        *,
        read_engine: AsyncEngine | None = None,
    ) -> None:
        self.engine = engine
        # Read transactions (``_read``): a file-backed SQLite metastore reads on the
        # event loop's thread (metastore.sqlite_inline); otherwise the same engine.
        self.read_engine = read_engine or engine
        self.now_ms: Clock = now_ms or system_clock_ms
        self.dialect = engine.dialect.name
        self._write_lock: asyncio.Lock | None = asyncio.Lock() if self.dialect == "sqlite" else None
        # Across processes (floe dev's workers and compactor share the file): a lock
        # the kernel hands over at once, instead of SQLite's sleeping busy handler.
        self._file_lock = write_lock_for(engine.url.database) if self.dialect == "sqlite" else None
        # The hot writes (commits, consolidation moves) in one hop (metastore.sqlite_writer).
        self._raw_writer = (
            SqliteWriter(str(engine.url.database), self._file_lock)
            if self._file_lock is not None
            else None
        )
        self.checkpointer: WalCheckpointer | None = None  # file-backed SQLite (open_metastore)
        # The hot raw reads on the caller's thread (_read_raw), where reads are inline anyway.
        self._inline_reader = (
            InlineReader(str(engine.url.database), SQLITE_READ_BUSY_TIMEOUT_MS)
            if self._file_lock is not None and self.read_engine is not engine
            else None
        )

    @asynccontextmanager
    async def _write(self) -> AsyncIterator[AsyncConnection]:
        lock: Any = self._write_lock if self._write_lock is not None else nullcontext()
        flock: Any = self._file_lock if self._file_lock is not None else nullcontext()
        try:
            async with lock, flock, self.engine.connect() as conn:
                conn = await conn.execution_options(**{IMMEDIATE: True})
                async with conn.begin():
                    yield conn
        except DB_ERRORS as e:
            raise MetastoreError(f"metastore write failed: {e}") from e

    async def _write_raw(self, fn: Callable[..., Any], *args: Any) -> Any:
        """``fn(db, *args)`` in one write transaction on a raw sqlite3 connection: one
        hop to the writer's thread when the database is a file, else on aiosqlite's
        connection inside :meth:`_write`."""
        if self._raw_writer is not None and self._write_lock is not None:
            try:
                async with self._write_lock:
                    return await self._raw_writer.run(fn, *args)
            except DB_ERRORS as e:
                raise MetastoreError(f"metastore write failed: {e}") from e
        async with self._write() as conn:
            return await _on_raw(conn, fn, *args)

    @asynccontextmanager
    async def _read(self) -> AsyncIterator[AsyncConnection]:
        try:
            async with self.read_engine.connect() as conn, conn.begin():
                yield conn
        except DB_ERRORS as e:
            raise MetastoreError(f"metastore read failed: {e}") from e

    async def _read_raw(self, fn: Callable[..., Any], *args: Any) -> Any:
        """``fn(db, *args)`` in one read transaction on a raw sqlite3 connection: on
        the caller's thread without SQLAlchemy when reads are inline (a file-backed
        metastore, :class:`metastore.sqlite_inline.InlineReader`), else on the
        connection of a :meth:`_read` transaction."""
        if self._inline_reader is not None:
            try:
                return self._inline_reader.run(fn, *args)
            except sqlite3.Error as e:
                raise MetastoreError(f"metastore read failed: {e}") from e
        async with self._read() as conn:
            return await _on_raw(conn, fn, *args)

    async def close(self) -> None:
        if self._inline_reader is not None:
            self._inline_reader.close()
        if self.checkpointer is not None:
            await self.checkpointer.close()
            self.checkpointer = None
        if self.read_engine is not self.engine:
            await self.read_engine.dispose()
        await self.engine.dispose()
        if self._raw_writer is not None:
            await self._raw_writer.close()
            self._raw_writer = None
        if self._file_lock is not None:
            self._file_lock.close()

    async def __aenter__(self) -> SqlBase:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
