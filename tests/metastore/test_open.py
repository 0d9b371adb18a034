"""``open_metastore``: URL schemes, the in-memory SQLite store, the protocol."""

from __future__ import annotations

import pytest

from metastore import ErrorCode, Metastore, SqlMetastore, open_metastore
from metastore.engine import asyncpg_dsn, normalize_url
from metastore.topic_config import validate_topic_name


@pytest.mark.parametrize(
    ("url", "driver"),
    [
        ("sqlite:///data/meta.db", "sqlite+aiosqlite"),
        ("sqlite+aiosqlite:///x.db", "sqlite+aiosqlite"),
        ("postgresql://u:p@h:5432/db", "postgresql+asyncpg"),
        ("postgres://u@h/db", "postgresql+asyncpg"),
        ("postgresql+asyncpg://u@h/db", "postgresql+asyncpg"),
    ],
)
def test_urls_map_to_async_drivers(url: str, driver: str) -> None:
    assert normalize_url(url).drivername == driver


def test_unknown_scheme_and_asyncpg_dsn() -> None:
    with pytest.raises(ValueError, match="unsupported"):
        normalize_url("mysql://h/db")
    assert asyncpg_dsn("postgresql+asyncpg://u:p%40ss@h:5/db") == "postgresql://u:p%40ss@h:5/db"


async def test_in_memory_sqlite() -> None:
    ms = await open_metastore("sqlite:///:memory:")
    try:
        assert isinstance(ms, SqlMetastore) and isinstance(ms, Metastore)
        assert (await ms.create_topic("t", 2)).error is ErrorCode.NONE
        assert [t.name for t in await ms.list_topics()] == ["t"]
    finally:
        await ms.close()


@pytest.mark.postgres
async def test_plain_postgres_url(postgres_url: str) -> None:
    plain = postgres_url.replace("postgresql+asyncpg://", "postgresql://")
    ms = await open_metastore(plain)  # migrating an up-to-date database is a no-op
    try:
        assert isinstance(ms, Metastore)
        assert (await ms.create_topic("t", 1)).error is ErrorCode.NONE
    finally:
        await ms.close()


def test_topic_names() -> None:
    assert validate_topic_name("a" * 249) is None
    assert validate_topic_name("with space") is not None
