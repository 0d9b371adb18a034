"""Metastore URLs and SQLAlchemy engines.

``open_metastore`` accepts ``sqlite:///path`` / ``postgresql://...`` and maps them
to the async drivers (aiosqlite, asyncpg); ``http(s)://`` names a metastore served
by ``floe metastore serve`` (:func:`is_served`), which has no engine here. SQLite connections get WAL mode, a busy
timeout and ``synchronous=FULL``: the metastore holds acknowledged offsets, and
in WAL mode NORMAL may lose the last commits on a power failure (issue 15);
``floe dev`` alone sets ``FLOE_SQLITE_SYNCHRONOUS=NORMAL``; pysqlite's implicit transaction handling is
turned off so that we emit ``BEGIN`` ourselves, and ``BEGIN IMMEDIATE`` (take the
write lock up front, no upgrade deadlocks) on connections carrying the
``floe_immediate`` execution option.
"""

from __future__ import annotations

import os
from typing import Any

from sqlalchemy import event
from sqlalchemy.engine import URL, make_url
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine
from sqlalchemy.pool import StaticPool

SQLITE_BUSY_TIMEOUT_MS = 30_000
SQLITE_READ_BUSY_TIMEOUT_MS = 1_000
# The writer's own checkpoint threshold where metastore.sqlite_checkpoint checkpoints
# in the background (64 MiB of 4 KiB pages): a safety net, not the normal path.
SQLITE_WAL_AUTOCHECKPOINT_PAGES = 16_384
SQLITE_SYNCHRONOUS_ENV = "FLOE_SQLITE_SYNCHRONOUS"


def sqlite_synchronous() -> str:
    """FULL unless ``FLOE_SQLITE_SYNCHRONOUS`` says otherwise (floe dev: NORMAL)."""
    value = os.environ.get(SQLITE_SYNCHRONOUS_ENV, "FULL").strip().upper() or "FULL"
    if value not in ("OFF", "NORMAL", "FULL", "EXTRA"):
        raise ValueError(f"{SQLITE_SYNCHRONOUS_ENV} must be OFF, NORMAL, FULL or EXTRA, got {value!r}")
    return value
IMMEDIATE = "floe_immediate"


def normalize_url(url: str | URL) -> URL:
    """Map plain or sync URLs to the async driver URL we run on."""
    parsed = make_url(url)
    backend = parsed.get_backend_name()
    if backend == "sqlite":
        return parsed.set(drivername="sqlite+aiosqlite")
    if backend in ("postgresql", "postgres"):
        return parsed.set(drivername="postgresql+asyncpg")
    raise ValueError(f"unsupported metastore URL scheme: {parsed.drivername!r}")


SERVED_SCHEMES = ("http://", "https://")


def is_served(url: str | URL) -> bool:
    """A metastore behind ``floe metastore serve`` (:mod:`metastore.remote`)."""
    return isinstance(url, str) and url.lower().startswith(SERVED_SCHEMES)


def is_postgres(url: str | URL) -> bool:
    """A database URL for Postgres (False for a served metastore, whatever serves it:
    its clients hold no database connection)."""
    if is_served(url):
        return False
    return normalize_url(url).get_backend_name() == "postgresql"


def asyncpg_dsn(url: str | URL) -> str:
    """The libpq-style DSN asyncpg wants, from a SQLAlchemy URL."""
    plain = normalize_url(url).set(drivername="postgresql")
    return plain.render_as_string(hide_password=False)


def has_libpq_ssl_params(url: str | URL) -> bool:
    """Whether the URL carries libpq TLS parameters (``sslmode=verify-full``,
    ``sslrootcert=...``, ``sslcert``, ``sslkey``, ...)."""
    return any(k.startswith("ssl") for k in make_url(url).query)


