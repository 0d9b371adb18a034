"""How the driver proves who it is: the job's Kafka user, never an internal credential.

Where it sits: between :mod:`spark_source.options` (which parses the Kafka
security options of Spark's Kafka source into a :class:`KafkaCredentials`) and
:mod:`spark_source.agents` (the driver's two conversations with the agents).
Issue 42: the planning API authorizes reads with the Kafka ACLs of the user the
job authenticates as, so a Spark read obeys the same ACLs as a consumer.

* Discovery (DescribeConfigs over the Kafka protocol) runs on a SASL listener
  like any client: SaslHandshake v1, then SaslAuthenticate with PLAIN or SCRAM
  (RFC 5802 client side: PBKDF2, ClientKey, proof; the server's signature is
  checked, so a fake broker cannot pass).
* Planning calls (HTTP) carry ``Authorization: Basic user:password``; the
  agent checks it against the same PLAIN users / SCRAM credentials.

Option names are Spark's Kafka source's: ``kafka.security.protocol``
(SASL_PLAINTEXT, SASL_SSL), ``kafka.sasl.mechanism`` and the user and password
from ``kafka.sasl.jaas.config`` (``username="..." password="..."`` of the
Plain/Scram login modules) or ``kafka.sasl.username`` / ``kafka.sasl.password``
(librdkafka's names).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
import secrets
import socket
import struct
from collections.abc import Callable
from dataclasses import dataclass, field

from kafka_protocol.framing import RequestHeader, encode_request
from kafka_protocol.messages import (
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
    SaslHandshakeResponse,
)

MECHANISMS = {"PLAIN": None, "SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}
_JAAS = re.compile(r"""\b(username|password)\s*=\s*(?:"((?:[^"\\]|\\.)*)"|'([^']*)'|([^\s;]+))""")


class KafkaAuthError(RuntimeError):
    """The agents refused the job's Kafka credentials (the message says why); not retried."""


class TopicAuthorizationError(KafkaAuthError):
    """The job's Kafka user may not read a topic it plans (Kafka's TOPIC_AUTHORIZATION_FAILED)."""


@dataclass(frozen=True)
class KafkaCredentials:
    mechanism: str  # PLAIN | SCRAM-SHA-256 | SCRAM-SHA-512
    username: str
    password: str = field(repr=False)

    def basic_header(self) -> dict[str, str]:
        """The planning API's ``Authorization`` header."""
        raw = f"{self.username}:{self.password}".encode()
        return {"Authorization": "Basic " + base64.b64encode(raw).decode()}


def parse_jaas(text: str) -> tuple[str | None, str | None]:
    """``username`` and ``password`` of a JAAS login module line (None when absent)."""
    found: dict[str, str] = {}
    for m in _JAAS.finditer(text):
        value = m.group(2) if m.group(2) is not None else (m.group(3) if m.group(3) is not None else m.group(4))
        found.setdefault(m.group(1), re.sub(r"\\(.)", r"\1", value) if m.group(2) is not None else value)
    return found.get("username"), found.get("password")


# -- the SASL exchange on a blocking socket (discovery) ----------------------------------


def authenticate(
    sock: socket.socket,
    creds: KafkaCredentials,
    client_id: str,
    read_exact: Callable[[socket.socket, int], bytes],
    next_corr: Callable[[], int],
) -> None:
    """SaslHandshake v1 + SaslAuthenticate v1 rounds; raises KafkaAuthError on refusal."""

    def call(api_key: int, req: object, resp_cls: type, version: int = 1) -> object:
        corr = next_corr()
        sock.sendall(encode_request(RequestHeader(api_key, version, corr, client_id), req))
        (size,) = struct.unpack(">i", read_exact(sock, 4))
        body = read_exact(sock, size)
        (got,) = struct.unpack_from(">i", body, 0)
        if got != corr:
            raise ConnectionError(f"correlation id {got} != {corr}")
        return resp_cls.decode(memoryview(body)[4:], version)  # type: ignore[attr-defined]

    hs = call(17, SaslHandshakeRequest(mechanism=creds.mechanism), SaslHandshakeResponse)
    if hs.error_code:  # type: ignore[attr-defined]
        raise KafkaAuthError(
            f"the broker does not accept SASL mechanism {creds.mechanism}"
            f" (it offers {', '.join(hs.mechanisms or []) or 'none'})"  # type: ignore[attr-defined]
        )

    def step(data: bytes) -> bytes:
        r = call(36, SaslAuthenticateRequest(auth_bytes=data), SaslAuthenticateResponse)
        if r.error_code:  # type: ignore[attr-defined]
            raise KafkaAuthError(
                f"authentication of Kafka user {creds.username!r} failed:"
                f" {r.error_message or r.error_code}"  # type: ignore[attr-defined]
            )
        return bytes(r.auth_bytes or b"")  # type: ignore[attr-defined]

    if creds.mechanism == "PLAIN":
        step(b"\x00" + creds.username.encode() + b"\x00" + creds.password.encode())
        return
    _scram(creds, step)


def _scram(creds: KafkaCredentials, step: Callable[[bytes], bytes]) -> None:
    alg = MECHANISMS[creds.mechanism]
    assert alg is not None
    nonce = secrets.token_hex(16)
    user = creds.username.replace("=", "=3D").replace(",", "=2C")
    first_bare = f"n={user},r={nonce}"
    server_first = step(("n,," + first_bare).encode()).decode()
    attrs = dict(part.split("=", 1) for part in server_first.split(","))
    if not attrs.get("r", "").startswith(nonce):
        raise KafkaAuthError("SCRAM: the broker's nonce does not extend ours")
    salt, iterations = base64.b64decode(attrs["s"]), int(attrs["i"])
    salted = hashlib.pbkdf2_hmac(alg, creds.password.encode(), salt, iterations)
    client_key = hmac.new(salted, b"Client Key", alg).digest()
    stored_key = hashlib.new(alg, client_key).digest()
    without_proof = f"c=biws,r={attrs['r']}"
    auth_message = f"{first_bare},{server_first},{without_proof}".encode()
    signature = hmac.new(stored_key, auth_message, alg).digest()
    proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
    final = step(f"{without_proof},p={base64.b64encode(proof).decode()}".encode()).decode()
    server_key = hmac.new(salted, b"Server Key", alg).digest()
    expected = base64.b64encode(hmac.new(server_key, auth_message, alg).digest()).decode()
    if not hmac.compare_digest(final.removeprefix("v="), expected):
        raise KafkaAuthError("SCRAM: the broker's signature is wrong (not the broker holding the credential)")
