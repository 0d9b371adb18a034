"""Fixtures of the compactor tests: a metastore (SQLite, or Postgres where asked), a
file store, a fake clock shared by both, and one SparkSession per test session."""

from __future__ import annotations

import os
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

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


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    pytest.importorskip("pyspark")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    session = (
        SparkSession.builder.master("local[2]")
        .appName("floe-compactor-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()
