"""Peer probes of slow-agent isolation: one ApiVersions round trip per peer, twice a beat.

Where it sits: :class:`~agent.cluster.cluster.Cluster` calls
:meth:`PeerProber.probe` for every live peer twice a heartbeat (without
waiting for the last one to end) and hands the latencies to
:class:`~agent.cluster.isolation.Isolation`; the peer answers
on ``POST /kafka/probe`` of its admin (peer) port, added by
:func:`add_probe_route` beside the group relay ``/kafka``.

What is measured: the time for the peer to run a Kafka ApiVersions request
through its own Kafka dispatcher -- the codec, the handler table and the event
loop that every client request of that agent goes through (and the
``debug_faults`` delay of :mod:`agent.faults`, which wraps that dispatcher) --
plus a peer HTTP round trip. Why the peer port and not the peer's Kafka
listener: the advertised Kafka address may be a load balancer shared by many
agents (a probe would land on any of them), and listeners may require TLS
client certificates or SASL that a peer does not hold; the peer port is
private per agent (``peer_host``), authenticated with the peer credential, and
runs admin TLS when the cluster does. A probe that fails or outlives
``timeout_s`` counts as ``timeout_s`` (an agent that throws is as bad as a slow one).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections.abc import Awaitable, Callable
from contextlib import suppress
from typing import Any

import aiohttp
from aiohttp import web

from agent.cluster.forward import run_relayed
from agent.cluster.peer_cache import peer_request_tls, peer_session
from agent.cluster.ring import Peer
from agent.security.tls import PeerTls
from kafka_protocol.framing import (
    RequestHeader,
    encode_request,
    parse_request_header,
)
from kafka_protocol.messages import ApiVersionsRequest
from metastore.internal_auth import auth_headers

log = logging.getLogger(__name__)

PATH = "/kafka/probe"
API_VERSIONS = 18
Dispatch = Callable[..., Awaitable[Any]]


class PeerProber:
    """Times one ApiVersions request to a peer; failures count as the timeout."""

    def __init__(
        self,
        admin_url: Callable[[Peer], str | None],
        *,
        token: str = "",
        tls: PeerTls | None = None,
    ) -> None:
        self._admin_url = admin_url
        self._headers = auth_headers(token)
        self._tls = tls
        self._session: aiohttp.ClientSession | None = None
        self._ids = itertools.count(1)

    async def probe(self, peer: Peer, timeout_s: float) -> tuple[float, str | None]:
        """(latency in ms, error or None); a failed probe is ``timeout_s`` long."""
        base = self._admin_url(peer)
        if base is None:
            return timeout_s * 1000, "no peer address"
        if self._session is None:
            self._session = peer_session(
                aiohttp.ClientTimeout(total=None), self._headers, self._tls
            )
        frame = encode_request(
            RequestHeader(API_VERSIONS, 3, next(self._ids) & 0x7FFFFFFF, "floe-probe"),
            ApiVersionsRequest(client_software_name="floe-probe", client_software_version="1"),
        )[4:]  # the route takes the frame without its size prefix, as /kafka does
        started = time.monotonic()
        try:
            async with asyncio.timeout(timeout_s):
                async with self._session.post(
                    f"{base}{PATH}", data=frame, **peer_request_tls(self._tls)
                ) as r:
                    body = await r.read()
                    if r.status != 200 or not body:
                        raise OSError(f"HTTP {r.status}: {body[:120]!r}")
        except asyncio.CancelledError:
            raise
        except TimeoutError:
            return timeout_s * 1000, f"no answer within {timeout_s:g} s"
        except Exception as e:
            return timeout_s * 1000, f"{type(e).__name__}: {e}"[:200]
        return (time.monotonic() - started) * 1000, None

    async def close(self) -> None:
        if self._session is not None:
            with suppress(Exception):
                await self._session.close()
            self._session = None


def add_probe_route(app: web.Application, dispatch: Dispatch) -> None:
    """``POST /kafka/probe``: run a peer's ApiVersions frame here, answer its response."""

    async def probe(request: web.Request) -> web.Response:
        frame = await request.read()
        try:
            header, body_at = parse_request_header(frame)
        except Exception as e:
            return web.Response(status=400, text=f"bad request header: {e}")
        if header.api_key != API_VERSIONS:
            return web.Response(status=400, text="only ApiVersions probes")
        return await run_relayed(dispatch, frame, header, body_at, request.remote or "", "User:ANONYMOUS")

    app.router.add_post(PATH, probe)
