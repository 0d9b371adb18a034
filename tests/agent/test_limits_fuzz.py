"""Fuzz the surfaces issue 15's limits added (hypothesis).

* The frame reader (agent.connection) with the limits on: random bytes in random
  chunks, with and without the pre-authentication cap, never raise; the
  connection either closes or holds at most 64 KiB more than the bytes received
  for a partial frame; the deadline check never raises.
* The internal-token middleware and the metastore service's body limits
  (metastore.internal_auth, metastore.service): random Authorization headers,
  paths and bodies get 401 / 404 / 413 or a JSON answer, never a 500.
"""

from __future__ import annotations

import asyncio
from typing import Any

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from agent.connection import KafkaConnection
from agent.security.limits import ConnectionLimits, ResponseBudget
from tests.agent.test_limits import Clock, Transport

TOKEN = "fuzz-token-0123456789abcdef"


async def _dispatch(ctx: Any, frame: Any, at: int) -> Any:
    return None


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    data=st.binary(max_size=4096),
    cuts=st.lists(st.integers(1, 512), max_size=40),
    pre_auth=st.booleans(),
    size=st.one_of(st.none(), st.integers(-(2**31), 2**31 - 1)),
)
@example(data=b"\x00\x00", cuts=[4, 1], pre_auth=False, size=65541)  # found in CI: grew to 65,541 after 1 byte
@example(data=b"\x00" * 3, cuts=[4, 1, 1], pre_auth=False, size=1024 * 1024)
def test_frame_reader_never_raises(data: bytes, cuts: list[int], pre_auth: bool, size: int | None) -> None:
    async def go() -> None:
        clock = Clock()
        conn = KafkaConnection(
            _dispatch, max_frame_bytes=1024 * 1024, max_pre_auth_frame_bytes=512,
            limits=ConnectionLimits(10, 10, clock=clock), budget=ResponseBudget(1024), clock=clock,
        )  # fmt: skip
        t = Transport()
        t.protocol = conn
        conn.connection_made(t)  # type: ignore[arg-type]
        conn.pre_auth = pre_auth
        stream = (size.to_bytes(4, "big", signed=True) if size is not None else b"") + data
        fed = 0
        for cut in [*cuts, len(stream)]:
            if t.closed or fed >= len(stream):
                break
            buf = conn.get_buffer(-1)
            n = min(len(buf), cut, len(stream) - fed)
            buf[:n] = stream[fed : fed + n]
            conn.buffer_updated(n)
            fed += n
            if conn._frame is not None:
                assert len(conn._frame) <= max(64 * 1024, 2 * conn._frame_filled + 64 * 1024)
            clock.t += 1
            conn.expired(clock.t, 600, 30)
        for _ in range(3):
            await asyncio.sleep(0)
        t.close()
        for task in conn._tasks:
            task.cancel()

    asyncio.run(go())


@settings(max_examples=60, deadline=None)
@given(
    auth=st.one_of(st.none(), st.text(st.characters(min_codepoint=32, max_codepoint=126), max_size=60), st.just(f"Bearer {TOKEN}"), st.just(f"bearer {TOKEN} ")),
    method=st.sampled_from(["live_agents", "heartbeat", "nope", "register_agent", "../x", "close"]),
    body=st.one_of(
        st.binary(max_size=2048),
        st.just(b"[" * 5000),
        st.just(b'{"a": [' + b"0," * 3000 + b'0], "k": {}}'),
        st.just(b'{"a": [], "k": {}}'),
    ),
)
def test_metastore_service_answers_every_request(auth: str | None, method: str, body: bytes) -> None:
    from aiohttp.test_utils import TestClient, TestServer

    from metastore import open_metastore
    from metastore.service import MetastoreService

    async def go() -> None:
        meta = await open_metastore("sqlite:///:memory:")
        service = MetastoreService(meta, token=TOKEN, max_request_bytes=16 * 1024, max_json_items=1000)
        async with TestClient(TestServer(service.app())) as client:
            headers = {"Authorization": auth} if auth is not None else {}
            r = await client.post(f"/rpc/{method}", data=body, headers=headers)
            text = await r.text()
            assert r.status in (200, 401, 404, 413), (r.status, text[:200])
            if r.status != 401 and not (auth or "").strip().lower().startswith("bearer"):
                raise AssertionError(f"served without a bearer token: {r.status}")
        await service.close()
        await meta.close()

    asyncio.run(go())
