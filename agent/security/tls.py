"""TLS for SSL / SASL_SSL listeners with Python's ``ssl``; mTLS principals; reload.

Sits between agent.config (``ssl_certfile``, ``ssl_keyfile``, ``ssl_cafile``,
``ssl_client_auth``) and agent.security.tls_accept (which runs the handshake
with :attr:`TlsContexts.context` on each accepted TCP connection and feeds the
connection's BufferedProtocol with plaintext, so the framing code is the same
on every listener).

Certificate reload without restart: every handshake goes through the
context's SNI callback, which checks (at most once a second) whether the
certificate or key file changed and, if so, builds a fresh context and hands it
to this and every later handshake; existing connections keep their session.

mTLS principal (Kafka's default ``ssl.principal.mapping.rules=DEFAULT``): the
client certificate's full subject distinguished name in RFC 2253 / 4514 form,
most specific first, e.g. ``User:CN=alice,OU=eng,O=Example``. Only on SSL
listeners; on SASL_SSL the principal comes from SASL, as in Kafka.

The admin/peer HTTP port (``admin_tls``, issue 42) reuses :class:`TlsContexts`
for its server side (:func:`admin_server_tls`); :class:`PeerTls` is the client
side the peer cache and the group relay verify other agents with.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from dataclasses import dataclass
from typing import Any

from cryptography import x509

from agent.config import AgentConfig
from agent.security.principal import KafkaPrincipal
from metastore.tls import ServerTls

log = logging.getLogger(__name__)

_VERIFY = {"none": ssl.CERT_NONE, "requested": ssl.CERT_OPTIONAL, "required": ssl.CERT_REQUIRED}
_CHECK_EVERY_S = 1.0


def subject_principal(der: bytes) -> KafkaPrincipal:
    """Kafka's DEFAULT rule: ``User:`` + the subject DN, RFC 2253 order."""
    cert = x509.load_der_x509_certificate(der)
    return KafkaPrincipal("User", cert.subject.rfc4514_string())


class TlsContexts(ServerTls):
    """The current server context of the agent's TLS listeners (reloaded as
    :class:`metastore.tls.ServerTls` reloads), with their client-certificate settings."""

    def __init__(self, config: AgentConfig) -> None:
        if not config.ssl_certfile or not config.ssl_keyfile:
            raise ValueError("an SSL / SASL_SSL listener needs ssl_certfile and ssl_keyfile")
        if config.ssl_client_auth != "none" and not config.ssl_cafile:
            raise ValueError(
                f"ssl_client_auth={config.ssl_client_auth} needs ssl_cafile (the clients' CA)"
            )
        self.config = config
        super().__init__(
            config.ssl_certfile,
            config.ssl_keyfile,
            cafile=config.ssl_cafile,
            verify_mode=_VERIFY[config.ssl_client_auth],
            check_every_s=_CHECK_EVERY_S,
        )

    def on_connect(self, conn: Any, transport: asyncio.BaseTransport) -> None:
        """The handshake completed: an SSL listener's principal is the client certificate's subject."""
        if conn.listener is None or conn.listener.sasl:
            return
        sslobj = transport.get_extra_info("ssl_object")
        der = sslobj.getpeercert(binary_form=True) if sslobj is not None else None
        if der:
            try:
                conn.principal = subject_principal(der)
                log.info(
                    "%s authenticated as %s (TLS client certificate)", conn.peer, conn.principal
                )
            except ValueError as e:
                log.warning("client certificate of %s: unreadable subject (%s)", conn.peer, e)


# -- the admin/peer HTTP port over TLS (issue 42) ---------------------------------------


def admin_server_tls(config: AgentConfig) -> TlsContexts | None:
    """The admin port's server contexts when ``admin_tls`` is on: its own certificate
    and key (``admin_ssl_certfile``/``admin_ssl_keyfile``) or the Kafka listeners'
    (``ssl_certfile``/``ssl_keyfile``), reloaded on change like theirs. No client
    certificate is asked for: peers authenticate with the peer credential, Spark
    with its Kafka credentials, and a load balancer's health check has none."""
    if not config.admin_tls:
        return None
    cert = config.admin_ssl_certfile or config.ssl_certfile
    key = config.admin_ssl_keyfile or (config.ssl_keyfile if not config.admin_ssl_certfile else "")
    if not cert or not key:
        raise ValueError(
            "admin_tls needs a certificate and key: FLOE_ADMIN_SSL_CERTFILE/FLOE_ADMIN_SSL_KEYFILE,"
            " or the Kafka listeners' FLOE_SSL_CERTFILE/FLOE_SSL_KEYFILE"
        )
    return TlsContexts(
        config.model_copy(
            update={"ssl_certfile": cert, "ssl_keyfile": key, "ssl_cafile": "", "ssl_client_auth": "none"}
        )
    )


@dataclass(frozen=True, slots=True)
class PeerTls:
    """How an agent reaches its peers' HTTPS admin ports: the context that verifies
    their certificates (``peer_ssl_cafile``, else the system trust store) and the
    name checked (``peer_ssl_server_name``; None: the peer's address itself)."""

    context: ssl.SSLContext
    server_name: str | None = None

    @classmethod
    def from_config(cls, config: AgentConfig) -> PeerTls | None:
        if not config.admin_tls:
            return None
        try:
            ctx = ssl.create_default_context(cafile=config.peer_ssl_cafile or None)
        except (OSError, ssl.SSLError) as e:
            raise ValueError(f"cannot load FLOE_PEER_SSL_CAFILE {config.peer_ssl_cafile!r}: {e}") from e
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        return cls(ctx, config.peer_ssl_server_name or None)
