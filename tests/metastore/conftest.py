"""Fixtures of the metastore contract suite: one ``ms`` per implementation, a fake clock."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from metastore import Metastore, open_metastore
from tests.metastore.helpers import FakeClock


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def metastore_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'meta.db'}"
    return str(request.getfixturevalue("postgres_url"))


@pytest.fixture
async def ms(metastore_url: str, clock: FakeClock) -> AsyncIterator[Metastore]:
    # Postgres test databases are copies of an already migrated template.
    store = await open_metastore(
        metastore_url, now_ms=clock, auto_migrate=metastore_url.startswith("sqlite")
    )
    try:
        yield store
    finally:
        await store.close()
