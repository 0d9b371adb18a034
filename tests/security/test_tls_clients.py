"""SSL and SASL_SSL listeners with real clients: mTLS principals, SCRAM-SHA-512 and
PLAIN over TLS (confluent-kafka, kcat, aiokafka), certificate reload, a plaintext
client on a TLS port, and the errors clients see."""

from __future__ import annotations

import os
import socket
import ssl
import subprocess
import time
from typing import Any

import pytest

from tests.fixtures.agent import RunningAgent
from tests.security.conftest import Pki, bootstrap, ck_tls
from tests.security.test_sasl_plain import aio_round_trip, ck_round_trip


def _principals(caplog: pytest.LogCaptureFixture, how: str) -> set[str]:
    """The principals the agent logged authenticating (``how``: TLS client certificate / PLAIN / ...)."""
    return {
        r.getMessage().split(" authenticated as ")[1].split(" (")[0]
        for r in caplog.records
        if " authenticated as " in r.getMessage() and r.getMessage().endswith(f"({how})")
    }


def test_ssl_mtls_round_trip_principal_is_subject(
    secure_agent: RunningAgent, pki: Pki, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level("INFO", "agent.security.tls")
    conf = ck_tls(
        secure_agent,
        pki,
        "SSL",
        **{
            "ssl.certificate.location": str(pki.client.cert),
            "ssl.key.location": str(pki.client.key),
        },
    )
    assert ck_round_trip(conf, "tls-t", n=10) == [f"m{i}".encode() for i in range(10)]
    # Kafka's DEFAULT ssl.principal.mapping.rules: the whole subject DN, RFC 2253 order.
    assert _principals(caplog, "TLS client certificate") == {"User:CN=alice,O=floe-test"}


def test_ssl_without_client_certificate_is_anonymous(
    secure_agent: RunningAgent, pki: Pki, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level("INFO", "agent.security.tls")
    assert len(ck_round_trip(ck_tls(secure_agent, pki, "SSL"), "tls-anon", n=3)) == 3
    assert _principals(caplog, "TLS client certificate") == set()


@pytest.mark.parametrize(
    ("mech", "user", "pw"),
    [("SCRAM-SHA-512", "carol", "carol-secret"), ("PLAIN", "alice", "alice-secret")],
)
def test_sasl_ssl_round_trip(
    secure_agent: RunningAgent,
    pki: Pki,
    mech: str,
    user: str,
    pw: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level("INFO", "agent.handlers.sasl_authenticate")
    conf = ck_tls(
        secure_agent,
        pki,
        "SASL_SSL",
        **{"sasl.mechanism": mech, "sasl.username": user, "sasl.password": pw},
    )
    assert ck_round_trip(conf, f"sasl-ssl-{mech}", n=10) == [f"m{i}".encode() for i in range(10)]
    assert _principals(caplog, mech) == {f"User:{user}"}


def _auth_error(conf: dict[str, Any]) -> str:
    from confluent_kafka import KafkaError
    from confluent_kafka.admin import AdminClient

    errors: list[Any] = []
    admin = AdminClient({**conf, "error_cb": errors.append})
    with pytest.raises(Exception):  # noqa: B017
        admin.list_topics(timeout=3)
    deadline = time.monotonic() + 10
    while (
        not any(e.code() == KafkaError._AUTHENTICATION for e in errors)
        and time.monotonic() < deadline
    ):
        admin.poll(0.2)
    auth = [e.str() for e in errors if e.code() == KafkaError._AUTHENTICATION]
    assert auth, [e.str() for e in errors]
    return auth[0]


@pytest.mark.parametrize(
    ("user", "pw"), [("carol", "wrong"), ("mallory", "x")], ids=["wrong-password", "unknown-user"]
)
def test_scram_bad_credentials_error(
    secure_agent: RunningAgent, pki: Pki, user: str, pw: str
) -> None:
    conf = ck_tls(
        secure_agent,
        pki,
        "SASL_SSL",
        **{"sasl.mechanism": "SCRAM-SHA-512", "sasl.username": user, "sasl.password": pw},
    )
    assert (
        "Authentication failed during authentication due to invalid credentials with SASL mechanism SCRAM-SHA-512"
        in _auth_error(conf)
    )


def test_plaintext_client_on_tls_port_fails_cleanly(secure_agent: RunningAgent, pki: Pki) -> None:
    """A Kafka request in clear text to the SSL listener: the TLS handshake fails,
    the connection closes, and the agent keeps serving TLS clients."""
    from kafka_protocol.framing import RequestHeader, encode_request
    from kafka_protocol.messages import MetadataRequest

    port = secure_agent.server.ports["SSL"]
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(encode_request(RequestHeader(3, 9, 1, "x"), MetadataRequest(topics=None)))
        data = b""
        try:
            while chunk := s.recv(4096):
                data += chunk
        except ConnectionResetError:
            pass
    assert not data.startswith(b"\x00")  # never a Kafka response; at most a TLS alert
    # librdkafka in clear text on the TLS port: it never gets metadata.
    from confluent_kafka.admin import AdminClient

    with pytest.raises(Exception):  # noqa: B017
        AdminClient({"bootstrap.servers": bootstrap(secure_agent, "SSL")}).list_topics(timeout=2)
    assert len(ck_round_trip(ck_tls(secure_agent, pki, "SSL"), "after-plain", n=2)) == 2


def _server_cn(port: int, cafile: str) -> str:
    ctx = ssl.create_default_context(cafile=cafile)
    with socket.create_connection(("127.0.0.1", port), timeout=5) as raw:
        with ctx.wrap_socket(raw, server_hostname="localhost") as s:
            cert = s.getpeercert()
    return dict(x[0] for x in cert["subject"])["commonName"]


def test_certificate_reload_without_restart(secure_agent: RunningAgent, pki: Pki) -> None:
    port = secure_agent.server.ports["SSL"]
    assert _server_cn(port, str(pki.ca.cert)) == "localhost"
    fresh = pki.ca.issue("localhost-rotated", dns=("localhost",), ips=("127.0.0.1",))
    os.replace(fresh.cert, pki.server.cert)
    os.replace(fresh.key, pki.server.key)
    secure_agent.server.security.tls._checked = 0.0  # the once-a-second check is due (no sleep)
    assert _server_cn(port, str(pki.ca.cert)) == "localhost-rotated"
    assert secure_agent.server.security.tls.reloads == 1
    assert len(ck_round_trip(ck_tls(secure_agent, pki, "SSL"), "after-reload", n=2)) == 2


@pytest.mark.slow
def test_kcat_scram_sha512_over_sasl_ssl(secure_agent: RunningAgent, pki: Pki) -> None:
    common = [
        "kcat", "-b", bootstrap(secure_agent, "SASL_SSL"), "-X", "security.protocol=SASL_SSL",
        "-X", "sasl.mechanisms=SCRAM-SHA-512", "-X", "sasl.username=dave", "-X", "sasl.password=dave-secret",
        "-X", f"ssl.ca.location={pki.ca.cert}",
    ]  # fmt: skip
    subprocess.run(
        [*common, "-P", "-t", "kcat-scram"], input=b"one\ntwo\nthree\n", check=True, timeout=60
    )
    out = subprocess.run(
        [*common, "-C", "-t", "kcat-scram", "-o", "beginning", "-c", "3", "-e"],
        capture_output=True,
        check=True,
        timeout=60,
    )
    assert out.stdout.split() == [b"one", b"two", b"three"]
    bad = subprocess.run(
        [*common[:-4], "-X", "sasl.password=nope", "-X", f"ssl.ca.location={pki.ca.cert}", "-L", "-m", "5"],
        capture_output=True, timeout=60,
    )  # fmt: skip
    assert bad.returncode != 0
    assert b"SCRAM-SHA-512" in bad.stderr and b"Authentication failed" in bad.stderr


@pytest.mark.slow
def test_aiokafka_scram_sha256_over_sasl_ssl(secure_agent: RunningAgent, pki: Pki) -> None:
    from aiokafka.helpers import create_ssl_context

    conf = {
        "bootstrap_servers": bootstrap(secure_agent, "SASL_SSL"),
        "security_protocol": "SASL_SSL",
        "ssl_context": create_ssl_context(cafile=str(pki.ca.cert)),
        "sasl_mechanism": "SCRAM-SHA-256",
        "sasl_plain_username": "carol",
        "sasl_plain_password": "carol-secret",
    }
    assert aio_round_trip(conf, "aio-scram", "s") == [f"s{i}".encode() for i in range(5)]


@pytest.mark.slow
def test_kafka_python_ssl_mtls_round_trip(
    secure_agent: RunningAgent, pki: Pki, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level("INFO", "agent.security.tls")
    from kafka import KafkaConsumer, KafkaProducer

    conf = {
        "bootstrap_servers": bootstrap(secure_agent, "SSL"),
        "security_protocol": "SSL",
        "ssl_cafile": str(pki.ca.cert),
        "ssl_certfile": str(pki.client.cert),
        "ssl_keyfile": str(pki.client.key),
    }
    p = KafkaProducer(**conf)
    for i in range(5):
        p.send("kp-ssl", f"k{i}".encode())
    p.flush(30)
    p.close()
    c = KafkaConsumer("kp-ssl", auto_offset_reset="earliest", consumer_timeout_ms=10000, **conf)
    assert [m.value for m in c][:5] == [f"k{i}".encode() for i in range(5)]
    c.close()
    assert _principals(caplog, "TLS client certificate") == {"User:CN=alice,O=floe-test"}


def test_a_client_closing_tls_gets_close_notify_back_at_once(secure_agent: RunningAgent, pki: Pki) -> None:
    """A client that ends TLS cleanly (close_notify) and waits for the agent's
    close_notify, as asyncio's SSL transport does (so aiokafka on every close), is
    answered at once instead of sitting out its 30 s ssl_shutdown_timeout."""
    import asyncio

    host, port = bootstrap(secure_agent, "SASL_SSL").rsplit(":", 1)
    ctx = ssl.create_default_context(cafile=str(pki.ca.cert))

    async def close_cleanly() -> None:
        _, writer = await asyncio.open_connection(host, int(port), ssl=ctx, ssl_shutdown_timeout=30)
        writer.close()
        await asyncio.wait_for(writer.wait_closed(), 10)  # 30 s without the agent's answer

    asyncio.run(close_cleanly())
