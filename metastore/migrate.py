"""Programmatic schema migration: ``await migrate(url)`` (used by ``floe metastore migrate``,
by ``open_metastore`` and by the test template database).

Runs every Alembic migration up to ``head`` in one transaction. On Postgres a
transaction-scoped advisory lock serialises agents that start at the same time;
on SQLite ``BEGIN IMMEDIATE`` does the same. Idempotent.
"""

from __future__ import annotations

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import text
from sqlalchemy.engine import URL, Connection
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncEngine

from metastore.engine import IMMEDIATE, create_engine, normalize_url
from metastore.types import MetastoreError

SCRIPT_LOCATION = "metastore:migrations"
VERSION_TABLE = "floe_alembic_version"
_ADVISORY_LOCK_KEY = 0x466C6F65  # "Floe"


def alembic_config(url: str | URL | None = None) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", SCRIPT_LOCATION)
    if url is not None:
        rendered = normalize_url(url).render_as_string(hide_password=False)
        cfg.set_main_option("sqlalchemy.url", rendered.replace("%", "%%"))
    return cfg


def head_revision() -> str | None:
    return ScriptDirectory.from_config(alembic_config()).get_current_head()


def _upgrade(connection: Connection, cfg: Config, revision: str) -> None:
    cfg.attributes["connection"] = connection
    command.upgrade(cfg, revision)


def _current(connection: Connection) -> str | None:
    return MigrationContext.configure(
        connection, opts={"version_table": VERSION_TABLE}
    ).get_current_revision()


async def migrate(url: str | URL, revision: str = "head") -> None:
    """Bring the database at ``url`` to ``revision`` (default: the newest schema)."""
    engine = create_engine(url)
    try:
        await migrate_engine(engine, revision)
    finally:
        await engine.dispose()


async def migrate_engine(engine: AsyncEngine, revision: str = "head") -> None:
    """``migrate`` on an existing engine (needed for ``sqlite:///:memory:``)."""
    cfg = alembic_config(engine.url)
    try:
        async with engine.connect() as conn:
            conn = await conn.execution_options(**{IMMEDIATE: True})
            async with conn.begin():
                if conn.dialect.name == "postgresql":
                    await conn.execute(
                        text("SELECT pg_advisory_xact_lock(:key)"), {"key": _ADVISORY_LOCK_KEY}
                    )
                await conn.run_sync(_upgrade, cfg, revision)
    except SQLAlchemyError as e:
        raise MetastoreError(f"migrating the metastore failed: {e}") from e


async def current_revision(url: str | URL) -> str | None:
    """The revision the database at ``url`` is at (None when never migrated)."""
    engine = create_engine(url)
    try:
        async with engine.connect() as conn:
            return await conn.run_sync(_current)
    finally:
        await engine.dispose()
