"""SASL PLAIN over SASL_PLAINTEXT with real clients (confluent-kafka, kafka-python,
aiokafka), and the errors a client sees when authentication fails."""

from __future__ import annotations

import itertools
import socket
import struct
import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest

from kafka_protocol.framing import RequestHeader, encode_request
from kafka_protocol.messages import MetadataRequest
from tests.fixtures.agent import RunningAgent

USERS = "alice:alice-secret,bob:bob-secret"


@pytest.fixture
def sasl_agent(agent_factory: Callable[..., RunningAgent]) -> RunningAgent:
    return agent_factory(
        listeners="PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
        sasl_users=USERS,
        failed_auth_delay_ms=10,
    )


def sasl_port(agent: RunningAgent) -> int:
    return int(agent.server.ports["SASL_PLAINTEXT"])


def ck_conf(agent: RunningAgent, user: str, password: str, **extra: Any) -> dict[str, Any]:
    return {
        "bootstrap.servers": f"127.0.0.1:{sasl_port(agent)}",
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "PLAIN",
        "sasl.username": user,
        "sasl.password": password,
        **extra,
    }


def ck_round_trip(conf: dict[str, Any], topic: str, n: int = 20) -> list[bytes]:
    from confluent_kafka import Consumer, Producer

    p = Producer({**conf, "linger.ms": 5})
    for i in range(n):
        p.produce(topic, f"m{i}".encode())
    assert p.flush(30) == 0
    c = Consumer({**conf, "group.id": f"g-{uuid.uuid4().hex[:6]}", "auto.offset.reset": "earliest"})
    c.subscribe([topic])
    got: list[bytes] = []
    deadline = time.monotonic() + 30
    while len(got) < n and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is not None and not m.error():
            got.append(m.value())
    c.close()
    return got


def test_confluent_plain_round_trip_and_principal(sasl_agent: RunningAgent) -> None:
    got = ck_round_trip(ck_conf(sasl_agent, "alice", "alice-secret"), "plain-t")
    assert got == [f"m{i}".encode() for i in range(20)]
    # Every connection on the SASL listener authenticated as alice.
    sasl_conns = [c for c in sasl_agent.server._conns if c.listener.name == "SASL_PLAINTEXT"]
    assert all(str(c.principal) == "User:alice" for c in sasl_conns)


def test_metadata_advertises_the_listener_the_request_came_in_on(sasl_agent: RunningAgent) -> None:
    from confluent_kafka.admin import AdminClient

    for port in (sasl_agent.port, sasl_port(sasl_agent)):
        conf = (
            ck_conf(sasl_agent, "bob", "bob-secret")
            if port != sasl_agent.port
            else {"bootstrap.servers": f"127.0.0.1:{port}"}
        )
        md = AdminClient(conf).list_topics(timeout=10)
        assert [(b.host, b.port) for b in md.brokers.values()] == [("127.0.0.1", port)]


@pytest.mark.parametrize(
    ("user", "password"),
    [("alice", "wrong"), ("mallory", "alice-secret")],
    ids=["wrong-password", "unknown-user"],
)
def test_confluent_bad_credentials_error(
    sasl_agent: RunningAgent, user: str, password: str
) -> None:
    from confluent_kafka import KafkaError
    from confluent_kafka.admin import AdminClient

    errors: list[Any] = []
    admin = AdminClient({**ck_conf(sasl_agent, user, password), "error_cb": errors.append})
    with pytest.raises(Exception):  # noqa: B017  # the exact error is asserted below
        admin.list_topics(timeout=3)
    deadline = time.monotonic() + 10
    while not errors and time.monotonic() < deadline:
        admin.poll(0.2)  # error_cb is served from poll()
    auth = [e for e in errors if e.code() == KafkaError._AUTHENTICATION]
    assert auth, errors
    assert "Authentication failed: Invalid username or password" in auth[0].str()


