"""One Kafka client connection: framing, dispatch, and in-order responses.

Bytes arrive through ``asyncio.BufferedProtocol`` straight into the frame's own
buffer (no intermediate copies for large produce requests). Frames are
dispatched one at a time in arrival order; a handler either answers at once or
returns a :class:`Deferred` (produce waiting for its flush, fetch long-polling),
so the connection can go on reading. A writer task sends responses strictly in
request order, as Kafka clients require. ``acks=0`` produce answers ``None``:
nothing is sent.

The connection reports its produce requests to the batcher through its
:class:`~agent.produce.autobatch.ProduceFlow` (adaptive sealing).

Back-pressure: reading pauses while too many responses are pending or the
transport's write buffer is full (the client is not taking its responses: like
Kafka muting a channel, nothing more is read or built for it until it does).

Limits (issue 15, :mod:`agent.security.limits`): a connection over
``max_connections`` / ``max_connections_per_ip`` is closed when accepted; a
frame buffer grows as bytes arrive (a declared length costs at most 64 KiB
until the bytes come), and a frame is counted in the shared budget while it is
read: over 64 KiB it is reserved whole first, or the connection stops reading
until it can be (issue 42); before authentication on a listener that requires it
(``pre_auth``, set by the auth lane) frames are capped at
``max_pre_auth_frame_bytes``; the writer waits below the shared
:class:`~agent.security.limits.ResponseBudget` before building a response and
counts what a non-reading client leaves in the transport, handing a large
response over a slice at a time (over TLS, :mod:`agent.security.tls_accept`
encrypts into the TCP transport at once, so its buffer is the whole truth);
:meth:`expired` tells the deadline sweeper about idle connections and partial
requests.
"""

from __future__ import annotations

import asyncio
import logging
import struct
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from agent.produce.autobatch import ProduceFlow
from agent.security.limits import ConnectionLimits, ResponseBudget
from agent.security.principal import ANONYMOUS, KafkaPrincipal
from kafka_protocol.exceptions import DecodeError, ProtocolError
from kafka_protocol.framing import RequestHeader, encode_response, parse_request_header

log = logging.getLogger(__name__)

_SIZE = struct.Struct(">i")
_MIN_CHUNK = 64 * 1024
# Frames up to this size get their whole buffer at once (one allocation, no
# regrowth copies); larger declared sizes grow as bytes actually arrive, so a
# client claiming 100 MiB costs us at most this much before it sends it. 64 KiB,
# not more: 3,000 connections each declaring 1 MiB and sending nothing used to
# cost 3 GiB at 1 MiB (issue 15); now 3,000 x 64 KiB.
_EAGER_ALLOC = _MIN_CHUNK
_NOTHING = object()
# Bytes handed to a transport at once when a response is large or the client
# is slow (:meth:`KafkaConnection._send`).
_WRITE_SLICE = 1024 * 1024
# After a final response (CloseAfter: a failed SASL exchange) the connection stays
# open this long before it closes: kafka-python 3.0 drops the bytes of a read that
# also sees the end of the stream, so a response and a FIN that arrive together
# reach that client as "socket disconnected" instead of the authentication error.
CLOSE_LINGER_S = 0.1


class Reply:
    """A response to encode at a version other than the request's (ApiVersions
    answers an unsupported version with a v0 response)."""

    __slots__ = ("response", "version")

    def __init__(self, response: Any, version: int) -> None:
        self.response = response
        self.version = version


class RawFrame:
    """A complete response frame (size prefix included), written as is: the
    answer of the agent a group request was relayed to (agent.cluster.forward)."""

    __slots__ = ("data",)

    def __init__(self, data: bytes) -> None:
        self.data = data


class CloseAfter:
    """A response after which the connection is closed (failed authentication)."""

    __slots__ = ("response",)

    def __init__(self, response: Any) -> None:
        self.response = response


