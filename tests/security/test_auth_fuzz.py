"""Fuzz of the authentication path.

1. Every SASL mechanism's state machine (PLAIN, SCRAM-SHA-256/512, OAUTHBEARER)
   fed arbitrary messages (hypothesis): it answers bytes or raises
   AuthenticationFailed (a clean SASL_AUTHENTICATION_FAILED), never anything else.
2. A real agent's SASL listener hit by seeded random scripts over the wire:
   truncated SASL frames, huge SCRAM messages, garbage tokens, random bytes,
   requests out of order. Each connection ends closed (after an error answer at
   most) with a clear log line, no handler traceback, and the agent keeps
   serving an authenticated client.
"""

from __future__ import annotations

import asyncio
import json
import random
import socket
import struct
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent.config import AgentConfig
from agent.security.sasl import AuthenticationFailed
from agent.security.sasl.oauthbearer import OAuthBearerServer, oauth_factory
from agent.security.sasl.plain import PlainServer
from agent.security.sasl.scram import ScramServer, make_credential
from kafka_protocol.framing import RequestHeader, encode_request
from kafka_protocol.messages import (
    ApiVersionsRequest,
    MetadataRequest,
    SaslAuthenticateRequest,
    SaslHandshakeRequest,
)
from tests.fixtures.agent import RunningAgent
from tests.security.test_sasl_plain import ck_conf, ck_round_trip

CRED = make_credential("u", "SCRAM-SHA-256", "pw", 4096)

messages = st.one_of(
    st.binary(max_size=300),
    st.text(max_size=200).map(str.encode),
    st.sampled_from([b"n,,n=u,r=abc", b"n,,n=u,r=", b"y,a=x,n=u,r=1", b"c=biws,r=abc,p=AAAA", b"\x00u\x00pw",
                     b"n,,\x01auth=Bearer x.y.z\x01\x01", b"n,,\x01\x01", b"p=,c=,r=", b"n=,r=a,=b"]),
)


def _servers(tmp: Path) -> list[Any]:
    async def lookup(user: str) -> Any:
        return CRED if user == "u" else None

    jwks = tmp / "jwks.json"
    if not jwks.exists():
        jwks.write_text(json.dumps({"keys": []}))
    cfg = AgentConfig(oauth_jwks=str(jwks))
    return [
        PlainServer({"u": "pw"}),
        ScramServer("SCRAM-SHA-256", lookup),
        ScramServer("SCRAM-SHA-512", lookup),
        oauth_factory(cfg, lambda: 0)(),
    ]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(script=st.lists(messages, min_size=1, max_size=3))
def test_mechanisms_fail_cleanly_on_any_input(script: list[bytes], tmp_path: Path) -> None:
    for server in _servers(tmp_path):
        for msg in script:
            try:
                out = asyncio.run(server.step(msg))
            except AuthenticationFailed as e:
                assert str(e).startswith("Authentication failed")
                break
            assert isinstance(out, bytes)
        if server.complete:  # only the right PLAIN password completes
            assert isinstance(server, PlainServer) and b"\x00u\x00pw" in script
    assert isinstance(_servers(tmp_path)[3], OAuthBearerServer)


# -- over the wire ---------------------------------------------------------------------


def _frame(req: Any, version: int, corr: int) -> bytes:
    return encode_request(RequestHeader(req.API_KEY, version, corr, "fuzz"), req)


def _script(rng: random.Random) -> list[bytes]:
    hs = _frame(SaslHandshakeRequest(mechanism=rng.choice(["PLAIN", "SCRAM-SHA-512", "OAUTHBEARER", "GSSAPI", ""])), 1, 1)
    kind = rng.choice(["garbage-token", "huge-scram", "truncated", "random-bytes", "out-of-order", "bad-size", "double-handshake"])
    if kind == "garbage-token":
        return [hs, _frame(SaslAuthenticateRequest(auth_bytes=rng.randbytes(rng.randint(0, 500))), rng.choice([0, 1, 2]), 2)]
    if kind == "huge-scram":
        big = b"n,,n=u,r=" + b"A" * rng.randint(5_000, 200_000)
        return [_frame(SaslHandshakeRequest(mechanism="SCRAM-SHA-512"), 1, 1), _frame(SaslAuthenticateRequest(auth_bytes=big), 2, 2)]
    if kind == "truncated":
        whole = _frame(SaslAuthenticateRequest(auth_bytes=b"\x00u\x00pw" * 10), 1, 2)
        return [hs, whole[: rng.randint(1, len(whole) - 1)]]
    if kind == "random-bytes":
        return [rng.randbytes(rng.randint(1, 2000))]
    if kind == "out-of-order":
        first = [_frame(SaslAuthenticateRequest(auth_bytes=b"x"), 1, 1), _frame(MetadataRequest(topics=None), 9, 2)]
        rng.shuffle(first)
        return first
    if kind == "bad-size":
        return [struct.pack(">i", rng.choice([-1, 2**31 - 1, 10_000_000])) + rng.randbytes(10)]
    return [hs, hs, _frame(ApiVersionsRequest(), 0, 3)]


def _run_script(port: int, script: list[bytes]) -> None:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        for part in script:
            try:
                s.sendall(part)
            except OSError:
                return  # already closed by the agent
        try:
            s.shutdown(socket.SHUT_WR)  # a truncated frame ends here: EOF mid-frame
            while s.recv(65536):
                pass  # at most error answers, then the agent closes
        except OSError:  # reset by the agent, or already closed
            pass


@pytest.fixture
def fuzz_agent(agent_factory: Callable[..., RunningAgent]) -> RunningAgent:
    return agent_factory(
        listeners="PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
        sasl_users="alice:alice-secret",
        failed_auth_delay_ms=0,
        max_pre_auth_frame_bytes=65536,
    )


def test_wire_fuzz_closes_connections_and_keeps_serving(
    fuzz_agent: RunningAgent, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level("INFO")
    rng = random.Random(20261125)
    port = fuzz_agent.server.ports["SASL_PLAINTEXT"]
    for _ in range(150):
        _run_script(port, _script(rng))
    # No handler failed with a traceback; every bad connection was logged as closed.
    tracebacks = [r for r in caplog.records if r.exc_info]
    assert not tracebacks, tracebacks[0].getMessage()
    closing = [r.getMessage() for r in caplog.records if r.getMessage().startswith("closing ")]
    assert len(closing) >= 100, closing[:5]
    assert any("authentication failed" in m for m in closing)
    assert any("before SASL authentication" in m for m in closing)
    # The agent still authenticates and serves a real client.
    assert len(ck_round_trip(ck_conf(fuzz_agent, "alice", "alice-secret"), "after-fuzz", n=3)) == 3