@pytest.mark.slow
def test_kafka_python_plain_round_trip_and_bad_password(
    sasl_agent: RunningAgent, caplog: pytest.LogCaptureFixture
) -> None:
    from kafka import KafkaConsumer, KafkaProducer
    from kafka.errors import KafkaError

    conf = {
        "bootstrap_servers": f"127.0.0.1:{sasl_port(sasl_agent)}",
        "security_protocol": "SASL_PLAINTEXT",
        "sasl_mechanism": "PLAIN",
        "sasl_plain_username": "bob",
        "sasl_plain_password": "bob-secret",
    }
    p = KafkaProducer(**conf)
    for i in range(5):
        p.send("kp-plain", f"k{i}".encode())
    p.flush(30)
    p.close()
    c = KafkaConsumer("kp-plain", auto_offset_reset="earliest", consumer_timeout_ms=10000, **conf)
    assert [m.value for m in itertools.islice(c, 5)] == [f"k{i}".encode() for i in range(5)]
    c.close()
    # kafka-python retries the bootstrap until its timeout; each attempt fails with our error.
    with pytest.raises(KafkaError):
        KafkaProducer(
            **{
                **conf,
                "sasl_plain_password": "nope",
                "max_block_ms": 3000,
                "request_timeout_ms": 3000,
                "bootstrap_timeout_ms": 3000,
            }
        )
    assert (
        "SaslAuthenticationFailedError: Authentication failed: Invalid username or password"
        in caplog.text
    )


def aio_round_trip(conf: dict[str, Any], topic: str, prefix: str) -> list[bytes]:
    """aiokafka with ``conf``: produce five records to ``topic``, consume them back."""
    import asyncio

    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

    async def run() -> list[bytes]:
        p = AIOKafkaProducer(**conf)
        await p.start()
        for i in range(5):
            await p.send_and_wait(topic, f"{prefix}{i}".encode())
        await p.stop()
        c = AIOKafkaConsumer(topic, auto_offset_reset="earliest", **conf)
        await c.start()
        got: list[bytes] = []
        try:
            async with asyncio.timeout(20):
                async for m in c:
                    got.append(m.value)
                    if len(got) == 5:
                        break
        finally:
            await c.stop()
        return got

    return asyncio.run(run())


def test_aiokafka_plain_round_trip(sasl_agent: RunningAgent) -> None:
    conf = {
        "bootstrap_servers": f"127.0.0.1:{sasl_port(sasl_agent)}",
        "security_protocol": "SASL_PLAINTEXT",
        "sasl_mechanism": "PLAIN",
        "sasl_plain_username": "alice",
        "sasl_plain_password": "alice-secret",
    }
    assert aio_round_trip(conf, "aio-plain", "a") == [f"a{i}".encode() for i in range(5)]


def _send(sock: socket.socket, request: Any, version: int) -> None:
    header = RequestHeader(request.API_KEY, version, 1, "x")
    sock.sendall(encode_request(header, request))


def test_request_before_authentication_closes_connection(sasl_agent: RunningAgent) -> None:
    """Kafka closes a SASL-listener connection whose first request is not
    ApiVersions/SaslHandshake/SaslAuthenticate; the agent keeps serving others."""
    with socket.create_connection(("127.0.0.1", sasl_port(sasl_agent)), timeout=5) as s:
        _send(s, MetadataRequest(topics=None), 9)
        assert s.recv(4) == b""  # closed, no answer
    got = ck_round_trip(ck_conf(sasl_agent, "alice", "alice-secret"), "after-close", n=2)
    assert len(got) == 2


def test_plaintext_listener_unchanged_without_listeners(floe_agent: RunningAgent) -> None:
    """Default configuration: one PLAINTEXT listener on port, no SASL state."""
    assert list(floe_agent.server.ports) == ["PLAINTEXT"]
    with socket.create_connection(("127.0.0.1", floe_agent.port), timeout=5) as s:
        _send(s, MetadataRequest(topics=None), 9)
        size = struct.unpack(">i", s.recv(4))[0]
        assert size > 0