class Deferred:
    """A response that will be ready later; the writer awaits it in order.

    ``Deferred(future, then)``: the response is ``then(future.result())``. The
    writer calls ``then`` directly once the future is done, so a produce request
    costs no coroutine, and every response already complete goes out in the
    same write. :attr:`awaitable` is still the one way to await any Deferred.
    """

    __slots__ = ("_aw", "on_error", "then")

    def __init__(self, awaitable: Awaitable[Any], then: Callable[[Any], Any] | None = None) -> None:
        self._aw = awaitable
        self.then = then
        # With ``then``: called with the exception if the future or ``then`` fails;
        # returns the response to send instead, or raises.
        self.on_error: Callable[[Exception], Any] | None = None

    @property
    def awaitable(self) -> Awaitable[Any]:
        return self._aw if self.then is None else self._resolve()

    async def _resolve(self) -> Any:
        assert self.then is not None
        try:
            return self.then(await self._aw)
        except Exception as e:
            if self.on_error is None:
                raise
            return self.on_error(e)

    def ready(self) -> bool:
        """The response can be had now, without awaiting (:meth:`result_now`)."""
        return self.then is not None and self._aw.done()  # type: ignore[attr-defined]

    def result_now(self) -> Any:
        assert self.then is not None
        try:
            return self.then(self._aw.result())  # type: ignore[attr-defined]
        except Exception as e:
            if self.on_error is None:
                raise
            return self.on_error(e)


@dataclass(slots=True)
class RequestContext:
    """What a handler knows about the request besides its body."""

    header: RequestHeader
    conn: KafkaConnection
    client_host: str
    attrs: dict[str, Any] = field(default_factory=dict)

    @property
    def client_id(self) -> str:
        return self.header.client_id or ""

    @property
    def listener_name(self) -> str | None:
        """The listener (security protocol) the request arrived on; None for an
        in-process connection without one."""
        lst = self.conn.listener if self.conn is not None else None
        return lst.name if lst is not None else None

    @property
    def principal(self) -> KafkaPrincipal:
        """Who sent this request: set on the connection by authentication."""
        return self.conn.principal


Dispatcher = Callable[[RequestContext, memoryview, int], Awaitable[Any]]