def create_engine(url: str | URL, *, wal_autocheckpoint: int | None = None, **kwargs: Any) -> AsyncEngine:
    """An async engine; SQLite connections are configured for a concurrent writer
    (``wal_autocheckpoint`` pages before a commit checkpoints; SQLite's default if None)."""
    parsed = normalize_url(url)
    if parsed.get_backend_name() != "sqlite":
        if has_libpq_ssl_params(parsed):
            # SQLAlchemy hands URL query parameters to asyncpg.connect() as keyword
            # arguments, which has none named sslmode/sslrootcert: let asyncpg parse
            # the DSN itself (libpq's semantics, e.g. sslmode=verify-full checks the
            # server's certificate against sslrootcert and its name against the host).
            import asyncpg

            dsn = asyncpg_dsn(parsed)
            kwargs.setdefault("async_creator", lambda: asyncpg.connect(dsn))
        return create_async_engine(parsed, **kwargs)
    if parsed.database in (None, "", ":memory:"):
        # One shared connection, or every checkout would see its own empty database.
        kwargs.setdefault("poolclass", StaticPool)
    else:
        # A fetch looks up many partitions at once; connections beyond the pool are
        # opened and closed per checkout (a thread + connect + PRAGMAs each), so keep
        # enough of them pooled.
        kwargs.setdefault("pool_size", 32)
        kwargs.setdefault("max_overflow", 32)
        # No ROLLBACK when a connection goes back to the pool: every use ends its own
        # transaction (Connection.close() rolls back one left open), and on aiosqlite
        # the redundant rollback is one more round trip to the connection's thread
        # on every read (a Fetch's lookups, the wake-up poll).
        kwargs.setdefault("pool_reset_on_return", None)
    engine = create_async_engine(parsed, **kwargs)
    _configure_sqlite(engine, parsed, SQLITE_BUSY_TIMEOUT_MS, wal_autocheckpoint=wal_autocheckpoint)
    return engine


def create_read_engine(url: str | URL) -> AsyncEngine | None:
    """The engine a file-backed SQLite metastore reads with: connections that run
    on the event loop's thread (:mod:`metastore.sqlite_inline`), ``query_only``.
    ``None`` for Postgres and in-memory or URI databases (they read with the
    engine of :func:`create_engine`)."""
    parsed = normalize_url(url)
    if parsed.get_backend_name() != "sqlite" or parsed.database in (None, "", ":memory:") or parsed.query:
        return None
    from metastore.sqlite_inline import inline_creator

    engine = create_async_engine(
        parsed, async_creator=inline_creator(parsed.database), pool_size=8, max_overflow=32,
        pool_reset_on_return=None,
    )  # fmt: skip
    # A WAL reader waits for no lock in normal operation; a rare wait (WAL recovery
    # by another connection) would stop the event loop, so it is kept short.
    _configure_sqlite(engine, parsed, SQLITE_READ_BUSY_TIMEOUT_MS, query_only=True)
    return engine


def _configure_sqlite(
    engine: AsyncEngine,
    parsed: URL,
    busy_timeout_ms: int,
    *,
    query_only: bool = False,
    wal_autocheckpoint: int | None = None,
) -> None:
    synchronous = sqlite_synchronous()

    @event.listens_for(engine.sync_engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        # Let us issue BEGIN ourselves (pysqlite otherwise defers it, see SQLAlchemy's
        # "Serializable isolation / Savepoints / Transactional DDL" recipe).
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute(f"PRAGMA busy_timeout = {busy_timeout_ms}")
        if parsed.database not in (None, "", ":memory:"):
            cursor.execute("PRAGMA journal_mode = WAL")
        cursor.execute(f"PRAGMA synchronous = {synchronous}")
        cursor.execute("PRAGMA foreign_keys = ON")
        if query_only:
            cursor.execute("PRAGMA query_only = ON")
        if wal_autocheckpoint is not None:
            cursor.execute(f"PRAGMA wal_autocheckpoint = {int(wal_autocheckpoint)}")
        cursor.close()

    @event.listens_for(engine.sync_engine, "begin")
    def _on_begin(conn: Any) -> None:
        immediate = conn.get_execution_options().get(IMMEDIATE, False)
        conn.exec_driver_sql("BEGIN IMMEDIATE" if immediate else "BEGIN")
