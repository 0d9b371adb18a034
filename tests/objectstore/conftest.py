"""Fixtures for the object store suites: one ``store`` per backend (memory, file, S3)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from objectstore import ObjectStore, open_object_store
from objectstore.memory import reset_memory_stores

BACKENDS = [
    pytest.param("memory", id="memory"),
    pytest.param("file", id="file"),
    pytest.param("s3", id="s3", marks=pytest.mark.s3),
]


def backend_url(request: pytest.FixtureRequest, backend: str, tmp_path: Path) -> str:
    if backend == "memory":
        return "memory://"
    if backend == "file":
        return f"file://{tmp_path / 'objects'}"
    return str(request.getfixturevalue("s3_url"))


@pytest.fixture(params=BACKENDS)
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[ObjectStore]:
    """A bare (non-retrying) store of each backend, empty."""
    url = backend_url(request, request.param, tmp_path)
    async with open_object_store(url, retry=False) as s:
        yield s


@pytest.fixture(autouse=True)
def _clean_memory_stores() -> None:
    reset_memory_stores()
