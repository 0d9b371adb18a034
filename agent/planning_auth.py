"""Who is calling the planning API: a Kafka principal, authenticated as on the SASL listeners.

Where it sits: in front of every route of :mod:`agent.planning` (the HTTP API
Spark drivers plan reads through). Issue 42: Spark drivers hold no internal
credential; they authenticate as the Kafka user the job runs as, and the
planning API checks that user's ACLs (READ on every topic planned) exactly as
the Fetch path would. This module answers the first half, *who*:

* ``Authorization: Basic user:password`` is checked against the PLAIN users
  (``sasl_users``) and the SCRAM credentials of the metastore (the same ones
  SaslAuthenticate uses): salted = PBKDF2(password, salt, iterations),
  ClientKey = HMAC(salted, "Client Key"), H(ClientKey) compared with the stored
  key in constant time. The PBKDF2 runs in a thread (it is the expensive part
  by design); a success is remembered for :data:`CACHE_S` seconds per (user,
  password digest), so a driver's calls do not each pay it, and a password
  change or user deletion takes effect within that time.
* ``Authorization: Bearer <jwt>`` is checked like SASL OAUTHBEARER (signature
  against the JWKS, exp, iss, aud; the principal claim) when ``oauth_jwks`` is set.
* Without credentials the caller is ``User:ANONYMOUS`` -- allowed only when the
  agent has a Kafka listener that accepts anonymous clients (no SASL on any
  listener, as in ``floe dev``, or a PLAINTEXT / SSL listener beside the SASL
  ones), so the planning API is never more open than the Kafka port.

A failed login answers 401 after ``failed_auth_delay_ms`` (like SASL), naming
the reason but never the password.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from agent.security.listeners import parse_listeners
from agent.security.principal import ANONYMOUS
from agent.security.sasl import AuthenticationFailed
from agent.security.sasl.plain import parse_users
from agent.security.sasl.scram import MIN_ITERATIONS, credential_from_salted, salted_password
from agent.security.sasl.session import parse_mechanisms

if TYPE_CHECKING:
    from aiohttp import web

    from agent.config import AgentConfig
    from metastore import Metastore

log = logging.getLogger(__name__)

CACHE_S = 60.0
_CACHE_MAX = 10_000
_SCRAM_ORDER = ("SCRAM-SHA-512", "SCRAM-SHA-256")
_DUMMY_SALT = b"floe-planning-unknown-user"


class PlanningAuthError(Exception):
    """The caller is not authenticated; ``str(e)`` is sent back (no secrets)."""


class PlanningAuth:
    def __init__(
        self, config: AgentConfig, meta: Metastore, *, now: Callable[[], float] = time.monotonic
    ) -> None:
        self.config = config
        self.meta = meta
        self.now = now
        listeners = parse_listeners(config)
        #: Credentials are required at all: some Kafka listener uses SASL.
        self.required = any(lst.sasl for lst in listeners)
        #: Some Kafka listener serves clients that present nothing (PLAINTEXT, SSL without mTLS).
        self.anonymous_ok = not self.required or any(
            not lst.sasl and (not lst.tls or config.ssl_client_auth != "required") for lst in listeners
        )
        mechanisms = set(parse_mechanisms(config.sasl_mechanisms))
        self.plain_users = parse_users(config.sasl_users) if "PLAIN" in mechanisms else {}
        self.scram = tuple(m for m in _SCRAM_ORDER if m in mechanisms)
        self._oauth: Callable[[], Any] | None = None
        if "OAUTHBEARER" in mechanisms and config.oauth_jwks:
            from agent.security.sasl.oauthbearer import oauth_factory

            self._oauth = oauth_factory(config, lambda: int(time.time() * 1000))
        self._cache: dict[tuple[str, bytes], float] = {}

    async def principal(self, request: web.Request) -> str:
        """The caller's principal ("User:alice"), or PlanningAuthError."""
        header = request.headers.get("Authorization", "")
        scheme, _, value = header.partition(" ")
        try:
            if not header:
                if self.anonymous_ok:
                    return str(ANONYMOUS)
                raise PlanningAuthError(
                    "authentication required: pass the Kafka user of the job (Spark options"
                    " kafka.sasl.username / kafka.sasl.password, or kafka.sasl.jaas.config)"
                )
            if not self.required:
                return str(ANONYMOUS)  # no SASL anywhere: every Kafka client is anonymous too
            if scheme.lower() == "basic":
                return await self._basic(value.strip())
            if scheme.lower() == "bearer" and self._oauth is not None:
                server = self._oauth()
                await server.step(b"n,,\x01auth=Bearer " + value.strip().encode() + b"\x01\x01")
                return str(server.principal)
            raise PlanningAuthError(f"unsupported Authorization scheme {scheme!r} (use Basic)")
        except (PlanningAuthError, AuthenticationFailed) as e:
            log.info("planning API: refused %s: %s", request.remote, getattr(e, "reason", e))
            await asyncio.sleep(self.config.failed_auth_delay_ms / 1000)
            raise PlanningAuthError(str(e)) from None

    async def _basic(self, value: str) -> str:
        try:
            user, sep, password = base64.b64decode(value, validate=True).decode().partition(":")
        except (ValueError, UnicodeDecodeError):
            raise PlanningAuthError("malformed Basic credentials") from None
        if not sep or not user:
            raise PlanningAuthError("malformed Basic credentials")
        key = (user, hashlib.sha256(password.encode()).digest())
        until = self._cache.get(key)
        if until is not None and self.now() < until:
            return f"User:{user}"
        if not await self._verify(user, password):
            raise AuthenticationFailed(
                "Authentication failed: Invalid username or password", f"bad credentials for user {user!r}"
            )
        if len(self._cache) >= _CACHE_MAX:
            self._cache.clear()
        self._cache[key] = self.now() + CACHE_S
        return f"User:{user}"

    async def _verify(self, user: str, password: str) -> bool:
        expected = self.plain_users.get(user)
        if expected is not None:
            return hmac.compare_digest(password.encode(), expected.encode())
        for mechanism in self.scram:
            cred = await self.meta.get_scram_credential(user, mechanism)
            if cred is None:
                continue
            salted = await asyncio.to_thread(salted_password, mechanism, password, cred.salt, cred.iterations)
            mine = credential_from_salted(user, mechanism, salted, cred.salt, cred.iterations)
            return hmac.compare_digest(mine.stored_key, cred.stored_key)
        if self.scram:  # an unknown user costs what a known one does
            await asyncio.to_thread(salted_password, self.scram[0], password, _DUMMY_SALT, MIN_ITERATIONS * 2)
        return False


