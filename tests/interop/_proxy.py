"""A Kafka-aware TCP fault proxy on loopback, run on its own event loop in a thread.

It parses frames in both directions (4-byte size prefix; the request header's
api_key and correlation_id from client->agent frames; the correlation_id of
agent->client frames) and, for selected Produce responses, closes the client's
connection (and the upstream one) INSTEAD of forwarding the response: the agent
already committed the batch, the client never learns it, and must retry it.
"""

from __future__ import annotations

import asyncio
import struct
import threading
from collections.abc import Callable
from concurrent.futures import Future

PRODUCE = 0


class FaultProxy:
    def __init__(self, *, drop_every: int = 3, max_drops: int = 12) -> None:
        self.drop_every = drop_every
        self.max_drops = max_drops
        self.upstream_port = 0
        self.port = 0
        self.produce_responses = 0  # Produce responses seen from the agent
        self.dropped = 0  # ... of which were swallowed with a connection close
        self.connections = 0
        self.api_counts: dict[int, int] = {}
        self.errors: list[str] = []
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="fault-proxy", daemon=True
        )
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self.should_drop: Callable[[int], bool] = self._default_should_drop

    def _default_should_drop(self, n: int) -> bool:
        return n % self.drop_every == 0 and self.dropped < self.max_drops

    # -- lifecycle --------------------------------------------------------------------------

    def start(self) -> FaultProxy:
        self._thread.start()
        fut: Future[asyncio.Server] = asyncio.run_coroutine_threadsafe(
            asyncio.start_server(self._handle, "127.0.0.1", 0), self._loop
        )
        self._server = fut.result(10)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    def close(self) -> None:
        async def shutdown() -> None:
            assert self._server is not None
            self._server.close()
            for w in list(self._writers):
                w.close()
            await asyncio.wait_for(self._server.wait_closed(), 5)

        if self._server is not None and self._thread.is_alive():
            try:
                asyncio.run_coroutine_threadsafe(shutdown(), self._loop).result(10)
            except Exception as e:  # pragma: no cover - best effort
                self.errors.append(f"shutdown: {e!r}")
        if self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)

    # -- the pumps ------------------------------------------------------------------------

    async def _handle(self, creader: asyncio.StreamReader, cwriter: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            ureader, uwriter = await asyncio.open_connection("127.0.0.1", self.upstream_port)
        except OSError as e:
            self.errors.append(f"upstream connect: {e!r}")
            cwriter.close()
            return
        self._writers.update((cwriter, uwriter))
        pending: dict[int, int] = {}  # correlation id -> api key
        done = asyncio.Event()

        def close_both() -> None:
            for w in (cwriter, uwriter):
                w.close()
                self._writers.discard(w)
            done.set()

        async def up() -> None:
            try:
                while True:
                    head = await creader.readexactly(4)
                    (size,) = struct.unpack(">i", head)
                    body = await creader.readexactly(size)
                    if size >= 8:
                        api_key, _ver, corr = struct.unpack_from(">hhi", body, 0)
                        pending[corr] = api_key
                        self.api_counts[api_key] = self.api_counts.get(api_key, 0) + 1
                    uwriter.write(head + body)
                    await uwriter.drain()
            except (asyncio.IncompleteReadError, ConnectionError, OSError):
                pass
            finally:
                close_both()

        async def down() -> None:
            try:
                while True:
                    head = await ureader.readexactly(4)
                    (size,) = struct.unpack(">i", head)
                    body = await ureader.readexactly(size)
                    (corr,) = struct.unpack_from(">i", body, 0)
                    api_key = pending.pop(corr, -1)
                    if api_key == PRODUCE:
                        self.produce_responses += 1
                        if self.should_drop(self.produce_responses):
                            self.dropped += 1
                            # the commit already happened; the client never hears of it
                            cwriter.transport.abort()
                            return
                    cwriter.write(head + body)
                    await cwriter.drain()
            except (asyncio.IncompleteReadError, ConnectionError, OSError):
                pass
            finally:
                close_both()

        tasks = [asyncio.ensure_future(up()), asyncio.ensure_future(down())]
        await done.wait()
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
