"""Build the agent's security from its configuration: listeners, TLS, SASL.

Sits between agent.config and agent.server: the server binds one socket per
:class:`~agent.security.listeners.Listener` and asks :meth:`Security.new_session`
for each connection's SASL state (None on PLAINTEXT / SSL listeners) and
:meth:`Security.ssl_context` for the TLS ones.
"""

from __future__ import annotations

import logging
import ssl
from collections.abc import Callable
from typing import TYPE_CHECKING

from agent.config import AgentConfig
from agent.security.listeners import Listener, parse_listeners
from agent.security.sasl.plain import parse_users
from agent.security.sasl.session import ALL_MECHANISMS, SaslSession, SaslSettings, parse_mechanisms

if TYPE_CHECKING:
    from metastore import Metastore

log = logging.getLogger(__name__)


class Security:
    def __init__(
        self,
        config: AgentConfig,
        meta: Metastore | None = None,
        now_ms: Callable[[], int] | None = None,
    ) -> None:
        import time

        self.config = config
        self.listeners = parse_listeners(config)
        self.now_ms = now_ms or (lambda: int(time.time() * 1000))
        self.sasl: SaslSettings | None = None
        self.tls = None
        if any(lst.sasl for lst in self.listeners):
            self.sasl = self._sasl_settings(config, meta)
        if any(lst.tls for lst in self.listeners):
            from agent.security.tls import TlsContexts

            self.tls = TlsContexts(config)

    def _sasl_settings(self, config: AgentConfig, meta: Metastore | None) -> SaslSettings:
        mechanisms = parse_mechanisms(config.sasl_mechanisms)
        unknown = [m for m in mechanisms if m not in ALL_MECHANISMS]
        if unknown:
            raise ValueError(
                f"sasl_mechanisms: unknown {unknown}; known: {', '.join(ALL_MECHANISMS)}"
            )
        settings = SaslSettings(
            mechanisms=mechanisms,
            plain_users=parse_users(config.sasl_users),
            reauth_ms=config.connections_max_reauth_ms,
            failed_delay_ms=config.failed_auth_delay_ms,
        )
        if meta is not None:
            from agent.security.sasl.scram import fake_salt_secret, scram_factories

            secret = fake_salt_secret(config.peer_token, config.internal_token, config.metastore)
            settings.factories.update(scram_factories(meta, mechanisms, secret))
        if "OAUTHBEARER" in mechanisms and config.oauth_jwks:
            from agent.security.sasl.oauthbearer import oauth_factory

            settings.factories["OAUTHBEARER"] = oauth_factory(config, self.now_ms)
        missing = [m for m in mechanisms if m != "PLAIN" and m not in settings.factories]
        if missing:
            log.info(
                "SASL mechanisms %s not configured (no metastore / oauth_jwks): not offered",
                missing,
            )
            settings.mechanisms = tuple(m for m in mechanisms if m not in missing)
        return settings

    def new_session(self, listener: Listener) -> SaslSession | None:
        if not listener.sasl or self.sasl is None:
            return None
        return SaslSession(self.sasl, self.now_ms)

    def ssl_context(self, listener: Listener) -> ssl.SSLContext | None:
        if not listener.tls or self.tls is None:
            return None
        return self.tls.context
