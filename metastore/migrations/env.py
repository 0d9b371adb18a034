"""Alembic environment: runs on a connection handed in by ``metastore.migrate``.

``migrate(url)`` opens an async engine, begins one transaction (holding an
advisory lock on Postgres, the write lock on SQLite, so concurrent agents that
migrate at start-up serialise) and runs ``command.upgrade`` through
``run_sync`` with the sync connection in ``config.attributes["connection"]``.
Offline (``--sql``) mode is supported for generating SQL scripts.
"""

from __future__ import annotations

import asyncio

from alembic import context
from sqlalchemy.engine import Connection

from metastore.engine import create_engine
from metastore.schema import metadata

VERSION_TABLE = "floe_alembic_version"
config = context.config


def _configure(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=metadata,
        version_table=VERSION_TABLE,
        render_as_batch=connection.dialect.name == "sqlite",
        compare_type=True,
    )


def run_offline() -> None:
    context.configure(
        url=config.get_main_option("sqlalchemy.url"),
        target_metadata=metadata,
        version_table=VERSION_TABLE,
        literal_binds=True,
    )
    with context.begin_transaction():
        context.run_migrations()


def _run_on(connection: Connection) -> None:
    _configure(connection)
    with context.begin_transaction():
        context.run_migrations()


async def _run_async(url: str) -> None:
    engine = create_engine(url)
    try:
        async with engine.begin() as conn:
            await conn.run_sync(_run_on)
    finally:
        await engine.dispose()


def run_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        _run_on(connection)
    else:
        url = config.get_main_option("sqlalchemy.url")
        assert url, "sqlalchemy.url or a connection is required"
        asyncio.run(_run_async(url))


if context.is_offline_mode():
    run_offline()
else:
    run_online()
