"""The agents' admin/peer HTTP port over TLS (``FLOE_ADMIN_TLS``, issue 42).

A real agent (in-process, tests/fixtures/agent.py) serves its admin port over
HTTPS with the Kafka listeners' certificate or its own; the peer clients the
other agents use (:class:`~agent.cluster.peer_cache.PeerBlockLoader` for
``/blocks``, :class:`~agent.cluster.forward.GroupForwarder` for ``/kafka``) reach
it over https, verifying its certificate against ``FLOE_PEER_SSL_CAFILE`` (and
``FLOE_PEER_SSL_SERVER_NAME`` when one certificate names every agent). A peer
that cannot verify the certificate does not send its credential or its request
in clear: the block is read from the object store instead and the relayed
request falls back to the local handler, as for any unreachable peer.
"""

from __future__ import annotations

import ssl
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import aiohttp
import pytest

from agent.cluster import peer_cache
from agent.cluster.forward import FORWARDS, GroupForwarder
from agent.cluster.peer_cache import PeerBlockLoader
from agent.cluster.ring import Peer, Rings
from agent.config import AgentConfig
from agent.connection import RawFrame
from agent.handlers.describe_configs import planning_url
from agent.security.tls import PeerTls, admin_server_tls
from kafka_protocol.framing import RequestHeader, encode_request
from kafka_protocol.messages import HeartbeatRequest, HeartbeatResponse
from tests.fixtures.agent import RunningAgent
from tests.fixtures.pki import TestCA

PEER_TOKEN = "peer-token-for-admin-tls-0123456789"
SHARED_NAME = "floe-agents.internal"


def _peer(agent: RunningAgent) -> Peer:
    return Peer("the-owner", "127.0.0.1", agent.port, None, agent.server.admin_port, "127.0.0.1")


def _loader(owner: Peer, tls: PeerTls | None, fallback: dict[str, int]) -> PeerBlockLoader:
    async def store_get(key: str, start: int, end: int) -> bytes:
        fallback["reads"] += 1
        return b"from the object store"

    me = Peer("me", "127.0.0.1", 1, None, 2)
    # Every object is owned by ``owner`` (a ring of one peer besides this agent).
    membership: Any = SimpleNamespace(rings=Rings([owner]), me=me)
    return PeerBlockLoader(store_get, membership, None, token=PEER_TOKEN, tls=tls)


def _ctx(ca: Path | None) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=str(ca) if ca else None)


async def test_admin_port_serves_https_and_peers_read_blocks_over_it(
    tmp_path: Path, agent_factory: Callable[..., RunningAgent]
) -> None:
    ca = TestCA(tmp_path / "pki")
    cert = ca.issue("agent", dns=("localhost",), ips=("127.0.0.1",))
    agent = agent_factory(
        admin_tls=True, ssl_certfile=str(cert.cert), ssl_keyfile=str(cert.key), peer_token=PEER_TOKEN,
        admin_host="127.0.0.1",
    )  # fmt: skip
    admin = agent.server.admin_port
    assert agent.server.admin_scheme == "https"
    async with aiohttp.ClientSession() as s:
        async with s.get(f"https://127.0.0.1:{admin}/healthz", ssl=_ctx(ca.cert)) as r:
            assert r.status == 200 and (await r.json())["status"] == "ok"
        with pytest.raises(aiohttp.ClientError):  # nothing in clear
            await s.get(f"http://127.0.0.1:{admin}/healthz", timeout=aiohttp.ClientTimeout(total=5))
        with pytest.raises(aiohttp.ClientConnectorCertificateError):  # a private CA: not the system store
            await s.get(f"https://127.0.0.1:{admin}/healthz", timeout=aiohttp.ClientTimeout(total=5))
    # Spark finds the planning API at an https URL.
    [(name, url, _)] = planning_url(agent.broker)
    assert name == "floe.planning.url" and url.startswith(f"https://127.0.0.1:{admin}/")

    data = bytes(range(256)) * 64
    agent.call(agent.broker.store.put("tls/block.seg", data))
    reads = {"reads": 0}
    trusting = _loader(_peer(agent), PeerTls(_ctx(ca.cert)), reads)
    try:
        assert await trusting.load("tls/block.seg", 100, 5000) == data[100:5000]
        assert reads["reads"] == 0  # served by the peer over https
    finally:
        await trusting.close()
    failures = peer_cache.PEER_FAILURES._value.get()
    untrusting = _loader(_peer(agent), PeerTls(_ctx(None)), reads)
    try:
        assert await untrusting.load("tls/block.seg", 0, 10) == b"from the object store"
    finally:
        await untrusting.close()
    assert reads["reads"] == 1 and peer_cache.PEER_FAILURES._value.get() == failures + 1

    # The group relay over https: a Heartbeat for an unknown group, answered by the owner.
    frame = encode_request(RequestHeader(12, 0, 7, "relayed"), HeartbeatRequest(group_id="g", member_id="m"))[4:]

    async def local() -> str:
        return "fallback"

    forwards = FORWARDS._value.get()
    owner = _peer(agent)
    relay = GroupForwarder(lambda: owner, lambda _g: owner, token=PEER_TOKEN, tls=PeerTls(_ctx(ca.cert)))
    try:
        result = await relay.relay(owner, frame, "127.0.0.1", local, principal="User:alice")
    finally:
        await relay.close()
    assert isinstance(result, RawFrame), result
    assert FORWARDS._value.get() == forwards + 1
    body = bytes(result.data)  # size prefix, correlation id, Heartbeat v0 body
    assert int.from_bytes(body[:4], "big") == len(body) - 4 and int.from_bytes(body[4:8], "big") == 7
    assert HeartbeatResponse.decode(memoryview(body)[8:], 0).error_code != 0  # no such member
    refused = GroupForwarder(lambda: owner, lambda _g: owner, token=PEER_TOKEN, tls=PeerTls(_ctx(None)))
    try:
        assert await refused.relay(owner, frame, "127.0.0.1", local, principal="User:alice") == "fallback"
    finally:
        await refused.close()


