"""The metastore served over HTTP: ``floe metastore serve``.

Agents, the compactor and the Spark source can then run without database
credentials (``--metastore http://host:port``, :mod:`metastore.remote`). One
route, ``POST /rpc/{method}`` with ``{"a": [args], "k": {kwargs}}`` in the
:mod:`metastore.rpc` encoding, calls that method of the wrapped
:class:`~metastore.protocol.Metastore` (any method of the protocol, none other)
and answers ``{"r": result}`` or ``{"error": ...}``. ``GET /healthz`` answers ok.

**Commit batching** (Postgres): ``commit_object`` calls arriving while a
batch is being committed, or within ``batch_window_ms`` (2 ms) of the first,
are committed together in ONE transaction — one ``floe_commit_object`` call
per object, in arrival order, on one connection (so each object is still its
own sequencer step, with its own results), one COMMIT for all. Fewer
transactions mean fewer WAL flushes and less lock hand-over between
connections; since every commit of a busy cluster locks the same hot partition
rows, they were serialized anyway. One batch is in flight at a time, so
batches never deadlock with each other. If anything in a batch fails (an
object key committed twice, a deadlock with a directly connected agent, a
lost connection) the transaction rolls back as a whole and every call in it
is retried on its own, so each caller gets exactly its own outcome or error.
Other back ends (SQLite) get each call as is.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Sequence
from contextlib import suppress
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from metastore.protocol import Metastore
from metastore.rpc import decode, encode, encode_error, protocol_methods
from metastore.types import BatchToCommit, CommitResult

log = logging.getLogger(__name__)


@dataclass
class _Pending:
    args: tuple[str, int, str, Sequence[BatchToCommit]]
    future: asyncio.Future[list[CommitResult]]


class CommitBatcher:
    """Groups concurrent ``commit_object`` calls into one Postgres transaction."""

    def __init__(self, meta: Any, *, window_ms: float = 2.0, max_batch: int = 64) -> None:
        self.meta = meta
        self.window = window_ms / 1000
        self.max_batch = max_batch
        self._queue: asyncio.Queue[_Pending] = asyncio.Queue()
        self._task: asyncio.Task[None] | None = None
        self.batches = 0
        self.objects = 0
        self.fallbacks = 0

    async def commit(
        self, key: str, size: int, agent_id: str, batches: Sequence[BatchToCommit]
    ) -> list[CommitResult]:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(), name="commit-batcher")
        fut: asyncio.Future[list[CommitResult]] = asyncio.get_running_loop().create_future()
        await self._queue.put(_Pending((key, size, agent_id, batches), fut))
        return await fut

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with suppress(asyncio.CancelledError):
                await self._task

    async def _run(self) -> None:
        while True:
            items = [await self._queue.get()]
            loop = asyncio.get_running_loop()
            deadline = loop.time() + self.window
            while len(items) < self.max_batch:
                try:
                    items.append(self._queue.get_nowait())
                    continue
                except asyncio.QueueEmpty:
                    pass
                remaining = deadline - loop.time()
                if remaining <= 0:
                    break
                try:
                    items.append(await asyncio.wait_for(self._queue.get(), remaining))
                except TimeoutError:
                    break
            await self._commit_batch(items)

    async def _commit_batch(self, items: list[_Pending]) -> None:
        from metastore.postgres import _CODES, _EMPTY_COLUMNS, COMMIT_SQL

        self.batches += 1
        self.objects += len(items)
        if len(items) > 1:
            now = self.meta.now_ms()
            try:
                rows = []
                async with self.meta._require_pool().acquire() as con, con.transaction():
                    for it in items:
                        key, size, agent_id, batches = it.args
                        cols = list(zip(*batches, strict=True)) if batches else _EMPTY_COLUMNS
                        rows.append(await con.fetchrow(COMMIT_SQL, key, size, agent_id, now, *cols))
            except Exception as e:  # rolled back as a whole: one by one below
                log.info(
                    "batched commit of %d objects failed (%s); committing them one by one",
                    len(items),
                    e,
                )
                self.fallbacks += 1
            else:
                for it, row in zip(items, rows, strict=True):
                    if not it.future.done():
                        it.future.set_result(
                            [
                                CommitResult(_CODES[err], base, now, lso)
                                for err, base, lso in zip(
                                    row["errors"],
                                    row["base_offsets"],
                                    row["log_start_offsets"],
                                    strict=True,
                                )
                            ]
                        )
                return
        for it in items:
            try:
                res = await self.meta.commit_object(*it.args)
            except Exception as e:
                if not it.future.done():
                    it.future.set_exception(e)
            else:
                if not it.future.done():
                    it.future.set_result(res)


class MetastoreService:
    def __init__(self, meta: Metastore, *, batch_window_ms: float = 2.0) -> None:
        self.meta = meta
        self.methods = protocol_methods()
        self.batcher: CommitBatcher | None = None
        from metastore.postgres import PostgresMetastore

        if isinstance(meta, PostgresMetastore):
            self.batcher = CommitBatcher(meta, window_ms=batch_window_ms)

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
            if name == "commit_object" and self.batcher is not None and not kwargs:
                result = await self.batcher.commit(*args)
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
        if self.batcher is not None:
            await self.batcher.close()


async def serve(
    meta: Metastore, host: str, port: int, *, batch_window_ms: float = 2.0
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
