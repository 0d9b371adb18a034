"""``/readyz`` sees storage: moto stopped, Postgres stopped, a stalled pipeline.

A private moto process and a private Postgres server (the session's are shared
with other tests) back a real :class:`~agent.server.AgentServer`. Each outage
must turn the agent not-ready within 10 s and ready again after recovery. The
readiness rounds are driven by calling :meth:`Readiness.check_once` (the
background loop is stopped), so the only waiting is the probes' own injected
deadline (3 s, the default): no sleeps as synchronisation.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from agent.broker import Broker
from agent.config import AgentConfig
from agent.server import AgentServer
from metastore.pgserver import PostgresServer, find_pg_bin
from tests.fixtures.s3 import REGION, create_bucket, start_moto, stop_moto

pytestmark = [pytest.mark.postgres, pytest.mark.s3, pytest.mark.timeout(180)]


async def _readyz(server: AgentServer) -> tuple[int, dict[str, Any]]:
    async with aiohttp.ClientSession() as s, s.get(f"http://127.0.0.1:{server.admin_port}/readyz") as r:
        return r.status, json.loads(await r.read())


@pytest.fixture
async def outage_agent(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Any]:
    if find_pg_bin() is None:
        pytest.skip("PostgreSQL binaries not installed")
    for k, v in {"AWS_ACCESS_KEY_ID": "x", "AWS_SECRET_ACCESS_KEY": "x", "AWS_DEFAULT_REGION": REGION}.items():
        monkeypatch.setenv(k, v)
    pg = PostgresServer().start()
    moto, endpoint = start_moto()
    port = int(endpoint.rsplit(":", 1)[1])
    create_bucket(endpoint, "ready")
    cfg = AgentConfig(
        host="127.0.0.1", port=0, admin_port=0,
        metastore=pg.url(), objects=f"s3://ready/p?endpoint={endpoint}&region={REGION}",
        ready_deadline_ms=3000, cluster_id="floe-test",
    )  # fmt: skip
    server = AgentServer(await Broker.open(cfg))
    await server.start()
    await server.readiness.stop()  # the test drives the rounds
    state = {"pg": pg, "moto": moto, "port": port}
    try:
        yield server, state
    finally:
        await server.close(drain_timeout=2)
        stop_moto(state["moto"])
        pg.stop()


async def _round(server: AgentServer) -> tuple[float, bool, list[str]]:
    t0 = time.monotonic()
    st = await server.readiness.check_once()
    return time.monotonic() - t0, st.ready, st.reasons()


async def test_readyz_follows_object_store_and_metastore(outage_agent: Any) -> None:
    server, state = outage_agent
    took, ready, reasons = await _round(server)
    assert ready, reasons
    assert (await _readyz(server))[0] == 200
    assert (await server.readiness.check_once()).checks["object_store"].detail == "writable"

    # moto stopped: not ready after one round, bounded by the probe deadline.
    stop_moto(state["moto"])
    took, ready, reasons = await _round(server)
    assert not ready and took < 10, (took, reasons)
    assert [r for r in reasons if r.startswith("object_store:")], reasons
    status, body = await _readyz(server)
    assert status == 503 and not body["checks"]["object_store"]["ok"] and body["checks"]["metastore"]["ok"]
    state["moto"], _ = start_moto(port=state["port"])  # the same endpoint comes back
    create_bucket(f"http://127.0.0.1:{state['port']}", "ready")  # moto keeps nothing
    for _ in range(3):  # a pooled connection to the old moto may fail one probe first
        took, ready, reasons = await _round(server)
        if ready:
            break
    assert ready, reasons

    # Postgres stopped: not ready within the deadline, ready again once it is back.
    state["pg"].pause()
    took, ready, reasons = await _round(server)
    assert not ready and took < 10, (took, reasons)
    assert [r for r in reasons if r.startswith("metastore:")], reasons
    state["pg"].resume()
    for _ in range(3):  # the pool's broken connections are replaced over a round or two
        took, ready, reasons = await _round(server)
        if ready:
            break
    assert ready, reasons
    assert (await _readyz(server))[0] == 200


async def test_stalled_pipeline_is_not_ready(outage_agent: Any) -> None:
    server, _ = outage_agent
    stall = [0.0]
    server.readiness.pipeline_stall_s = lambda: stall[0]
    assert (await server.readiness.check_once()).ready
    stall[0] = 31.0
    st = await server.readiness.check_once()
    assert not st.ready and st.reasons() == ["produce_pipeline: a segment has waited 31 s for upload and commit"]
