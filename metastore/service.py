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
"""

from __future__ import annotations

import json
import logging

from aiohttp import web

from metastore.group_commit import GroupCommitter
from metastore.protocol import Metastore
from metastore.rpc import decode, encode, encode_error, protocol_methods

log = logging.getLogger(__name__)

_GROUPED = frozenset(("commit_object", "commit_objects"))


class MetastoreService:
    def __init__(self, meta: Metastore, *, batch_window_ms: float = 0.0) -> None:
        self.meta = meta
        self.methods = protocol_methods()
        self.batcher = GroupCommitter(meta, window_ms=batch_window_ms)

    def app(self) -> web.Application:
        app = web.Application(client_max_size=256 * 1024 * 1024)
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
        try:
            body = json.loads(await request.read())
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


async def serve(
    meta: Metastore, host: str, port: int, *, batch_window_ms: float = 0.0
) -> tuple[web.AppRunner, int, MetastoreService]:
    """Start serving ``meta``; returns the runner (``await runner.cleanup()``), the bound port and the service."""
    service = MetastoreService(meta, batch_window_ms=batch_window_ms)
    runner = web.AppRunner(service.app(), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, host, port)
    await site.start()
    server = getattr(site, "_server", None)
    bound = server.sockets[0].getsockname()[1] if server is not None and server.sockets else port
    return runner, bound, service