class KafkaConnection(asyncio.BufferedProtocol):
    """Protocol instance for one TCP connection."""

    def __init__(
        self,
        dispatch: Dispatcher,
        *,
        max_frame_bytes: int,
        max_inflight: int = 256,
        on_close: Callable[[KafkaConnection], None] | None = None,
        limits: ConnectionLimits | None = None,
        budget: ResponseBudget | None = None,
        max_pre_auth_frame_bytes: int | None = None,
        clock: Callable[[], float] = time.monotonic,
        on_connect: Callable[[KafkaConnection, asyncio.BaseTransport], None] | None = None,
    ) -> None:
        self._dispatch = dispatch
        self._max_frame = max_frame_bytes
        self._max_pre_auth_frame = min(max_frame_bytes, max_pre_auth_frame_bytes or max_frame_bytes)
        self._limits = limits
        self._admitted = False
        self._budget = budget
        self._held = 0  # bytes of ours counted in the budget (left unread in the transport)
        self._stalled_since = 0.0
        self._clock = clock
        self.last_active = clock()
        # The authentication deadline counts from the accept (agent.security.limits);
        # a TLS listener's connection is created after its handshake and told when.
        self.accepted_at = self.last_active
        self._partial_since: float | None = None  # when the frame being read started
        self._stopped = False
        self._max_inflight = max_inflight
        self._on_close = on_close
        self._on_connect = on_connect
        self._size_buf = bytearray(4)
        self._size_filled = 0
        self._frame: bytearray | None = None
        self._frame_size = 0
        self._frame_filled = 0
        self._frame_counted = 0  # the frame being read, counted in the budget (its declared size)
        self._waiting_room = False  # reading paused until the budget has room for the frame
        self._frames: deque[bytearray] = deque()
        self._frame_ready = asyncio.Event()
        self._out: asyncio.Queue[tuple[RequestHeader, Any] | None] = asyncio.Queue()
        self._pending = 0
        self._all_answered = asyncio.Event()
        self._all_answered.set()
        self._transport: asyncio.Transport | None = None
        self._reading_paused = False
        self._can_write = asyncio.Event()
        self._can_write.set()
        self._closed = False
        self._tasks: list[asyncio.Task[None]] = []
        self.peer = ""
        self._client_host = ""
        self.attrs: dict[str, Any] = {}
        # Authenticated identity (TLS client certificate or SASL); ANONYMOUS until then.
        self.principal: KafkaPrincipal = ANONYMOUS
        # True while a listener that requires authentication has not seen it
        # succeed: frames are then capped at max_pre_auth_frame_bytes.
        self.pre_auth = False
        # The listener's security state (agent.security): the SASL session on a
        # SASL listener, checked by the dispatcher; None on PLAINTEXT/SSL.
        self.auth: Any = None
        self.listener: Any = None
        # What the batcher learns about this connection's produce requests
        # (in flight, learned in-flight limit) for adaptive sealing.
        self.produce_flow = ProduceFlow()

    # -- asyncio protocol callbacks -------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]  # uvloop's is not a subclass
        peer = transport.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)
        self._client_host = self.peer.rsplit(":", 1)[0]
        self.last_active = self._clock()
        if self._limits is not None:
            if not self._limits.admit(self.client_ip):
                self._closed = True
                transport.close()
                return
            self._admitted = True
        if self._on_connect is not None:
            self._on_connect(self, transport)  # TLS: the client certificate's principal
        loop = asyncio.get_running_loop()
        self._tasks = [
            loop.create_task(self._dispatch_loop(), name=f"kafka-dispatch {self.peer}"),
            loop.create_task(self._write_loop(), name=f"kafka-write {self.peer}"),
        ]

    def get_buffer(self, sizehint: int) -> memoryview:
        if self._frame is None:
            return memoryview(self._size_buf)[self._size_filled :]
        filled = self._frame_filled
        remaining = self._frame_size - filled
        if len(self._frame) - filled < min(remaining, _MIN_CHUNK // 2):
            # Grow with the bytes that arrived, up to the declared size: a frame never
            # holds more than 64 KiB beyond twice what the client sent (a client that
            # declares 100 MiB and sends 10 bytes costs 64 KiB, not 100 MiB; growing
            # from the buffer's size instead gave 128 KiB after one byte), and at
            # least 32 KiB arrive between copies (a client trickling bytes cannot make
            # us copy the frame for each one). A new buffer rather than extend(): the
            # view handed out last time may still be alive, and an exported bytearray
            # cannot be resized. (The declared size is reserved in the budget.)
            new_len = min(self._frame_size, max(2 * filled, filled + _MIN_CHUNK))
            grown = bytearray(new_len)
            grown[:filled] = memoryview(self._frame)[:filled]
            self._frame = grown
        return memoryview(self._frame)[self._frame_filled : min(len(self._frame), self._frame_size)]

    def _wait_for_room(self) -> None:
        """The budget refused the rest of the frame: read nothing more until
        :meth:`ResponseBudget.sub` grants it (:meth:`_room_freed`)."""
        assert self._budget is not None
        self._set_reading(False)
        self._waiting_room = True
        self._budget.wait(self, self._room_freed)

    def _room_freed(self) -> None:
        """The budget granted the rest of the frame (:meth:`ResponseBudget.sub`)."""
        self._waiting_room = False
        if self._closed or self._budget is None:
            return
        if self._frame is not None:
            self._budget.add(self._frame_size)
            self._frame_counted = self._frame_size
        if self._pending < self._max_inflight and self._can_write.is_set():
            self._set_reading(True)

    def _release_frame(self) -> None:
        if self._frame_counted and self._budget is not None:
            n, self._frame_counted = self._frame_counted, 0
            self._budget.sub(n)

    @property
    def response_budget(self) -> ResponseBudget | None:
        return self._budget

    @property
    def client_ip(self) -> str:
        return self.peer.rsplit(":", 1)[0]

    def buffer_updated(self, nbytes: int) -> None:
        now = self.last_active = self._clock()
        if self._partial_since is None:
            self._partial_since = now
        if self._frame is None:
            self._size_filled += nbytes
            if self._size_filled < 4:
                return
            size = _SIZE.unpack(self._size_buf)[0]
            self._size_filled = 0
            cap = self._max_pre_auth_frame if self.pre_auth else self._max_frame
            if size < 0 or size > cap:
                log.warning(
                    "closing %s: frame size %d outside [0, %d]%s",
                    self.peer, size, cap, " before authentication" if self.pre_auth else "",
                )  # fmt: skip
                self.close()
                return
            self._frame_size = size
            self._frame_filled = 0
            if self._budget is None or size == 0 or (size <= _EAGER_ALLOC and self._budget.small_frames_pass):
                # Up to 64 KiB: the whole buffer at once, granted (counted) unless the
                # budget is twice over (then max_connections x 64 KiB would be unbounded).
                self._frame = bytearray(size if size <= _EAGER_ALLOC else _MIN_CHUNK)
                if self._budget is not None:
                    self._budget.add(size)
                    self._frame_counted = size
            elif size > _EAGER_ALLOC and self._budget.try_reserve(size):
                # Larger: the whole declared size is reserved now, or this connection
                # stops reading, holding no buffer, until the budget has room (issue
                # 42: 3,000 clients each sending half of a 1 MiB frame held 1.5 GB).
                # The buffer itself still grows only as bytes arrive (get_buffer).
                self._frame = bytearray(_MIN_CHUNK)
                self._frame_counted = size
            else:
                self._frame = bytearray(0)  # get_buffer grows it once granted
                self._wait_for_room()
            if size == 0:
                self._complete_frame()
            return
        self._frame_filled += nbytes
        if self._frame_filled == self._frame_size:
            self._complete_frame()

    def _complete_frame(self) -> None:
        assert self._frame is not None
        frame = self._frame
        if len(frame) != self._frame_size:
            frame = frame[: self._frame_size]
        self._frame = None
        self._release_frame()  # complete: produce memory is max_buffered_bytes' business
        self._partial_since = None
        self._frames.append(frame)
        self._pending += 1
        self._all_answered.clear()
        self._frame_ready.set()
        if self._pending >= self._max_inflight:
            self._set_reading(False)

    def _set_reading(self, on: bool) -> None:
        if self._transport is None or self._closed:
            return
        if on and self._reading_paused and not self._stopped and not self._waiting_room:
            self._reading_paused = False
            self._transport.resume_reading()
            if self._partial_since is not None:  # the request deadline counts while we read
                self._partial_since = self._clock()
        elif not on and not self._reading_paused:
            self._reading_paused = True
            self._transport.pause_reading()

    def expired(self, now: float, idle_s: float, request_s: float) -> str | None:
        """Why this connection is past a deadline at ``now`` (None: it is not):
        a request started ``request_s`` ago and still incomplete while we were
        reading; responses left unread for ``request_s`` while the clients
        together leave more than the response budget unread; or nothing read,
        written or pending for ``idle_s``."""
        if self._closed:
            return None
        if self._partial_since is not None and not self._reading_paused and now - self._partial_since > request_s:
            return f"request not completed within {request_s * 1000:.0f} ms (request_timeout_ms)"
        if (
            self._held
            and self._budget is not None
            and self._budget.exceeded
            and now - self._stalled_since > request_s
        ):
            return f"{self._held} response bytes unread for {request_s * 1000:.0f} ms over queued_max_request_bytes"
        if self._pending == 0 and not self._frames and now - self.last_active > idle_s:
            return f"idle for {idle_s * 1000:.0f} ms (connections_max_idle_ms)"
        return None

    def eof_received(self) -> bool | None:
        return None  # close the transport

    def connection_lost(self, exc: Exception | None) -> None:
        self._closed = True
        if self._admitted and self._limits is not None:
            self._admitted = False
            self._limits.release(self.client_ip)
        self._release_held()
        self._frame = None
        self._release_frame()
        if self._waiting_room and self._budget is not None:
            self._waiting_room = False
            self._budget.cancel_wait(self)
        self._all_answered.set()
        # Responses that will never be written: close their coroutines so they
        # do not warn "never awaited" (their work, e.g. a commit, is unaffected).
        while not self._out.empty():
            item = self._out.get_nowait()
            if item is not None and isinstance(item[1], Deferred) and item[1].then is None:
                close = getattr(item[1].awaitable, "close", None)
                if close is not None:
                    close()
        self._frame_ready.set()
        self._can_write.set()
        self._out.put_nowait(None)
        for t in self._tasks:
            if t is not asyncio.current_task():
                t.cancel()
        if self._on_close:
            self._on_close(self)

    def pause_writing(self) -> None:
        # The client is not taking its responses: read (and build) nothing more for it.
        self._can_write.clear()
        self._set_reading(False)

    def resume_writing(self) -> None:
        self._can_write.set()
        self._release_held()
        if self._pending < self._max_inflight:
            self._set_reading(True)

    def _release_held(self) -> None:
        if self._held and self._budget is not None:
            self._budget.sub(self._held)
        self._held = 0

    # -- request processing ---------------------------------------------------------

    async def wait_answered(self, timeout: float) -> None:  # noqa: ASYNC109
        """Wait (bounded) until every request read so far has been answered."""
        try:
            await asyncio.wait_for(self._all_answered.wait(), timeout)
        except TimeoutError:
            pass

    def stop_reading(self) -> None:
        self._set_reading(False)
        self._stopped = True

    def close(self) -> None:
        if self._transport is not None and not self._closed:
            self._closed = True
            self._transport.close()

    @property
    def closed(self) -> bool:
        return self._closed

    async def _dispatch_loop(self) -> None:
        try:
            while not self._closed:
                if not self._frames:
                    self._frame_ready.clear()
                    await self._frame_ready.wait()
                    continue
                frame = self._frames.popleft()
                mv = memoryview(frame)
                try:
                    header, body_at = parse_request_header(mv)
                except (DecodeError, ProtocolError) as e:
                    log.warning("closing %s: bad request header: %s", self.peer, e)
                    self.close()
                    return
                ctx = RequestContext(header=header, conn=self, client_host=self._client_host)
                try:
                    result = await self._dispatch(ctx, mv, body_at)
                except (DecodeError, ProtocolError) as e:
                    log.warning(
                        "closing %s: bad %s v%d request: %s",
                        self.peer, header.api_key, header.api_version, e,
                    )
                    self.close()
                    return
                except Exception:
                    log.exception(
                        "closing %s: handler for api %d v%d failed",
                        self.peer, header.api_key, header.api_version,
                    )
                    self.close()
                    return
                self._out.put_nowait((header, result))
        except asyncio.CancelledError:
            pass

    async def _write_loop(self) -> None:
        try:
            carry: Any = _NOTHING  # taken from the queue, not ready yet: awaited next
            while True:
                if carry is _NOTHING:
                    item = await self._out.get()
                else:
                    item, carry = carry, _NOTHING
                if item is None or self._closed:
                    return
                header, result = item
                if isinstance(result, Deferred):
                    try:
                        result = result.result_now() if result.ready() else await result.awaitable
                    except Exception:
                        log.exception("closing %s: deferred response failed", self.peer)
                        self.close()
                        return
                out: list[bytes | memoryview] = []
                close_after = self._answered(header, result, out)
                # Every following response that is already complete goes out in the
                # same write (a commit answers a whole segment's requests at once).
                while not close_after and not self._out.empty():
                    nxt = self._out.get_nowait()
                    if nxt is None or (isinstance(nxt[1], Deferred) and not nxt[1].ready()):
                        carry = nxt
                        break
                    header, result = nxt
                    if isinstance(result, Deferred):
                        try:
                            result = result.result_now()
                        except Exception:
                            log.exception("closing %s: deferred response failed", self.peer)
                            self.close()
                            return
                    close_after = self._answered(header, result, out)
                if self._closed or self._transport is None:
                    return
                if out and not await self._send(out):
                    return
                if close_after:
                    # The transport sends what it buffered first; the FIN follows later.
                    asyncio.get_running_loop().call_later(CLOSE_LINGER_S, self.close)
                    return
                if not self._can_write.is_set():
                    self._hold(0)
                    await self._can_write.wait()
        except asyncio.CancelledError:
            pass

    async def _send(self, out: list[bytes | memoryview]) -> bool:
        """Hand ``out`` to the transport; False when the connection closed meanwhile.

        At most ``_WRITE_SLICE`` bytes go in after the transport says its buffer
        is full (pause_writing): the rest waits here, referenced, not copied, and
        counted in the budget with what the transport holds until the client
        reads. Over TLS the transport encrypts at once into the TCP transport
        below, so a 55 MB response to a client that never reads costs one slice
        there, not the whole response encrypted (issue 42: ~160 MB each)."""
        assert self._transport is not None
        total = 0
        for b in out:
            total += len(b)
        if total <= _WRITE_SLICE and self._can_write.is_set():  # the usual case: one write
            self._transport.writelines(out)
            self.last_active = self._clock()
            return True
        i = 0
        while i < len(out):
            if self._closed:
                return False
            if not self._can_write.is_set():
                self._hold(total)
                await self._can_write.wait()
                if self._closed or self._transport is None:
                    return False
            batch: list[bytes | memoryview] = []
            n = 0
            while i < len(out) and n < _WRITE_SLICE:
                b = out[i]
                room = _WRITE_SLICE - n
                if len(b) > room:
                    mv = memoryview(b)
                    batch.append(mv[:room])
                    out[i] = mv[room:]
                    n += room
                else:
                    batch.append(b)
                    n += len(b)
                    i += 1
            self._transport.writelines(batch)
            total -= n
            self.last_active = self._clock()
        return True

    def _hold(self, unsent: int) -> None:
        """Count what a client that stopped reading leaves in memory: ``unsent``
        bytes still here and the transport's buffer (TLS: the TCP one below)."""
        if self._budget is None or self._transport is None:
            return
        n = unsent + self._transport.get_write_buffer_size()
        if n != self._held:
            if not self._held:
                self._stalled_since = self.last_active
            if n > self._held:
                self._budget.add(n - self._held)
            else:
                self._budget.sub(self._held - n)
            self._held = n

    def _answered(self, header: RequestHeader, result: Any, out: list[bytes | memoryview]) -> bool:
        """Account for one answered request and append its encoded response to
        ``out``; True when the connection is to be closed after it (CloseAfter)."""
        self._pending -= 1
        if self._pending == 0 and not self._frames:
            self._all_answered.set()
        if self._reading_paused and self._pending < self._max_inflight // 2 and self._can_write.is_set():
            self._set_reading(True)
        close_after = isinstance(result, CloseAfter)
        if close_after:
            result = result.response
        if result is None:  # acks=0
            return close_after
        if isinstance(result, Reply):
            out += encode_response(header.correlation_id, result.response, result.version)
        elif isinstance(result, RawFrame):  # relayed: the owner's response frame
            out.append(result.data)
        else:
            out += encode_response(header.correlation_id, result, header.api_version)
        return close_after
