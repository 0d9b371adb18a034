"""SaslAuthenticate (key 36): one round of the SASL exchange chosen by SaslHandshake.

Feeds the client's bytes to the mechanism's state machine
(agent.security.sasl: PLAIN, SCRAM-SHA-256/512, OAUTHBEARER) and answers its
challenge. On success the connection's principal is set (read by the
authorizer through ``ctx.principal``) and v1+ answers the KIP-368
``session_lifetime_ms``: the smaller of ``connections_max_reauth_ms`` and the
credential's expiry (0 = none). On failure the answer is delayed by
``failed_auth_delay_ms`` (connection.failed.authentication.delay.ms), carries
SASL_AUTHENTICATION_FAILED with Kafka's message, and the connection closes;
the agent counts it and logs the reason without secrets, rate-limited.

Versions: 0-2 (v2 flexible).
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

from agent.connection import CloseAfter, Deferred
from agent.handlers.registry import handler
from agent.security.sasl import AuthenticationFailed
from agent.security.sasl.failures import FAILED_LOGINS
from kafka_protocol.messages import SaslAuthenticateRequest, SaslAuthenticateResponse

if TYPE_CHECKING:
    from agent.broker import Broker
    from agent.connection import RequestContext

log = logging.getLogger(__name__)

ILLEGAL_SASL_STATE = 34
SASL_AUTHENTICATION_FAILED = 58
_MAX_TOKEN = 64 * 1024  # no mechanism needs more; a larger token is garbage


@handler(SaslAuthenticateRequest, pre_auth=True)
async def handle(broker: Broker, ctx: RequestContext, req: SaslAuthenticateRequest) -> Any:
    session = ctx.conn.auth
    if session is None or not session.in_exchange():
        msg = (
            "SaslAuthenticate request received after successful authentication"
            if session is None or session.authenticated
            else "Unexpected SaslAuthenticate request without a SaslHandshake"
        )
        if session is not None:
            session.fail()
        log.warning("closing %s: %s", ctx.conn.peer, msg)
        return CloseAfter(SaslAuthenticateResponse(error_code=ILLEGAL_SASL_STATE, error_message=msg))
    server = session.server
    token = bytes(req.auth_bytes)
    try:
        if len(token) > _MAX_TOKEN:
            raise AuthenticationFailed(
                f"Authentication failed: SASL token of {len(token)} bytes is too large", "oversized token"
            )
        challenge = await server.step(token)
    except AuthenticationFailed as e:
        return _failed(broker, ctx, session, server.mechanism, e)
    if not server.complete:
        return SaslAuthenticateResponse(error_code=0, error_message=None, auth_bytes=challenge)
    principal = server.principal
    assert principal is not None
    if session.principal is not None and principal != session.principal:
        changed = AuthenticationFailed(
            "Cannot change principals during re-authentication",
            f"re-authentication as {principal} (was {session.principal})",
        )
        return _failed(broker, ctx, session, server.mechanism, changed)
    lifetime = session.complete(principal, server.expires_at_ms)
    ctx.conn.principal = principal
    ctx.conn.pre_auth = False  # full-size frames from now on (agent.security.limits)
    log.info("%s authenticated as %s (%s)", ctx.conn.peer, principal, server.mechanism)
    return SaslAuthenticateResponse(
        error_code=0, error_message=None, auth_bytes=challenge, session_lifetime_ms=lifetime
    )


def _failed(broker: Broker, ctx: RequestContext, session: Any, mechanism: str, e: AuthenticationFailed) -> Any:
    session.fail()
    # Counted always, logged once per user and client host per 10 s (agent.security.sasl.failures).
    FAILED_LOGINS.record(mechanism, e.user, ctx.conn.client_ip, e.reason)
    response = SaslAuthenticateResponse(error_code=SASL_AUTHENTICATION_FAILED, error_message=str(e))
    delay = session.settings.failed_delay_ms / 1000
    if delay <= 0:
        return CloseAfter(response)

    async def later() -> CloseAfter:
        await asyncio.sleep(delay)
        return CloseAfter(response)

    return Deferred(later())
