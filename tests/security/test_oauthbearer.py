"""SASL OAUTHBEARER: confluent-kafka hands the agent a JWT the test signs (oauth_cb);
the agent validates it against a JWKS file (signature, issuer, audience, expiry).
Negative cases assert the exact error the client sees."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import ec

from tests.fixtures.agent import RunningAgent
from tests.security.conftest import Pki, ck_tls
from tests.security.test_sasl_plain import ck_round_trip
from tests.security.test_tls_clients import _auth_error, _principals

ISSUER = "https://idp.example"
AUDIENCE = "floe"


class Idp:
    """A signing key whose public half is in the agent's JWKS file."""

    def __init__(self, path: Path) -> None:
        self.key = ec.generate_private_key(ec.SECP256R1())
        jwk = json.loads(jwt.algorithms.ECAlgorithm.to_jwk(self.key.public_key()))
        jwk.update(kid="k1", alg="ES256", use="sig")
        self.jwks = path
        path.write_text(json.dumps({"keys": [jwk]}))

    def token(self, sub: str = "svc-orders", *, exp_in: int = 3600, key: Any = None, **claims: Any) -> str:
        now = int(time.time())
        body = {"sub": sub, "iss": ISSUER, "aud": AUDIENCE, "iat": now, "exp": now + exp_in, **claims}
        return jwt.encode(body, key or self.key, algorithm="ES256", headers={"kid": "k1"})


@pytest.fixture
def idp(tmp_path: Path) -> Idp:
    return Idp(tmp_path / "jwks.json")


@pytest.fixture
def oauth_agent(agent_factory: Callable[..., RunningAgent], pki: Pki, idp: Idp) -> RunningAgent:
    return agent_factory(
        listeners="SASL_SSL://127.0.0.1:0",
        ssl_certfile=str(pki.server.cert),
        ssl_keyfile=str(pki.server.key),
        oauth_jwks=str(idp.jwks),
        oauth_issuer=ISSUER,
        oauth_audience=AUDIENCE,
        failed_auth_delay_ms=10,
        connections_max_reauth_ms=600_000,
    )


def conf(agent: RunningAgent, pki: Pki, token: str) -> dict[str, Any]:
    exp = jwt.decode(token, options={"verify_signature": False})["exp"]
    return ck_tls(
        agent, pki, "SASL_SSL", **{"sasl.mechanism": "OAUTHBEARER", "oauth_cb": lambda _cfg: (token, float(exp))}
    )


def test_oauthbearer_round_trip_principal_from_sub(
    oauth_agent: RunningAgent, pki: Pki, idp: Idp, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level("INFO", "agent.handlers.sasl_authenticate")
    got = ck_round_trip(conf(oauth_agent, pki, idp.token()), "oauth-t", n=10)
    assert got == [f"m{i}".encode() for i in range(10)]
    assert _principals(caplog, "OAUTHBEARER") == {"User:svc-orders"}


@pytest.mark.parametrize(
    ("case", "message"),
    [
        ("expired", "Authentication failed: the token has expired"),
        ("forged", "Authentication failed: the token signature is invalid"),
        ("audience", "Authentication failed: the token audience is invalid"),
        ("issuer", "Authentication failed: the token issuer is invalid"),
    ],
)
def test_oauthbearer_rejections(oauth_agent: RunningAgent, pki: Pki, idp: Idp, case: str, message: str) -> None:
    token = {
        "expired": lambda: idp.token(exp_in=-60),
        "forged": lambda: idp.token(key=ec.generate_private_key(ec.SECP256R1())),
        "audience": lambda: idp.token(aud="someone-else"),
        "issuer": lambda: idp.token(iss="https://evil.example"),
    }[case]()
    cfg = conf(oauth_agent, pki, token)
    if case == "expired":  # librdkafka refuses to send a token it knows is expired: lie about exp
        cfg["oauth_cb"] = lambda _cfg: (token, time.time() + 3600)
    assert message in _auth_error(cfg)


def test_session_lifetime_is_min_of_reauth_and_token_expiry() -> None:
    """KIP-368: SaslAuthenticate v1+ answers session_lifetime_ms; after it a
    non-SASL request closes the connection (injected clock)."""
    from agent.security.principal import KafkaPrincipal
    from agent.security.sasl.session import SaslSession, SaslSettings

    now = [1_000_000]
    s = SaslSession(SaslSettings(mechanisms=("PLAIN",), reauth_ms=60_000), lambda: now[0])
    assert s.start("PLAIN", 1)
    assert s.complete(KafkaPrincipal("User", "a"), token_expires_ms=now[0] + 30_000) == 30_000
    assert s.may_serve(pre_auth=False)
    now[0] += 29_999
    assert s.may_serve(pre_auth=False)
    now[0] += 1
    assert not s.may_serve(pre_auth=False) and s.may_serve(pre_auth=True)
    # Re-authentication renews the session: bounded by connections_max_reauth_ms now.
    assert s.start("PLAIN", 1)
    assert s.complete(KafkaPrincipal("User", "a"), token_expires_ms=None) == 60_000
    assert s.may_serve(pre_auth=False)


async def test_jwks_url_is_fetched_off_the_event_loop(tmp_path: Path) -> None:
    """A JWKS URL is fetched in a thread: while the identity provider is slow to
    answer, the agent's event loop keeps running (other clients are served)."""
    import asyncio
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from agent.security.sasl.oauthbearer import Jwks

    idp = Idp(tmp_path / "jwks.json")
    release = threading.Event()

    class Slow(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            release.wait(10)  # the identity provider answers only when the test says so
            body = idp.jwks.read_bytes()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *a: object) -> None:
            pass

    srv = ThreadingHTTPServer(("127.0.0.1", 0), Slow)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        jwks = Jwks(f"http://127.0.0.1:{srv.server_address[1]}/jwks.json")
        fetch = asyncio.create_task(jwks.key("k1"))
        ticks = 0
        for _ in range(5):  # the loop runs while the fetch waits on the server
            await asyncio.sleep(0)
            ticks += 1
        assert not fetch.done() and ticks == 5
        release.set()
        key = await asyncio.wait_for(fetch, 10)
        assert key.public_numbers() == idp.key.public_key().public_numbers()
    finally:
        srv.shutdown()
