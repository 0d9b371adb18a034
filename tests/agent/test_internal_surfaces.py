"""The agent's admin port: internal routes need the peer credential (issues 15, 42).

``/blocks`` (peer block cache: the bytes of any object) and ``/kafka`` (the
group relay) answer 401 to anonymous callers and to a wrong token, 403 to the
metastore credential; ``/metrics``, ``/healthz`` and ``/readyz`` stay open.
The planning API takes no internal credential: it authenticates Kafka
principals (tests/security/test_scoped_credentials.py); on an agent without
SASL it is as open as the Kafka port. A malformed relayed frame is a 400. Two agent
processes holding the same token share blocks (peer GETs served, no fallback);
agents holding different tokens refuse each other and fall back to the object
store (clients still get their records). Without a token the internal routes
serve loopback callers only.
"""

from __future__ import annotations

import time
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any

import pytest

from agent.cluster.peer_cache import discover_host
from metastore.internal_auth import is_loopback
from tests.fixtures.agent_process import AgentProcess, scrape_metric

TOKEN = "agent-internal-token-0123456789abcdef"


def _status(
    url: str, *, method: str = "GET", token: str | None = None, data: bytes | None = None
) -> int:
    req = urllib.request.Request(url, method=method, data=data)
    if token is not None:
        req.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return int(r.status)
    except urllib.error.HTTPError as e:
        return int(e.code)


def test_internal_routes_need_the_token(agent_factory: Callable[..., Any]) -> None:
    agent = agent_factory(internal_token=TOKEN)
    base = f"http://127.0.0.1:{agent.server.admin_port}"
    blocks = f"{base}/blocks?key=any/object&start=0&end=10"
    assert _status(blocks) == 401
    assert _status(blocks, token="wrong") == 401
    assert _status(f"{base}/kafka", method="POST", data=b"\x00" * 16) == 401
    # No SASL listener: the planning API answers as the Kafka port would (anonymous).
    assert _status(f"{base}/floe/plan/v1") == 200
    assert _status(f"{base}/floe/plan/v1/read-plan", method="POST", data=b"{}") == 400
    for path in ("/metrics", "/healthz", "/readyz"):
        assert _status(base + path) in (200, 503), path  # open (readyz may be not ready yet)
    # With the token the handlers run: a missing object is a 502 from the cache, not a 401.
    assert _status(blocks, token=TOKEN) == 502
    assert _status(f"{base}/blocks", token=TOKEN) == 400
    assert _status(f"{base}/floe/plan/v1", token=TOKEN) == 200
    # Malformed relayed frames are the sender's fault: 400, never 500.
    for frame in (b"\x00" * 16, b"\x00\x0b\x00\x05\x00\x00\x00\x01\xff\xff\x01", b""):
        assert _status(f"{base}/kafka", method="POST", data=frame, token=TOKEN) == 400, frame


def test_peer_and_metastore_credentials_are_separate(agent_factory: Callable[..., Any]) -> None:
    agent = agent_factory(peer_token="peer-secret-0123456789", metastore_token="meta-secret-0123456789")
    base = f"http://127.0.0.1:{agent.server.admin_port}"
    assert _status(f"{base}/blocks", token="peer-secret-0123456789") == 400  # ran: bad params
    assert _status(f"{base}/blocks", token="meta-secret-0123456789") == 401
    assert _status(f"{base}/kafka", method="POST", data=b"", token="meta-secret-0123456789") == 401


def test_no_token_serves_loopback_only(agent_factory: Callable[..., Any]) -> None:
    agent = agent_factory(host="0.0.0.0")
    port = agent.server.admin_port
    assert _status(f"http://127.0.0.1:{port}/blocks") == 400  # loopback: served
    host = discover_host()
    if is_loopback(host):
        pytest.skip("this host has no non-loopback address")
    assert _status(f"http://{host}:{port}/blocks") == 401
    assert _status(f"http://{host}:{port}/healthz") == 200


def _consume_through(bootstrap: str, topic: str, n: int) -> int:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"{topic}-g"})
    got = 0
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        deadline = time.monotonic() + 30
        while got < n and time.monotonic() < deadline:
            got += sum(1 for m in consumer.consume(n, 0.5) if m.error() is None)
    finally:
        consumer.close()
    return got


def _share_blocks(agents: list[AgentProcess], topic: str) -> dict[str, float]:
    from confluent_kafka import Producer

    from tests.cluster.helpers import brokers, wait_for

    for a in agents:
        wait_for(lambda a=a: len(brokers(a)) == len(agents), what="both agents in the ring")
    producer = Producer({"bootstrap.servers": agents[0].bootstrap, "linger.ms": 0})
    for i in range(16):  # 16 objects: one flush per produce
        producer.produce(topic, value=f"object-{i}".encode() * 100)
        assert producer.flush(30) == 0
    names = ("floe_peer_gets_total", "floe_peer_serves_total", "floe_peer_get_failures_total")

    def total(name: str) -> float:
        return sum(scrape_metric(a.admin_port, name) for a in agents)

    before = {n: total(n) for n in names}
    assert _consume_through(agents[1].bootstrap, topic, 16) == 16
    return {n: total(n) - before[n] for n in names}


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["sqlite-file"], indirect=True)
def test_agents_with_the_token_share_blocks(
    agent_process_factory: Callable[..., AgentProcess],
) -> None:
    # Without write-through: the agent that wrote the objects would read them from its own cache.
    common = {
        "internal_token": TOKEN, "cluster_heartbeat_ms": 300, "peer_address": "127.0.0.1",
        "fetch_cache_writes": "false",
    }  # fmt: skip
    agents = [agent_process_factory(**common) for _ in range(2)]
    d = _share_blocks(agents, "peer-token")
    assert d["floe_peer_gets_total"] > 0 and d["floe_peer_serves_total"] > 0, d
    assert d["floe_peer_get_failures_total"] == 0, d


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["sqlite-file"], indirect=True)
def test_agents_with_different_tokens_refuse_each_other(
    agent_process_factory: Callable[..., AgentProcess],
) -> None:
    agents = [
        agent_process_factory(
            internal_token=f"{TOKEN}-{i}", cluster_heartbeat_ms=300, peer_address="127.0.0.1",
            fetch_cache_writes="false",
        )
        for i in range(2)
    ]
    d = _share_blocks(agents, "peer-wrong-token")  # the records still arrive (object store)
    assert d["floe_peer_serves_total"] == 0, d
    assert d["floe_peer_get_failures_total"] > 0, d
