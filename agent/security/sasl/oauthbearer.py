"""SASL OAUTHBEARER (RFC 7628) with JWT bearer tokens validated against a JWKS.

Sits under SaslAuthenticate. The client's initial response is
``n,a=authzid,\\x01auth=Bearer <jwt>\\x01[key=value\\x01]*\\x01``; the token is
checked with PyJWT: signature against the key of its ``kid`` in the JWKS
(``oauth_jwks``: a file path or an https URL, fetched and cached), ``exp``
(required), ``iss`` / ``aud`` when configured. The principal is
``User:<claim>`` (``oauth_principal_claim``, default ``sub``) and the token's
expiry bounds the KIP-368 session lifetime. A failure is answered at once with
SASL_AUTHENTICATION_FAILED and a message naming the reason (expired, bad
signature, wrong audience ...; never the token), rather than RFC 7628's error
challenge round trip, which Kafka clients treat the same way.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import urllib.request
from collections.abc import Callable
from typing import Any

import jwt

from agent.config import AgentConfig
from agent.security.principal import KafkaPrincipal
from agent.security.sasl import AuthenticationFailed, SaslServer

log = logging.getLogger(__name__)

_PREFIX = "Authentication failed: "
_ALGORITHMS = ["RS256", "RS384", "RS512", "ES256", "ES384", "ES512", "PS256", "PS384", "PS512", "EdDSA"]
_REFRESH_S = 300.0


class Jwks:
    """The signing keys, reloaded every few minutes (a URL) or when the file changes."""

    def __init__(self, source: str) -> None:
        self.source = source
        self._keys: dict[str | None, Any] = {}
        self._loaded_at = 0.0
        self._stamp: object = None
        self._lock: asyncio.Lock | None = None  # one (re)load at a time

    def _read(self) -> str:
        if self.source.startswith(("https://", "http://")):
            with urllib.request.urlopen(self.source, timeout=10) as r:  # operator-configured URL
                return str(r.read().decode())
        path = self.source.removeprefix("file://")
        with open(path) as f:
            return f.read()

    async def key(self, kid: str | None) -> Any:
        now = time.monotonic()
        if kid not in self._keys or now - self._loaded_at > _REFRESH_S:
            if self._lock is None:
                self._lock = asyncio.Lock()
            async with self._lock:
                # A URL is fetched in a thread: never block the event loop on the JWKS server.
                await asyncio.to_thread(self._load, now)
        if kid is None and len(self._keys) == 1:
            return next(iter(self._keys.values()))
        if kid not in self._keys:
            raise jwt.InvalidTokenError(f"no key {kid!r} in the JWKS")
        return self._keys[kid]

    def _load(self, now: float) -> None:
        if now - self._loaded_at < 1.0 and self._keys:
            return  # an unknown kid does not make us refetch more than once a second
        data = json.loads(self._read())
        keys: dict[str | None, Any] = {}
        for jwk in data.get("keys", []):
            keys[jwk.get("kid")] = jwt.PyJWK(jwk).key
        self._keys = keys
        self._loaded_at = now


class OAuthBearerServer:
    mechanism = "OAUTHBEARER"

    def __init__(self, config: AgentConfig, jwks: Jwks, now_ms: Callable[[], int]) -> None:
        self._config = config
        self._jwks = jwks
        self._now_ms = now_ms
        self.principal: KafkaPrincipal | None = None
        self.expires_at_ms: int | None = None
        self._done = False

    @property
    def complete(self) -> bool:
        return self.principal is not None

    async def step(self, token: bytes) -> bytes:
        if self._done:
            raise AuthenticationFailed(_PREFIX + "unexpected OAUTHBEARER message", "message after the exchange")
        self._done = True
        bearer = _parse_initial(token)
        try:
            header = jwt.get_unverified_header(bearer)
            key = await self._jwks.key(header.get("kid"))
            claims = jwt.decode(
                bearer,
                key,
                algorithms=_ALGORITHMS,
                audience=self._config.oauth_audience or None,
                issuer=self._config.oauth_issuer or None,
                options={"require": ["exp"], "verify_aud": bool(self._config.oauth_audience)},
                leeway=0,
            )
        except jwt.ExpiredSignatureError:
            raise AuthenticationFailed(_PREFIX + "the token has expired", "expired token") from None
        except jwt.InvalidSignatureError:
            raise AuthenticationFailed(_PREFIX + "the token signature is invalid", "bad signature") from None
        except jwt.InvalidAudienceError:
            raise AuthenticationFailed(_PREFIX + "the token audience is invalid", "wrong audience") from None
        except jwt.InvalidIssuerError:
            raise AuthenticationFailed(_PREFIX + "the token issuer is invalid", "wrong issuer") from None
        except (jwt.InvalidTokenError, ValueError, OSError) as e:
            reason = type(e).__name__ if isinstance(e, OSError) else str(e)[:200]
            raise AuthenticationFailed(_PREFIX + f"invalid token ({reason})", f"invalid token: {reason}") from None
        name = claims.get(self._config.oauth_principal_claim)
        if not isinstance(name, str) or not name:
            claim = self._config.oauth_principal_claim
            raise AuthenticationFailed(_PREFIX + f"the token has no {claim} claim", f"no {claim} claim")
        self.expires_at_ms = int(claims["exp"]) * 1000
        self.principal = KafkaPrincipal("User", name)
        return b""


def _parse_initial(token: bytes) -> str:
    """RFC 7628 client initial response -> the bearer token."""
    try:
        text = token.decode()
    except UnicodeDecodeError:
        raise AuthenticationFailed(_PREFIX + "malformed OAUTHBEARER message", "not UTF-8") from None
    gs2, sep, rest = text.partition("\x01")
    if not sep or not gs2.startswith(("n,", "y,")) or not rest.endswith("\x01\x01"):
        raise AuthenticationFailed(_PREFIX + "malformed OAUTHBEARER message", "bad framing")
    for kv in rest[:-2].split("\x01"):
        key, _, value = kv.partition("=")
        if key == "auth":
            scheme, _, bearer = value.partition(" ")
            if scheme.lower() == "bearer" and bearer.strip():
                return bearer.strip()
    raise AuthenticationFailed(_PREFIX + "malformed OAUTHBEARER message", "no bearer token")


def oauth_factory(config: AgentConfig, now_ms: Callable[[], int]) -> Callable[[], SaslServer]:
    jwks = Jwks(config.oauth_jwks)
    return lambda: OAuthBearerServer(config, jwks, now_ms)
