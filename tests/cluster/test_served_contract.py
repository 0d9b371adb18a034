"""The metastore contract suite, run against the metastore served over HTTP.

The same tests as ``tests/metastore/test_contract.py`` and ``test_groups.py``
(imported here), with ``ms`` overridden: the SQLite or Postgres metastore is
served in-process by :mod:`metastore.service` and the tests talk to it through
:class:`metastore.remote.RemoteMetastore`, so the wire encoding, the error
mapping and the Postgres commit batching are all checked against the same
expectations as the direct implementations.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from metastore import Metastore, open_metastore
from metastore.remote import RemoteMetastore
from metastore.service import serve
from tests.metastore.helpers import FakeClock
from tests.metastore.test_contract import *  # noqa: F403  (the suite itself)
from tests.metastore.test_groups import *  # noqa: F403


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture(
    params=["served-sqlite", pytest.param("served-postgres", marks=pytest.mark.postgres)]
)
def metastore_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "served-sqlite":
        return f"sqlite:///{tmp_path / 'meta.db'}"
    return str(request.getfixturevalue("postgres_url"))


@pytest.fixture
async def ms(metastore_url: str, clock: FakeClock) -> AsyncIterator[Metastore]:
    inner = await open_metastore(
        metastore_url, now_ms=clock, auto_migrate=metastore_url.startswith("sqlite")
    )
    # Authenticated like a deployment (metastore.internal_auth): every call carries the token.
    runner, port, service = await serve(inner, "127.0.0.1", 0, token="contract-token")
    remote = await RemoteMetastore(f"http://127.0.0.1:{port}", token="contract-token").start()
    try:
        yield remote  # type: ignore[misc]
    finally:
        await remote.close()
        await service.close()
        await runner.cleanup()
        await inner.close()
