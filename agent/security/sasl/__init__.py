"""SASL mechanisms (server side): one state machine per mechanism.

Sits under the SaslHandshake / SaslAuthenticate handlers (agent.handlers): the
handshake picks a mechanism and creates its :class:`SaslServer`; every
SaslAuthenticate feeds the client's bytes to :meth:`SaslServer.step`, which
answers the next challenge, or completes with a principal, or raises
:class:`AuthenticationFailed` (its message is what the client sees).
"""

from __future__ import annotations

from typing import Protocol

from agent.security.principal import KafkaPrincipal


class AuthenticationFailed(Exception):
    """The client failed to authenticate; ``str(e)`` is sent to it (no secrets).
    ``reason`` is logged on the agent (still no secrets); ``user`` is the user
    name the client claimed, when the mechanism got that far (the failed-login
    log is rate-limited per user and client host)."""

    def __init__(self, message: str, reason: str = "", user: str = "") -> None:
        super().__init__(message)
        self.reason = reason or message
        self.user = user


class SaslServer(Protocol):
    """One authentication exchange of one mechanism."""

    mechanism: str
    #: Set when the exchange completed successfully.
    principal: KafkaPrincipal | None
    #: When the credential expires (OAUTHBEARER: the token's exp), epoch ms.
    expires_at_ms: int | None

    async def step(self, token: bytes) -> bytes:
        """Consume the client's next message, return the server's answer.
        Raises AuthenticationFailed."""
        ...

    @property
    def complete(self) -> bool: ...


def invalid_credentials(mechanism: str, reason: str, user: str = "") -> AuthenticationFailed:
    """Kafka's message for a failed SCRAM / OAUTHBEARER exchange."""
    return AuthenticationFailed(
        f"Authentication failed during authentication due to invalid credentials with SASL mechanism {mechanism}",
        reason,
        user,
    )
