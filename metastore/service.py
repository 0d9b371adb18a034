"""The metastore served over HTTP: ``floe metastore serve``.

Agents, the compactor and the Spark source can then run without database
credentials (``--metastore http://host:port``, :mod:`metastore.remote`). One
route, ``POST /rpc/{method}`` with ``{"a": [args], "k": {kwargs}}`` in the
:mod:`metastore.rpc` encoding, calls that method of the wrapped
:class:`~metastore.protocol.Metastore` (any method of the protocol, none other)
and answers ``{"r": result}`` or ``{"error": ...}``. ``GET /healthz`` answers ok.

**Group commit**: ``commit_object`` and ``commit_objects`` calls go through
one :class:`~metastore.group_commit.GroupCommitter`: the calls that arrive
while a group is being committed (or within ``batch_window_ms`` of the first,
0 by default) are sequenced together in ONE ``commit_objects`` call, one
transaction: each touched partition row locked and updated once per group,
the batch rows of all objects inserted set-based, one COMMIT before any
caller hears back, and each caller gets exactly its own per-batch results.
One group is in flight at a time, so groups never deadlock with each other;
if a group fails as a whole (a deadlock with a directly connected agent, a
lost connection) each call in it is retried on its own.

**Authentication and limits** (issue 15): every route but ``/healthz`` goes
through :mod:`metastore.internal_auth` (``Authorization: Bearer`` with the
metastore credential ``FLOE_METASTORE_TOKEN``, or the legacy
``FLOE_INTERNAL_TOKEN``; loopback callers only without one), so an anonymous
caller gets 401 before its body is read. Scopes (issue 42): the methods that
change ACLs or SCRAM users or list SCRAM stored keys (``ADMIN_METHODS``) answer
403 unless the caller holds the admin credential ``FLOE_METASTORE_ADMIN_TOKEN``;
the agents' credential keeps every other method (``get_scram_credential``
included: agents verify SCRAM logins with it). A body larger than
``max_request_bytes`` (default 16 MiB) is refused with 413 while it streams in
(aiohttp stops reading at the cap); the bodies being read at once share a
budget of ``max_inflight_bytes`` (a caller waits for its share), and a JSON
body with more than ``max_json_items`` values (commas, objects and arrays
counted before parsing) is refused with 413 before ``json.loads`` builds it:
a 99 MB body can no longer grow the service by gigabytes.

**TLS** (issue 42): given a certificate and key (``floe metastore serve
--tls-cert/--tls-key``), :func:`serve` answers HTTPS only (TLS 1.2+), so the
credential, SCRAM lookups and commits never cross the network in clear;
clients verify it against ``FLOE_METASTORE_CA`` (:mod:`metastore.remote`).
The files are read again when they change (checked at most once a second, on a
handshake), so a renewed certificate needs no restart.
"""

from __future__ import annotations

import asyncio
import json
import logging

from aiohttp import web

from metastore.group_commit import GroupCommitter
from metastore.internal_auth import (
    ADMIN,
    ADMIN_METHODS,
    METASTORE,
    SCOPES_KEY,
    scoped_auth_middleware,
)
from metastore.protocol import Metastore
from metastore.rpc import decode, encode, encode_error, protocol_methods
from metastore.tls import ServerTls

log = logging.getLogger(__name__)

_GROUPED = frozenset(("commit_object", "commit_objects"))
MiB = 1024 * 1024
MAX_REQUEST_BYTES = 16 * MiB
MAX_INFLIGHT_BYTES = 64 * MiB
MAX_JSON_ITEMS = 1_000_000


