"""Failed logins are counted and logged at most once per user and host per
interval; an unknown SCRAM user gets the same kind of server-first message as a
known one (issue 42, "Low" findings).

The rate limiter is tested with an injected clock; the wire tests send real
SaslHandshake / SaslAuthenticate frames to an agent.
"""

from __future__ import annotations

import asyncio
import base64
import logging
import socket
import struct
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from agent.security.sasl.failures import FAILURES, FailedLogins
from kafka_protocol.framing import RequestHeader, encode_request
from kafka_protocol.messages import (
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
)
from tests.fixtures.agent import RunningAgent


class _Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def _failures(mechanism: str) -> float:
    return FAILURES.labels(mechanism)._value.get()


def _lines(caplog: pytest.LogCaptureFixture, name: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == name]


def test_one_line_per_user_and_host_per_interval(caplog: pytest.LogCaptureFixture) -> None:
    clock = _Clock()
    logger = logging.getLogger("test.failed_logins")
    fl = FailedLogins(interval_s=10, clock=clock, logger=logger)
    before = _failures("PLAIN")
    caplog.set_level(logging.WARNING, logger="test.failed_logins")
    logged = 0
    for i in range(180):  # 180 failures in one second from one client
        clock.t = 1000 + i / 180
        logged += fl.record("PLAIN", "alice", "10.0.0.1", "wrong password")
    assert logged == 1 and _failures("PLAIN") - before == 180
    (line,) = _lines(caplog, "test.failed_logins")
    assert "10.0.0.1" in line and "'alice'" in line and "wrong password" in line
    # Another host, or another user, is a separate line in the same interval.
    assert fl.record("PLAIN", "alice", "10.0.0.2", "wrong password")
    assert fl.record("PLAIN", "bob", "10.0.0.1", "unknown user")
    assert not fl.record("PLAIN", "bob", "10.0.0.1", "unknown user")
    # The interval is over: the next failure is logged with the count left out.
    clock.t = 1011.0
    caplog.clear()
    assert fl.record("PLAIN", "alice", "10.0.0.1", "wrong password")
    alice = [x for x in _lines(caplog, "test.failed_logins") if "'alice'" in x and "10.0.0.1" in x]
    assert alice == [
        "SASL PLAIN authentication failed 179 more time(s) for 'alice' from 10.0.0.1 in 10 s (not logged one by one)",
        "closing 10.0.0.1: SASL PLAIN authentication failed for 'alice': wrong password",
    ]
    # A pair that stopped failing: the sweep says how many were left out, then forgets it.
    bob = [x for x in _lines(caplog, "test.failed_logins") if "'bob'" in x]
    assert bob == ["SASL PLAIN authentication failed 1 more time(s) for 'bob' from 10.0.0.1 in 10 s (not logged one by one)"]
    assert ("bob", "10.0.0.1") not in fl._windows


def test_rotating_user_names_share_one_entry(caplog: pytest.LogCaptureFixture) -> None:
    clock = _Clock()
    logger = logging.getLogger("test.failed_logins.cap")
    fl = FailedLogins(interval_s=10, clock=clock, logger=logger, max_keys=3)
    caplog.set_level(logging.WARNING, logger="test.failed_logins.cap")
    logged = sum(fl.record("SCRAM-SHA-256", f"user{i}", "10.0.0.9", "unknown user") for i in range(1000))
    assert logged == 4 and len(fl) == 4  # three names, then one "(many users)" entry
    assert len(_lines(caplog, "test.failed_logins.cap")) == 4


def _frame(s: socket.socket) -> bytes:
    def exact(n: int) -> bytes:
        out = b""
        while len(out) < n:
            chunk = s.recv(n - len(out))
            assert chunk, "connection closed"
            out += chunk
        return out

    (size,) = struct.unpack(">i", exact(4))
    return exact(size)[4:]  # response header v0: the correlation id