async def test_one_certificate_for_every_agent_is_checked_against_the_shared_name(
    tmp_path: Path, agent_factory: Callable[..., RunningAgent]
) -> None:
    """FLOE_PEER_SSL_SERVER_NAME: peers' addresses are private IPs known only at run
    time; a certificate naming one DNS name is checked against that name."""
    ca = TestCA(tmp_path / "pki")
    shared = ca.issue("agents", dns=(SHARED_NAME,))
    agent = agent_factory(
        admin_tls=True, admin_ssl_certfile=str(shared.cert), admin_ssl_keyfile=str(shared.key),
        peer_token=PEER_TOKEN, admin_host="127.0.0.1",
    )  # fmt: skip
    agent.call(agent.broker.store.put("tls/shared.seg", b"0123456789"))
    reads = {"reads": 0}
    for tls, expected in (
        (PeerTls(_ctx(ca.cert), SHARED_NAME), b"2345"),
        (PeerTls(_ctx(ca.cert)), b"from the object store"),  # 127.0.0.1 is not in the certificate
    ):
        loader = _loader(_peer(agent), tls, reads)
        try:
            assert await loader.load("tls/shared.seg", 2, 6) == expected
        finally:
            await loader.close()
    assert reads["reads"] == 1


def test_peer_tls_follows_the_settings(tmp_path: Path) -> None:
    assert PeerTls.from_config(AgentConfig()) is None
    assert admin_server_tls(AgentConfig()) is None
    ca = TestCA(tmp_path / "pki")
    tls = PeerTls.from_config(
        AgentConfig(admin_tls=True, peer_ssl_cafile=str(ca.cert), peer_ssl_server_name=SHARED_NAME)
    )
    assert tls is not None and tls.server_name == SHARED_NAME
    assert tls.context.verify_mode == ssl.CERT_REQUIRED and tls.context.check_hostname
    with pytest.raises(ValueError, match="FLOE_PEER_SSL_CAFILE"):
        PeerTls.from_config(AgentConfig(admin_tls=True, peer_ssl_cafile=str(tmp_path / "missing.pem")))


def test_admin_tls_without_a_certificate_is_refused_with_the_settings_to_set(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="FLOE_ADMIN_SSL_CERTFILE"):
        admin_server_tls(AgentConfig(admin_tls=True))
    cert = TestCA(tmp_path / "pki").issue("agent", dns=("localhost",))
    # Its own certificate without its own key never pairs with the listeners' key.
    with pytest.raises(ValueError, match="FLOE_ADMIN_SSL_CERTFILE"):
        admin_server_tls(
            AgentConfig(admin_tls=True, admin_ssl_certfile=str(cert.cert), ssl_keyfile=str(cert.key))
        )
    ctxs = admin_server_tls(AgentConfig(admin_tls=True, ssl_certfile=str(cert.cert), ssl_keyfile=str(cert.key)))
    assert ctxs is not None and ctxs.context.verify_mode == ssl.CERT_NONE  # no client certificate asked