class ByteBudget:
    """Bytes of request bodies held at once: ``take(n)`` waits until ``n`` fit."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.used = 0
        self._cond = asyncio.Condition()

    async def take(self, n: int) -> int:
        n = min(n, self.capacity)
        async with self._cond:
            await self._cond.wait_for(lambda: self.used + n <= self.capacity)
            self.used += n
        return n

    async def give(self, n: int) -> None:
        async with self._cond:
            self.used -= n
            self._cond.notify_all()


def json_items(body: bytes) -> int:
    """An upper bound of the values in a JSON text, counted without parsing it."""
    return body.count(b",") + body.count(b"[") + body.count(b"{") + 1


class MetastoreService:
    def __init__(
        self,
        meta: Metastore,
        *,
        batch_window_ms: float = 0.0,
        token: str = "",
        admin_token: str = "",
        max_request_bytes: int = MAX_REQUEST_BYTES,
        max_inflight_bytes: int = MAX_INFLIGHT_BYTES,
        max_json_items: int = MAX_JSON_ITEMS,
    ) -> None:
        self.meta = meta
        self.methods = protocol_methods()
        self.batcher = GroupCommitter(meta, window_ms=batch_window_ms)
        self.token = token
        self.admin_token = admin_token
        self.max_request_bytes = max_request_bytes
        self.max_json_items = max_json_items
        self.budget = ByteBudget(max(max_inflight_bytes, max_request_bytes))

    def app(self) -> web.Application:
        app = web.Application(
            client_max_size=self.max_request_bytes,
            middlewares=[
                scoped_auth_middleware(
                    {METASTORE: self.token, ADMIN: self.admin_token}, lambda _: None, ("/healthz",)
                )
            ],
        )
        app.router.add_post("/rpc/{method}", self._rpc)
        app.router.add_get("/healthz", self._healthz)
        return app

    async def _healthz(self, _: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    async def _rpc(self, request: web.Request) -> web.Response:
        name = request.match_info["method"]
        if name not in self.methods:
            return web.json_response(
                {"error": {"type": "MetastoreError", "message": f"no such method {name!r}"}},
                status=404,
            )
        if name in ADMIN_METHODS and ADMIN not in request.get(SCOPES_KEY, ()):
            log.info("metastore service: refused %s to %s: needs the admin credential", name, request.remote)
            return web.json_response(
                {
                    "error": {
                        "type": "MetastoreError",
                        "message": f"{name} needs the metastore admin credential (FLOE_METASTORE_ADMIN_TOKEN)",
                    }
                },
                status=403,
            )
        declared = request.content_length
        if declared is not None and declared > self.max_request_bytes:
            return _too_large(f"request body of {declared} bytes exceeds {self.max_request_bytes}")
        held = await self.budget.take(declared if declared is not None else self.max_request_bytes)
        try:
            return await self._call(request, name)
        finally:
            await self.budget.give(held)

    async def _call(self, request: web.Request, name: str) -> web.Response:
        try:
            raw = await request.read()  # stops at client_max_size: 413
        except web.HTTPRequestEntityTooLarge:
            return _too_large(f"request body exceeds {self.max_request_bytes} bytes")
        if json_items(raw) > self.max_json_items:
            return _too_large(f"request body has more than {self.max_json_items} JSON values")
        try:
            body = json.loads(raw)
            del raw
            args, kwargs = decode(body.get("a", [])), decode(body.get("k", {}))
            if name in _GROUPED and not kwargs:
                result = await getattr(self.batcher, name)(*args)
            else:
                result = await getattr(self.meta, name)(*args, **kwargs)
            payload = {"r": encode(result)}
        except Exception as e:  # business outcomes are values; this is a failure
            if not isinstance(e, (ValueError, TypeError)):
                log.debug("metastore call %s failed: %s", name, e)
            payload = encode_error(e)
        return web.Response(
            body=json.dumps(payload, separators=(",", ":")), content_type="application/json"
        )

    async def close(self) -> None:
        await self.batcher.close()


def _too_large(message: str) -> web.Response:
    log.warning("metastore service: refused a request: %s", message)
    return web.json_response({"error": {"type": "MetastoreError", "message": message}}, status=413)


# Above the clients' keep-alive (aiohttp's connector keeps idle connections 15 s), so
# the service does not close a connection a client is about to reuse.
IDLE_TIMEOUT_S = 30.0


async def serve(
    meta: Metastore,
    host: str,
    port: int,
    *,
    batch_window_ms: float = 0.0,
    token: str = "",
    admin_token: str = "",
    max_request_bytes: int = MAX_REQUEST_BYTES,
    tls: ServerTls | None = None,
    idle_timeout_s: float = IDLE_TIMEOUT_S,
) -> tuple[web.AppRunner, int, MetastoreService]:
    """Start serving ``meta`` (HTTPS with ``tls``); returns the runner
    (``await runner.cleanup()``), the bound port and the service. A connection
    whose request header is not complete ``idle_timeout_s`` after its accept or
    its last response is closed (slow-header and idle clients)."""
    service = MetastoreService(
        meta,
        batch_window_ms=batch_window_ms,
        token=token,
        admin_token=admin_token,
        max_request_bytes=max_request_bytes,
    )
    runner = web.AppRunner(service.app(), access_log=None, keepalive_timeout=idle_timeout_s)
    await runner.setup()
    site = web.TCPSite(runner, host, port, ssl_context=tls.context if tls is not None else None)
    await site.start()
    server = getattr(site, "_server", None)
    bound = server.sockets[0].getsockname()[1] if server is not None and server.sockets else port
    return runner, bound, service