def _authenticate(port: int, mechanism: str, first: bytes) -> SaslAuthenticateResponse:
    """Handshake + one SaslAuthenticate (v1); the answer to it."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(encode_request(RequestHeader(17, 1, 1, "t"), SaslHandshakeRequest(mechanism=mechanism)))
        _frame(s)
        s.sendall(encode_request(RequestHeader(36, 1, 2, "t"), SaslAuthenticateRequest(auth_bytes=first)))
        return SaslAuthenticateResponse.decode(_frame(s), 1)


@pytest.fixture
def sasl_agent(agent_factory: Callable[..., RunningAgent]) -> RunningAgent:
    return agent_factory(
        listeners="PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
        sasl_users="alice:alice-secret",
        failed_auth_delay_ms=0,
    )


def test_wire_failures_counted_and_logged_once(sasl_agent: RunningAgent, caplog: pytest.LogCaptureFixture) -> None:
    port = int(sasl_agent.server.ports["SASL_PLAINTEXT"])
    user = f"mallory-{uuid.uuid4().hex[:6]}"  # the limiter is per process: a name no other test uses
    before = _failures("PLAIN")
    caplog.set_level(logging.WARNING)
    for _ in range(40):
        resp = _authenticate(port, "PLAIN", f"\0{user}\0guess".encode())
        assert resp.error_code == 58  # SASL_AUTHENTICATION_FAILED
    assert _failures("PLAIN") - before == 40
    lines = [r.getMessage() for r in caplog.records if user in r.getMessage()]
    assert len(lines) == 1 and "unknown user" in lines[0], lines
    body = sasl_agent.call(_scrape(sasl_agent))
    assert 'floe_sasl_authentication_failures_total{mechanism="PLAIN"}' in body


async def _scrape(agent: RunningAgent) -> str:
    from prometheus_client import generate_latest

    from agent.metrics import METRICS

    return generate_latest(METRICS.registry).decode()


def _server_first(resp: SaslAuthenticateResponse) -> dict[str, str]:
    assert resp.error_code == 0, resp
    return dict(part.split("=", 1) for part in bytes(resp.auth_bytes).decode().split(","))


def test_unknown_scram_user_looks_like_a_known_one(agent_factory: Callable[..., RunningAgent]) -> None:
    from agent.security.sasl.scram import DEFAULT_ITERATIONS, make_credential

    agent = agent_factory(listeners="SASL_PLAINTEXT://127.0.0.1:0", peer_token="t" * 32)

    async def put() -> None:
        await agent.broker.meta.put_scram_credential(make_credential("carol", "SCRAM-SHA-256", "pw"))

    agent.call(put())
    port = int(agent.server.ports["SASL_PLAINTEXT"])

    def first(user: str) -> dict[str, str]:
        return _server_first(_authenticate(port, "SCRAM-SHA-256", f"n,,n={user},r=abc".encode()))

    known, ghost, ghost_again, other = first("carol"), first("ghost"), first("ghost"), first("ghost2")
    assert known["i"] == ghost["i"] == str(DEFAULT_ITERATIONS)
    assert len(base64.b64decode(ghost["s"])) == len(base64.b64decode(known["s"])) == 32
    assert ghost["s"] == ghost_again["s"] != other["s"]  # stable per name, as a stored salt is
    # Not computable without the server's secret (the old salt was sha256 of a constant + name).
    import hashlib

    assert base64.b64decode(ghost["s"]) != hashlib.sha256(b"floe-unknown-user" + b"ghost").digest()


def test_fake_salt_is_the_same_on_every_agent_of_a_deployment(tmp_path: Path) -> None:
    """Two agents with the same peer token (the shared secret) tell an unknown user
    the same salt; another deployment's agents another one."""
    from agent.config import AgentConfig
    from agent.security.setup import Security
    from metastore import open_metastore

    async def salt(token: str) -> str:
        meta = await open_metastore(f"sqlite:///{tmp_path / 'm.db'}")
        try:
            cfg = AgentConfig(listeners="SASL_PLAINTEXT://127.0.0.1:0", peer_token=token, objects="memory://")
            sec = Security(cfg, meta)
            assert sec.sasl is not None
            server = sec.sasl.new_server("SCRAM-SHA-512")
            assert server is not None
            return (await server.step(b"n,,n=nobody,r=xyz")).decode().split(",s=")[1].split(",")[0]
        finally:
            await meta.close()

    a, b, c = (asyncio.run(salt(t)) for t in ("deploy-one-token", "deploy-one-token", "deploy-two-token"))
    assert a == b != c
