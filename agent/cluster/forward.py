"""Coordinator requests behind a shared address: forward them to the ring owner.

Where it sits: in the dispatcher (:func:`agent.handlers.make_dispatcher`),
before a group request (JoinGroup, SyncGroup, Heartbeat, LeaveGroup,
OffsetCommit, OffsetDelete) or a transaction request (InitProducerId with a
transactional id, AddPartitionsToTxn v0-3, AddOffsetsToTxn, EndTxn,
TxnOffsetCommit, DescribeTransactions of one id) reaches its handler, and as
the ``POST /kafka`` route on the admin (peer) HTTP port. Transactional ids
and group ids share one ring, so the owner is found the same way.

Why: when several agents advertise one address (a zone's load balancer), a
client cannot pick the coordinator FindCoordinator names: its connection to
"node N" lands on whichever agent the balancer chose. Answering
NOT_COORDINATOR there would make the client look the coordinator up again and
reconnect to the same address forever (librdkafka keeps the connection). So an
agent that receives a group request for a group owned by another agent *that
advertises the same address* relays the request frame over the peer address to
the owner, which runs it through its own dispatcher and sends back the
response frame; the agent writes it to the client as is. When the owner
advertises its own address the client can reach it, and the usual
NOT_COORDINATOR answer stands (also during ring changes, when two agents may
briefly disagree on the owner; a relayed request is never relayed again).

Authorization (issue 42): the relaying agent authorizes the request before it
relays it (``may_relay``), and the relay carries the client's principal and
host (``X-Floe-Principal``, ``X-Floe-Client-Host``); the owner authorizes the
request again with them (``ctx.attrs["principal"]``, read by
:mod:`agent.security.authorizer`), so the peer credential alone, without a
principal that holds the ACLs, cannot run a group request past them. A relay
without the principal header runs as ``User:ANONYMOUS``. A frame that does not
decode is answered 400 (never 500).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from contextlib import suppress
from typing import TYPE_CHECKING, Any

import aiohttp
from aiohttp import web
from prometheus_client import Counter

from agent.cluster.peer_cache import peer_request_tls, peer_session
from agent.connection import Deferred, RawFrame, Reply, RequestContext
from agent.metrics import METRICS
from agent.security.tls import PeerTls
from kafka_protocol.exceptions import DecodeError, ProtocolError
from kafka_protocol.framing import encode_response, parse_request_header
from metastore.internal_auth import auth_headers

if TYPE_CHECKING:
    from agent.cluster.ring import Peer

log = logging.getLogger(__name__)

# api key -> the request field naming the coordinator's key (a group or transactional id)
GROUP_APIS = {
    8: "group_id", 11: "group_id", 12: "group_id", 13: "group_id", 14: "group_id", 47: "group_id",
    22: "transactional_id",  # InitProducerId (null for an idempotent producer: any agent)
    24: "v3_and_below_transactional_id",  # AddPartitionsToTxn (v4+ batches are broker-to-broker)
    25: "transactional_id", 26: "transactional_id",  # AddOffsetsToTxn, EndTxn
    28: "group_id",  # TxnOffsetCommit goes to the group's coordinator
    65: "transactional_ids",  # DescribeTransactions, when it names one id
    76: "group_id",  # ShareGroupHeartbeat: membership lives on the share group's coordinator
    68: "group_id", 69: "group_ids",  # ConsumerGroupHeartbeat, ConsumerGroupDescribe of one group
}  # fmt: skip

FORWARDS = Counter(
    "floe_group_forwards", "Group requests relayed to the owner behind a shared address", registry=METRICS.registry
)
FORWARD_FAILURES = Counter(
    "floe_group_forward_failures", "Relayed group requests that failed (client told NOT_COORDINATOR)",
    registry=METRICS.registry,
)  # fmt: skip


class GroupForwarder:
    def __init__(
        self, me: Callable[[], Peer], owner: Callable[[str], Peer], *, timeout_s: float = 330.0, token: str = "",
        tls: PeerTls | None = None,
    ) -> None:
        self._headers = auth_headers(token)
        self._tls = tls  # admin_tls: relay over https, verifying the owner's certificate
        self._me = me
        self._owner = owner
        # JoinGroup may wait up to the rebalance timeout (clients default to 300 s).
        self._timeout = aiohttp.ClientTimeout(total=timeout_s, sock_connect=2.0)
        self._session: aiohttp.ClientSession | None = None

    def target(self, api_key: int, request: Any) -> Peer | None:
        """The agent to relay this request to, or None to handle it here."""
        field = GROUP_APIS.get(api_key)
        group_id = getattr(request, field, None) if field else None
        if isinstance(group_id, list):
            group_id = group_id[0] if len(group_id) == 1 else None
        if not group_id or not isinstance(group_id, str):
            return None
        me, owner = self._me(), self._owner(group_id)
        if owner.agent_id == me.agent_id or (owner.host, owner.port) != (me.host, me.port):
            return None
        return owner if owner.admin_url else None

    async def relay(
        self, owner: Peer, frame: bytes, client_host: str, fallback: Callable[[], Awaitable[Any]], *, principal: str
    ) -> Any:
        """Send ``frame`` (sent by ``principal`` from ``client_host``) to ``owner``; on failure
        run ``fallback`` (the local handler, which answers NOT_COORDINATOR, so the client retries)."""
        if self._session is None:
            self._session = peer_session(self._timeout, self._headers, self._tls)
        try:
            async with self._session.post(
                f"{owner.admin_url_for('https' if self._tls else 'http')}/kafka",
                data=frame,
                headers={"X-Floe-Client-Host": client_host, PRINCIPAL_HEADER: principal},
                **peer_request_tls(self._tls),
            ) as r:
                if r.status != 200:
                    raise OSError(f"HTTP {r.status}: {(await r.text())[:200]}")
                data = await r.read()
        except asyncio.CancelledError:
            raise
        except Exception as e:
            FORWARD_FAILURES.inc()
            log.info("could not relay a group request to %s: %s", owner.agent_id, e)
            return await fallback()
        FORWARDS.inc()
        return RawFrame(data)

    async def close(self) -> None:
        if self._session is not None:
            with suppress(Exception):
                await self._session.close()
            self._session = None


Dispatch = Callable[..., Awaitable[Any]]
PRINCIPAL_HEADER = "X-Floe-Principal"
ANONYMOUS = "User:ANONYMOUS"


def add_forward_route(app: web.Application, dispatch: Dispatch) -> None:
    """``POST /kafka``: run a relayed group request frame here, answer its response frame."""
    async def kafka(request: web.Request) -> web.Response:
        frame = await request.read()
        try:
            header, body_at = parse_request_header(frame)
        except Exception as e:
            return web.Response(status=400, text=f"bad request header: {e}")
        if header.api_key not in GROUP_APIS:
            return web.Response(status=400, text=f"api key {header.api_key} is not relayed")
        principal = request.headers.get(PRINCIPAL_HEADER, "").strip()
        if not _principal_ok(principal):
            return web.Response(status=400, text=f"bad {PRINCIPAL_HEADER} header")
        # The owner authorizes again with the client's principal (agent.security.authorizer).
        host = request.headers.get("X-Floe-Client-Host", request.remote or "")
        return await run_relayed(dispatch, frame, header, body_at, host, principal or ANONYMOUS)

    app.router.add_post("/kafka", kafka)


async def run_relayed(
    dispatch: Dispatch, frame: bytes, header: Any, body_at: int, client_host: str, principal: str
) -> web.Response:
    """Run a relayed request frame through this agent's dispatcher; its response frame
    (the group relay above, and the peers' ApiVersions probes, agent.cluster.probes)."""
    ctx = RequestContext(
        header=header,
        conn=None,  # type: ignore[arg-type]  # relayed handlers never touch the connection
        client_host=client_host,
        attrs={"relayed": True, "principal": principal},
    )
    try:
        result = await dispatch(ctx, memoryview(frame), body_at)
    except (DecodeError, ProtocolError) as e:  # the sender's fault: malformed or unsupported
        return web.Response(status=400, text=f"bad relayed request: {type(e).__name__}: {e}")
    if isinstance(result, Deferred):
        result = await result.awaitable
    if isinstance(result, Reply):
        parts = encode_response(header.correlation_id, result.response, result.version)
    else:
        parts = encode_response(header.correlation_id, result, header.api_version)
    return web.Response(body=b"".join(parts), content_type="application/octet-stream")


def _principal_ok(text: str) -> bool:
    """Empty (anonymous) or ``Type:name`` (KafkaPrincipal's form)."""
    if not text:
        return True
    kind, sep, name = text.partition(":")
    return bool(sep and kind and name) and len(text) <= 1024
