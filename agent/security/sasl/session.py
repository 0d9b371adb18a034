"""The SASL state of one connection on a SASL listener (Kafka's SaslServerAuthenticator).

Sits between the connection (agent.connection holds one :class:`SaslSession`
per connection of a SASL listener in ``conn.auth``), the dispatcher (which asks
:meth:`SaslSession.may_serve` before every request) and the SaslHandshake /
SaslAuthenticate handlers (which drive it). States:

    HANDSHAKE  -- SaslHandshake --> AUTHENTICATE -- SaslAuthenticate* --> AUTHENTICATED
    AUTHENTICATED -- SaslHandshake (KIP-368 re-authentication) --> AUTHENTICATE ...
    any -- failure --> FAILED (the answer is delayed, then the connection closed)

Until AUTHENTICATED only the pre-auth APIs (ApiVersions, SaslHandshake,
SaslAuthenticate) are served; anything else closes the connection, as Kafka
does. After the KIP-368 session expires the same holds until re-authentication.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum

from agent.security.principal import KafkaPrincipal
from agent.security.sasl import SaslServer
from agent.security.sasl.plain import PlainServer

log = logging.getLogger(__name__)

ALL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")


def parse_mechanisms(text: str) -> tuple[str, ...]:
    """``sasl_mechanisms`` as configured (``"plain, SCRAM-SHA-256"``) -> upper-case names, in order."""
    return tuple(m.strip().upper() for m in text.split(",") if m.strip())


class State(Enum):
    HANDSHAKE = "handshake"
    AUTHENTICATE = "authenticate"
    AUTHENTICATED = "authenticated"
    FAILED = "failed"


@dataclass
class SaslSettings:
    """What every connection of the agent's SASL listeners shares."""

    mechanisms: tuple[str, ...]
    plain_users: dict[str, str] = field(default_factory=dict)
    # mechanism name -> factory of its server (SCRAM needs the metastore, OAUTHBEARER a JWKS).
    factories: dict[str, Callable[[], SaslServer]] = field(default_factory=dict)
    reauth_ms: int = 0
    failed_delay_ms: int = 100

    def new_server(self, mechanism: str) -> SaslServer | None:
        if mechanism not in self.mechanisms:
            return None
        if mechanism == "PLAIN":
            return PlainServer(self.plain_users)
        factory = self.factories.get(mechanism)
        return factory() if factory is not None else None


@dataclass
class SaslSession:
    settings: SaslSettings
    now_ms: Callable[[], int]
    state: State = State.HANDSHAKE
    server: SaslServer | None = None
    handshake_version: int = 1
    principal: KafkaPrincipal | None = None
    session_expires_ms: int | None = None
    on_authenticated: Callable[[KafkaPrincipal], None] | None = None

    @property
    def authenticated(self) -> bool:
        return self.state is State.AUTHENTICATED and not self.expired

    @property
    def failed(self) -> bool:
        return self.state is State.FAILED

    @property
    def expired(self) -> bool:
        return self.session_expires_ms is not None and self.now_ms() >= self.session_expires_ms

    def may_serve(self, pre_auth: bool) -> bool:
        """May a request of this kind be served now?"""
        if self.state is State.FAILED:
            return False
        return pre_auth or self.authenticated

    def start(self, mechanism: str, version: int) -> bool:
        """SaslHandshake chose ``mechanism``: False when it is not enabled."""
        server = self.settings.new_server(mechanism)
        if server is None:
            self.state = State.FAILED
            return False
        self.server = server
        self.handshake_version = version
        if self.state is not State.AUTHENTICATED:
            self.state = State.AUTHENTICATE
        return True

    def in_exchange(self) -> bool:
        return self.server is not None and not self.server.complete

    def complete(self, principal: KafkaPrincipal, token_expires_ms: int | None) -> int:
        """The exchange succeeded: record the principal, return the KIP-368
        session lifetime in ms (0 = no limit)."""
        self.state = State.AUTHENTICATED
        self.principal = principal
        self.server = None
        now = self.now_ms()
        limits = [t - now for t in (token_expires_ms,) if t is not None]
        if self.settings.reauth_ms > 0:
            limits.append(self.settings.reauth_ms)
        lifetime = max(0, min(limits)) if limits else 0
        self.session_expires_ms = now + lifetime if limits else None
        if self.on_authenticated is not None:
            self.on_authenticated(principal)
        return lifetime

    def fail(self) -> None:
        self.state = State.FAILED
        self.server = None
