"""``floe metastore serve`` refuses anonymous callers (issue 15) and bounds request bodies.

The served metastore runs in-process on loopback with a token; raw HTTP calls
(aiohttp) play the attacker of the issue: ``register_agent`` + ``heartbeat``
for a rogue address (which would have made the agents advertise it as leader)
and a forged ``commit_offsets``. Both get 401 and change nothing, while the
same calls with the token work through :class:`~metastore.remote.RemoteMetastore`.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import pytest

from metastore import Metastore, MetastoreError, open_metastore
from metastore.internal_auth import (
    InsecureBindError,
    check,
    is_loopback,
    require_token_or_loopback,
)
from metastore.remote import RemoteMetastore
from metastore.rpc import encode
from metastore.service import serve
from metastore.types import GroupOffset

TOKEN = "s3cret-internal-token-0123456789"


@dataclass
class Served:
    inner: Metastore
    url: str
    service: object


@pytest.fixture
async def served(tmp_path: Path) -> AsyncIterator[Served]:
    inner = await open_metastore(f"sqlite:///{tmp_path / 'meta.db'}")
    runner, port, service = await serve(
        inner, "127.0.0.1", 0, token=TOKEN, max_request_bytes=1024 * 1024
    )
    try:
        yield Served(inner, f"http://127.0.0.1:{port}", service)
    finally:
        await service.close()  # type: ignore[attr-defined]
        await runner.cleanup()
        await inner.close()


async def _post(
    url: str, method: str, args: list[object], headers: dict[str, str] | None = None
) -> tuple[int, bytes]:
    body = json.dumps({"a": encode(args), "k": {}})
    async with (
        aiohttp.ClientSession() as s,
        s.post(f"{url}/rpc/{method}", data=body, headers=headers or {}) as r,
    ):
        return r.status, await r.read()


async def test_anonymous_register_agent_and_heartbeat_refused(served: Served) -> None:
    status, text = await _post(served.url, "register_agent", ["rogue", "10.6.6.6", 9092, "default"])
    assert (status, text) == (401, b"unauthorized")
    status, _ = await _post(served.url, "heartbeat", ["rogue"])
    assert status == 401
    bad = {"Authorization": "Bearer not-the-token"}
    status, _ = await _post(served.url, "register_agent", ["rogue", "10.6.6.6", 9092], bad)
    assert status == 401
    status, _ = await _post(
        served.url, "register_agent", ["rogue", "10.6.6.6", 9092], {"Authorization": TOKEN}
    )
    assert status == 401  # the scheme is required
    assert [a.id for a in await served.inner.live_agents(0)] == []


async def test_anonymous_commit_offsets_forgery_refused(served: Served) -> None:
    created = await served.inner.create_topic("victim", 1)
    assert created.topic is not None
    forged = [GroupOffset(created.topic.id, 0, 123456)]
    status, _ = await _post(served.url, "commit_offsets", ["g", forged])
    assert status == 401
    assert await served.inner.fetch_offsets("g") == []


async def test_authenticated_calls_work(served: Served) -> None:
    remote = await RemoteMetastore(served.url, token=TOKEN).start()
    try:
        await remote.register_agent("a1", "127.0.0.1", 9092, "default")
        assert await remote.heartbeat("a1")
        assert [a.id for a in await remote.live_agents(0)] == ["a1"]
    finally:
        await remote.close()
    wrong = await RemoteMetastore(served.url, token="wrong").start()
    try:
        with pytest.raises(MetastoreError, match="unauthorized"):
            await wrong.live_agents(0)
    finally:
        await wrong.close()


async def test_healthz_stays_open(served: Served) -> None:
    async with aiohttp.ClientSession() as s, s.get(f"{served.url}/healthz") as r:
        assert r.status == 200


async def test_request_body_capped_before_parsing(served: Served) -> None:
    headers = {"Authorization": f"Bearer {TOKEN}"}
    big = b'{"a": ["' + b"x" * (2 * 1024 * 1024) + b'"]}'
    async with (
        aiohttp.ClientSession() as s,
        s.post(f"{served.url}/rpc/live_agents", data=big, headers=headers) as r,
    ):
        assert r.status == 413
    # Within the byte cap but more JSON values than allowed: refused before json.loads.
    served.service.max_json_items = 1000  # type: ignore[attr-defined]
    many = json.dumps({"a": [[0] * 5000], "k": {}}).encode()
    async with (
        aiohttp.ClientSession() as s,
        s.post(f"{served.url}/rpc/live_agents", data=many, headers=headers) as r,
    ):
        assert r.status == 413
        assert "JSON values" in (await r.json())["error"]["message"]
    # Anonymous: 401 before the body is even considered.
    async with aiohttp.ClientSession() as s, s.post(f"{served.url}/rpc/live_agents", data=big) as r:
        assert r.status == 401


async def test_no_token_serves_loopback_only(tmp_path: Path) -> None:
    inner = await open_metastore(f"sqlite:///{tmp_path / 'meta.db'}")
    runner, port, service = await serve(inner, "127.0.0.1", 0)
    try:
        remote = await RemoteMetastore(f"http://127.0.0.1:{port}", token="").start()
        try:
            assert await remote.live_agents(0) == []
        finally:
            await remote.close()
    finally:
        await service.close()
        await runner.cleanup()
        await inner.close()


def test_refuses_to_serve_beyond_loopback_without_token() -> None:
    with pytest.raises(InsecureBindError, match="FLOE_INTERNAL_TOKEN"):
        require_token_or_loopback("", "0.0.0.0", "floe metastore serve")
    require_token_or_loopback("", "127.0.0.1", "floe metastore serve")
    require_token_or_loopback("", "::1", "floe metastore serve")
    require_token_or_loopback(TOKEN, "0.0.0.0", "floe metastore serve")


def test_check_and_loopback() -> None:
    assert check(f"Bearer {TOKEN}", TOKEN)
    assert check(f"bearer {TOKEN}", TOKEN)
    assert not check(f"Bearer {TOKEN}x", TOKEN)
    assert not check(None, TOKEN)
    assert not check("Bearer ", "")
    assert not check(f"Basic {TOKEN}", TOKEN)
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("127.1.2.3")
    assert not is_loopback("10.0.0.1") and not is_loopback(None) and not is_loopback("")


def test_cli_refuses_without_token(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from floe_cli.main import main

    monkeypatch.delenv("FLOE_INTERNAL_TOKEN", raising=False)
    rc = main(
        [
            "metastore",
            "--metastore",
            f"sqlite:///{tmp_path / 'm.db'}",
            "serve",
            "--host",
            "0.0.0.0",
            "--port",
            "0",
        ]
    )
    assert rc == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "FLOE_INTERNAL_TOKEN" in err[0], err


async def test_sqlite_synchronous_full_outside_floe_dev(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from sqlalchemy import text

    from metastore.engine import create_engine

    monkeypatch.delenv("FLOE_SQLITE_SYNCHRONOUS", raising=False)
    engine = create_engine(f"sqlite:///{tmp_path / 'full.db'}")
    async with engine.connect() as conn:
        assert (await conn.execute(text("PRAGMA synchronous"))).scalar() == 2  # FULL
    await engine.dispose()
    monkeypatch.setenv("FLOE_SQLITE_SYNCHRONOUS", "NORMAL")  # what floe dev sets
    engine = create_engine(f"sqlite:///{tmp_path / 'normal.db'}")
    async with engine.connect() as conn:
        assert (await conn.execute(text("PRAGMA synchronous"))).scalar() == 1  # NORMAL
    await engine.dispose()


async def test_slow_header_and_idle_connections_to_the_service_are_closed(tmp_path: Path) -> None:
    """`floe metastore serve` closes a connection whose request header never ends, and
    an idle one, after its idle timeout (the admin port does the same, issue 42)."""
    import asyncio
    import time

    inner = await open_metastore(f"sqlite:///{tmp_path / 'meta.db'}")
    runner, port, service = await serve(inner, "127.0.0.1", 0, idle_timeout_s=0.3)
    try:
        idle = await asyncio.open_connection("127.0.0.1", port)
        slow = await asyncio.open_connection("127.0.0.1", port)
        slow[1].write(b"POST /rpc/live_agents HTTP/1.1\r\nHost: x\r\n")  # the header never ends
        t0 = time.monotonic()
        for reader, writer in (idle, slow):
            assert await asyncio.wait_for(reader.read(), timeout=5) == b""  # closed by the service
            writer.close()
        assert time.monotonic() - t0 < 5
        remote = await RemoteMetastore(f"http://127.0.0.1:{port}", token="").start()
        try:
            assert await remote.live_agents(0) == []  # a complete request is answered
        finally:
            await remote.close()
    finally:
        await service.close()
        await runner.cleanup()
        await inner.close()
