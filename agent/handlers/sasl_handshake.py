"""SaslHandshake (key 17): the client names its SASL mechanism.

Sits in front of SaslAuthenticate on a SASL listener (agent.security.sasl.session
holds the connection's state). Behaviour like Kafka's: an enabled mechanism is
answered with error 0 and the enabled list, and the exchange starts; an unknown
one with UNSUPPORTED_SASL_MECHANISM and the list, then the connection closes.
A handshake on an authenticated connection starts a KIP-368 re-authentication.
On a listener without SASL the answer is ILLEGAL_SASL_STATE.

Versions: 0-1 advertised. A v0 client then sends raw SASL tokens without Kafka
headers; that framing is not served (such a connection is closed). v0 stays
advertised because librdkafka (kcat's, at least) refuses a broker whose
SaslHandshake range does not start at 0, though it then uses v1 with
SaslAuthenticate (tests/security/test_tls_clients.py::test_kcat_scram_sha512_over_sasl_ssl).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from agent.connection import CloseAfter
from agent.handlers.registry import handler
from kafka_protocol.messages import SaslHandshakeRequest, SaslHandshakeResponse

if TYPE_CHECKING:
    from agent.broker import Broker
    from agent.connection import RequestContext

log = logging.getLogger(__name__)

UNSUPPORTED_SASL_MECHANISM = 33
ILLEGAL_SASL_STATE = 34


@handler(SaslHandshakeRequest, pre_auth=True)
async def handle(broker: Broker, ctx: RequestContext, req: SaslHandshakeRequest) -> Any:
    session = ctx.conn.auth
    if session is None:
        return SaslHandshakeResponse(error_code=ILLEGAL_SASL_STATE, mechanisms=[])
    mechanisms = list(session.settings.mechanisms)
    if session.in_exchange():
        session.fail()
        log.warning("closing %s: SaslHandshake during an unfinished SASL exchange", ctx.conn.peer)
        return CloseAfter(SaslHandshakeResponse(error_code=ILLEGAL_SASL_STATE, mechanisms=mechanisms))
    if not session.start(req.mechanism, ctx.header.api_version):
        log.warning("closing %s: unsupported SASL mechanism %r", ctx.conn.peer, req.mechanism[:64])
        return CloseAfter(SaslHandshakeResponse(error_code=UNSUPPORTED_SASL_MECHANISM, mechanisms=mechanisms))
    return SaslHandshakeResponse(error_code=0, mechanisms=mechanisms)
