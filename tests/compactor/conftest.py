"""Fixtures of the compactor tests: a metastore (SQLite, or Postgres where asked), a
file store and a fake clock shared by both. The ``spark`` fixture is the shared
one of ``tests/fixtures/spark.py``."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from metastore import Metastore, open_metastore
from objectstore import open_object_store
from objectstore.base import ObjectStore
from tests.metastore.helpers import FakeClock


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def any_metastore_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'meta.db'}"
    return str(request.getfixturevalue("postgres_url"))


@pytest.fixture
def objects_url(tmp_path: Path) -> str:
    (tmp_path / "objects").mkdir(exist_ok=True)
    return f"file://{tmp_path / 'objects'}"


@pytest.fixture
async def meta(tmp_path: Path, clock: FakeClock) -> AsyncIterator[Metastore]:
    ms = await open_metastore(f"sqlite:///{tmp_path / 'meta.db'}", now_ms=clock)
    try:
        yield ms
    finally:
        await ms.close()


@pytest.fixture
async def store(objects_url: str) -> AsyncIterator[ObjectStore]:
    s = open_object_store(objects_url)
    async with s:
        yield s
