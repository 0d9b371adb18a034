"""SASL PLAIN (RFC 4616) against the configured ``sasl_users``.

The client's single message is ``authzid NUL authcid NUL password``; the
password is compared with :func:`hmac.compare_digest` (an unknown user is
compared against a dummy so both failures take the same time). Kafka's
messages: "Authentication failed: Invalid username or password".
"""

from __future__ import annotations

import hmac
import json
from pathlib import Path

from agent.security.principal import KafkaPrincipal
from agent.security.sasl import AuthenticationFailed

_FAILED = "Authentication failed: Invalid username or password"
_DUMMY = b"\x00" * 32


def parse_users(spec: str) -> dict[str, str]:
    """``sasl_users``: ``a:pw,b:pw2``, a JSON object ``{"a": "pw"}``, or ``@file`` holding either."""
    spec = spec.strip()
    if spec.startswith("@"):
        spec = Path(spec[1:]).read_text().strip()
    if not spec:
        return {}
    if spec.startswith("{"):
        data = json.loads(spec)
        if not isinstance(data, dict) or not all(isinstance(v, str) for v in data.values()):
            raise ValueError("sasl_users: a JSON object of name -> password strings is required")
        return {str(k): v for k, v in data.items()}
    users: dict[str, str] = {}
    for item in spec.replace("\n", ",").split(","):
        item = item.strip()
        if not item:
            continue
        name, sep, pw = item.partition(":")
        if not sep or not name:
            raise ValueError("sasl_users: entries are name:password")
        users[name] = pw
    return users


class PlainServer:
    mechanism = "PLAIN"

    def __init__(self, users: dict[str, str]) -> None:
        self._users = users
        self.principal: KafkaPrincipal | None = None
        self.expires_at_ms: int | None = None

    @property
    def complete(self) -> bool:
        return self.principal is not None

    async def step(self, token: bytes) -> bytes:
        if self.complete:
            raise AuthenticationFailed(_FAILED, "PLAIN message after completion")
        parts = token.split(b"\x00")
        if len(parts) != 3:
            raise AuthenticationFailed(_FAILED, "malformed PLAIN message")
        try:
            authzid, user, password = (p.decode() for p in parts)
        except UnicodeDecodeError:
            raise AuthenticationFailed(_FAILED, "PLAIN message is not UTF-8") from None
        if not user:
            raise AuthenticationFailed(_FAILED, "empty user name")
        if authzid and authzid != user:
            raise AuthenticationFailed(
                "Authentication failed: Client requested an authorization id that is different from username",
                "authorization id differs from the user name",
                user,
            )
        expected = self._users.get(user)
        ok = hmac.compare_digest(
            password.encode(), expected.encode() if expected is not None else _DUMMY
        )
        if expected is None:
            raise AuthenticationFailed(_FAILED, "unknown user", user)
        if not ok:
            raise AuthenticationFailed(_FAILED, "wrong password", user)
        self.principal = KafkaPrincipal("User", user)
        return b""
