"""The shared read cache: the ring owner of an object serves its blocks to peers.

Where it sits: the loader behind the agent's :class:`~agent.cache.BlockCache`.
On a miss for block ``(key, i)`` the agent asks the ring of *its own zone* who
owns ``key``. Itself: a ranged GET from the object store. A peer: an HTTP GET of
``/blocks?key=..&start=..&end=..`` on the peer's admin port, which the peer
answers from its own block cache (loading it from the object store once, with
one in-flight load per block shared by every requester). So each block is read
from object storage about once per zone, and a zone's agents share one cache.

If the peer fails (dead, timing out, answering an error) the agent reads the
object store itself: the peer cache is an optimisation, never a dependency. A
request served for a peer always reads locally (never forwards again), so
agents whose rings briefly disagree cannot bounce a request around.

Metrics (on the agent's /metrics): ``floe_object_gets_total`` counts object-store
GETs (as before), ``floe_peer_gets_total``/``floe_peer_get_bytes_total`` blocks
fetched from peers, ``floe_peer_get_failures_total`` fallbacks,
``floe_peer_serves_total`` blocks served to peers.
"""

from __future__ import annotations

import asyncio
import contextvars
import ipaddress
import logging
import socket
from collections.abc import Awaitable, Callable
from contextlib import suppress
from typing import Any

import aiohttp
from aiohttp import web
from prometheus_client import Counter

from agent.cache import BlockCache
from agent.cluster.membership import Membership
from agent.cluster.ring import Peer
from agent.metrics import METRICS
from agent.security.tls import PeerTls
from metastore.internal_auth import auth_headers

log = logging.getLogger(__name__)

StoreGet = Callable[[str, int, int], Awaitable[bytes]]

PEER_GETS = Counter(
    "floe_peer_gets", "Cache blocks fetched from the owning peer", registry=METRICS.registry
)
PEER_GET_BYTES = Counter(
    "floe_peer_get_bytes", "Bytes fetched from peers' caches", registry=METRICS.registry
)
PEER_FAILURES = Counter(
    "floe_peer_get_failures",
    "Peer block fetches that fell back to the object store",
    registry=METRICS.registry,
)
PEER_SERVES = Counter("floe_peer_serves", "Cache blocks served to peers", registry=METRICS.registry)

_serving_peer: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "floe_serving_peer", default=False
)


def resolve_peer_address(configured: str, bind_host: str, admin_port: int) -> tuple[str, int]:
    """The (host, port) peers should use for this agent's admin HTTP.

    ``configured`` (``FLOE_PEER_ADDRESS``) wins: ``host`` or ``host:port``. Else the
    bind host when it is a specific address, else the address of the default
    route (in an ECS task: the task's own private IP), else loopback."""
    if configured and configured != "auto":
        host, sep, port = configured.rpartition(":")
        if sep and port.isdigit() and not host.endswith(":"):
            return host.strip("[]"), int(port)
        return configured.strip("[]"), admin_port
    if bind_host not in ("", "0.0.0.0", "::"):
        return bind_host, admin_port
    return discover_host(), admin_port


def discover_host() -> str:
    """This host's outbound private address (a UDP connect sends no packet)."""
    with suppress(OSError), socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.connect(("10.254.254.254", 1))
        addr = str(s.getsockname()[0])
        if not ipaddress.ip_address(addr).is_unspecified:
            return addr
    with suppress(OSError):
        return socket.gethostbyname(socket.gethostname())
    return "127.0.0.1"


def peer_session(timeout: aiohttp.ClientTimeout, headers: dict[str, str], tls: PeerTls | None) -> aiohttp.ClientSession:
    """The HTTP client of peer traffic (blocks, group relay): over TLS it verifies
    the peers' admin certificates with ``tls.context``."""
    connector = aiohttp.TCPConnector(ssl=tls.context) if tls is not None else None
    return aiohttp.ClientSession(timeout=timeout, headers=headers, connector=connector)


def peer_request_tls(tls: PeerTls | None) -> dict[str, Any]:
    """Per-request TLS arguments: the name the peer's certificate must carry when
    it is not the peer's address (``peer_ssl_server_name``)."""
    return {"server_hostname": tls.server_name} if tls is not None and tls.server_name else {}


class PeerBlockLoader:
    def __init__(
        self,
        store_get: StoreGet,
        membership: Membership,
        zone: str | None,
        *,
        timeout_s: float = 10.0,
        token: str = "",
        tls: PeerTls | None = None,
    ) -> None:
        self._headers = auth_headers(token)
        self._tls = tls  # admin_tls: peers answer https only, verified with tls.context
        self.store_get = store_get
        self.membership = membership
        self.zone = zone
        self.timeout = aiohttp.ClientTimeout(total=timeout_s, sock_connect=2.0)
        self._session: aiohttp.ClientSession | None = None

    def owner(self, key: str) -> Peer | None:
        return self.membership.rings.zone(self.zone).owner("object:" + key)

    async def load(self, key: str, start: int, end: int) -> bytes:
        if _serving_peer.get():
            return await self.store_get(key, start, end)
        owner = self.owner(key)
        if (
            owner is None
            or owner.agent_id == self.membership.me.agent_id
            or (base := owner.admin_url_for("https" if self._tls else "http")) is None
        ):
            return await self.store_get(key, start, end)
        try:
            data = await self._peer_get(base, key, start, end)
        except asyncio.CancelledError:
            raise
        except Exception as e:
            PEER_FAILURES.inc()
            log.info(
                "peer %s could not serve %s [%d,%d): %s; reading the object store",
                owner.agent_id,
                key,
                start,
                end,
                e,
            )
            return await self.store_get(key, start, end)
        PEER_GETS.inc()
        PEER_GET_BYTES.inc(len(data))
        return data

    async def _peer_get(self, base: str, key: str, start: int, end: int) -> bytes:
        if self._session is None:
            self._session = peer_session(self.timeout, self._headers, self._tls)
        params = {"key": key, "start": str(start), "end": str(end)}
        async with self._session.get(f"{base}/blocks", params=params, **peer_request_tls(self._tls)) as r:
            if r.status != 200:
                raise OSError(f"HTTP {r.status}")
            return await r.read()

    async def close(self) -> None:
        if self._session is not None:
            with suppress(Exception):
                await self._session.close()
            self._session = None


def add_block_route(app: web.Application, cache: BlockCache) -> None:
    """``GET /blocks?key=&start=&end=``: bytes of an object through this agent's cache."""

    async def blocks(request: web.Request) -> web.Response:
        try:
            key = request.query["key"]
            start, end = int(request.query["start"]), int(request.query["end"])
        except (KeyError, ValueError):
            return web.Response(status=400, text="key, start and end are required")
        if start < 0 or end <= start or end - start > 4 * cache.block_size:
            return web.Response(status=400, text="bad range")
        token = _serving_peer.set(True)
        try:
            data = await cache.read(key, start, end, use=False)  # not this agent's reader
        except Exception as e:
            return web.Response(status=502, text=str(e))
        finally:
            _serving_peer.reset(token)
        PEER_SERVES.inc()
        return web.Response(body=data, content_type="application/octet-stream")

    app.router.add_get("/blocks", blocks)
