"""Fixtures for the object store suites: one ``store`` per backend (memory, file, S3,
the file store behind the simulated-latency wrapper with a tiny custom profile, and
the journal tier's quorum of three file buckets)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from objectstore import ObjectStore, open_object_store
from objectstore.latency import OPS as LATENCY_OPS
from objectstore.memory import reset_memory_stores

BACKENDS = [
    pytest.param("memory", id="memory"),
    pytest.param("file", id="file"),
    pytest.param("latency", id="file+latency"),
    pytest.param("quorum", id="quorum"),
    pytest.param("s3", id="s3", marks=pytest.mark.s3),
]


def backend_url(request: pytest.FixtureRequest, backend: str, tmp_path: Path) -> str:
    if backend == "memory":
        return "memory://"
    if backend == "file":
        return f"file://{tmp_path / 'objects'}"
    if backend == "latency":
        # Real (tiny) sleeps on every call: the wrapper must pass data and errors through.
        tiny = "&".join(f"latency_{op}_p50_ms=0.05&latency_{op}_p99_ms=0.5" for op in LATENCY_OPS)
        return f"file://{tmp_path / 'objects'}?latency=none&{tiny}&latency_mbps=1000&latency_seed=1"
    return str(request.getfixturevalue("s3_url"))


@pytest.fixture(params=BACKENDS)
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[ObjectStore]:
    """A bare (non-retrying) store of each backend, empty."""
    if request.param == "quorum":  # the journal tier: 3 file buckets, 2 for a write
        from objectstore.quorum import QuorumStore

        buckets = [open_object_store(f"file://{tmp_path / f'j{i}'}", retry=False) for i in range(3)]
        async with QuorumStore(buckets, 2) as q:
            yield q
        return
    url = backend_url(request, request.param, tmp_path)
    async with open_object_store(url, retry=False) as s:
        yield s


@pytest.fixture(autouse=True)
def _clean_memory_stores() -> None:
    reset_memory_stores()
