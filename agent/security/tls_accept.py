"""TLS started by the agent on an accepted TCP connection (issue 42).

Where it sits: the protocol of every accepted connection on an SSL / SASL_SSL
listener (agent.server binds those listeners without ``ssl=``); below it the
TCP transport, above it the :class:`~agent.connection.KafkaConnection`, created
only once the handshake has completed and fed plaintext through
:class:`TlsTransport`.

Why not ``create_server(ssl=...)``: there the connection reaches our code only
after its handshake, so ``max_connections`` / ``max_connections_per_ip``
counted nothing while a client held a handshake open (60 s by default), and
every such connection cost an SSL protocol with its 256 KiB read buffer.
Here, like Kafka:

* the connection is counted (:class:`~agent.security.limits.ConnectionLimits`)
  at accept, before a byte of TLS; past the per-address cap it is closed at
  once, at the total cap it evicts the oldest connection not authenticated yet;
* nothing TLS is allocated until the client sends its first byte (all
  connections read into one shared buffer, consumed at once), and at most
  ``max_pending_tls_handshakes`` handshakes are under way (the oldest goes);
* the handshake must complete within ``ssl_handshake_timeout_ms`` of accept;
* writes are encrypted at once into the TCP transport, so its
  ``get_write_buffer_size`` and pause/resume_writing are the whole truth of
  what a non-reading client leaves queued (the response budget holds over TLS).
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from collections.abc import Callable, Iterable
from typing import Any

from agent.security.limits import EXPIRED, ConnectionLimits

log = logging.getLogger(__name__)

_READ_BUF = memoryview(bytearray(256 * 1024))  # shared: each read is copied into a BIO at once


class PendingHandshakes:
    """TLS handshakes under way (the client has sent its first byte), oldest first.

    Each costs ~45 KiB (OpenSSL's state and buffers) while connections that
    sent nothing cost ~3 KiB; past ``limit`` the oldest is closed: a real
    client completes its handshake in milliseconds, so only those that
    never do are old enough to go (10,000 of them held 440 MiB)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._open: dict[TlsAccept, None] = {}

    def add(self, tls: TlsAccept) -> None:
        while len(self._open) >= self.limit:
            oldest = next(iter(self._open))
            del self._open[oldest]
            oldest.evict_handshake()
        self._open[tls] = None

    def discard(self, tls: TlsAccept) -> None:
        self._open.pop(tls, None)

    def __len__(self) -> int:
        return len(self._open)


class TlsTransport(asyncio.Transport):
    """The plaintext side handed to the application protocol."""

    def __init__(self, tls: TlsAccept) -> None:
        super().__init__()
        self._tls = tls

    def write(self, data: Any) -> None:
        self._tls.encrypt((data,))

    def writelines(self, list_of_data: Any) -> None:
        self._tls.encrypt(list_of_data)

    def get_write_buffer_size(self) -> int:
        return self._tls.queued()

    def get_write_buffer_limits(self) -> tuple[int, int]:
        return self._tls.raw.get_write_buffer_limits()

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        self._tls.raw.set_write_buffer_limits(high, low)

    def pause_reading(self) -> None:
        self._tls.set_app_reading(False)

    def resume_reading(self) -> None:
        self._tls.set_app_reading(True)

    def is_reading(self) -> bool:
        return not self._tls.app_paused

    def close(self) -> None:
        self._tls.close()

    def abort(self) -> None:
        self._tls.raw.abort()

    def is_closing(self) -> bool:
        return self._tls.closing or bool(self._tls.raw.is_closing())

    def can_write_eof(self) -> bool:
        return False

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        obj = self._tls.sslobj
        if name == "ssl_object":
            return obj
        if name == "peercert":
            return obj.getpeercert() if obj is not None else default
        if name == "cipher":
            return obj.cipher() if obj is not None else default
        if name == "sslcontext":
            return obj.context if obj is not None else default
        return self._tls.raw.get_extra_info(name, default)


class TlsAccept(asyncio.BufferedProtocol):
    """One accepted connection of a TLS listener: count, handshake, then relay."""

    def __init__(
        self,
        context: ssl.SSLContext,
        make_app: Callable[[float], asyncio.BufferedProtocol],
        *,
        limits: ConnectionLimits | None,
        handshake_timeout_s: float,
        clock: Callable[[], float],
        pending: PendingHandshakes | None = None,
    ) -> None:
        self._pending = pending
        self._context = context
        self._make_app = make_app  # called with the accept time once the handshake completed
        self._limits = limits
        self._handshake_timeout_s = handshake_timeout_s
        self._clock = clock
        self.raw: Any = None
        self.ip = ""
        self._admitted = False
        self._timer: asyncio.TimerHandle | None = None
        self.accepted_at = 0.0
        self.sslobj: ssl.SSLObject | None = None
        self._incoming = ssl.MemoryBIO()
        self._outgoing = ssl.MemoryBIO()
        self.app: asyncio.BufferedProtocol | None = None
        self.app_paused = False
        self._raw_write_paused = False
        self.closing = False

    # -- TCP side ---------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.raw = transport
        self.accepted_at = self._clock()
        peer = transport.get_extra_info("peername")
        self.ip = peer[0] if isinstance(peer, tuple) else str(peer)
        if self._limits is not None:
            if not self._limits.admit(self.ip):
                self.closing = True
                self.raw.abort()
                return
            self._admitted = True
            self._limits.add_pending(self, self._evict)
        self._timer = asyncio.get_running_loop().call_later(self._handshake_timeout_s, self._handshake_expired)

    def get_buffer(self, sizehint: int) -> memoryview:
        return _READ_BUF

    def buffer_updated(self, nbytes: int) -> None:
        if self.closing:
            return
        if self.sslobj is None:  # the first byte: only now does TLS cost anything
            self.sslobj = self._context.wrap_bio(self._incoming, self._outgoing, server_side=True)
            if self._pending is not None:
                self._pending.add(self)
        self._incoming.write(_READ_BUF[:nbytes])
        if self.app is None:
            self._handshake()
        else:
            self._deliver()

    def eof_received(self) -> bool | None:
        if self.app is not None:
            self.app.eof_received()
        return False  # close

    def connection_lost(self, exc: Exception | None) -> None:
        self.closing = True
        if self._pending is not None:
            self._pending.discard(self)
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._admitted and self._limits is not None:
            self._admitted = False
            self._limits.release(self.ip)
            self._limits.forget(self)
        if self.app is not None:
            self.app.connection_lost(exc)

    def pause_writing(self) -> None:
        self._raw_write_paused = True
        if self.app is not None:
            self.app.pause_writing()

    def resume_writing(self) -> None:
        self._raw_write_paused = False
        if self.app is not None:
            self.app.resume_writing()

    # -- TLS ----------------------------------------------------------------------------

    def _evict(self) -> bool:
        """Closed to make room at max_connections while not authenticated (ConnectionLimits)."""
        if self.closing:
            return False
        if self.app is None:  # still in its handshake
            self.closing = True
            self.raw.abort()
            return True
        if getattr(self.app, "pre_auth", False):  # SASL not done yet
            self.app.close()  # type: ignore[attr-defined]
            return True
        return False

    def evict_handshake(self) -> None:
        """Closed to make room for a newer handshake (PendingHandshakes)."""
        if not self.closing:
            EXPIRED.labels("tls_handshakes_pending").inc()
            self.closing = True
            self.raw.abort()

    def _handshake_expired(self) -> None:
        self._timer = None
        if self.app is None and not self.closing:
            EXPIRED.labels("tls_handshake").inc()
            log.debug("closing %s: TLS handshake not completed within %.0f ms (ssl_handshake_timeout_ms)",
                     self.ip, self._handshake_timeout_s * 1000)  # fmt: skip
            self.closing = True
            self.raw.abort()

    def _handshake(self) -> None:
        assert self.sslobj is not None
        try:
            self.sslobj.do_handshake()
        except ssl.SSLWantReadError:
            self._flush()
            return
        except (ssl.SSLError, OSError) as e:
            log.debug("TLS handshake with %s failed: %s", self.ip, e)
            self._flush()  # the alert, if any
            self.closing = True
            self.raw.close()
            return
        self._flush()  # the server's last flight, session tickets
        if self._pending is not None:
            self._pending.discard(self)
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self.app = self._make_app(self.accepted_at)
        self.app.connection_made(TlsTransport(self))
        if self._raw_write_paused:
            self.app.pause_writing()
        self._deliver()  # application data that came with the client's Finished

    def _deliver(self) -> None:
        """Decrypt what arrived into the application's buffers while it reads."""
        assert self.sslobj is not None and self.app is not None
        while not self.app_paused and not self.closing:
            buf = memoryview(self.app.get_buffer(-1))
            if not buf.nbytes:
                break
            try:
                n = int(self.sslobj.read(buf.nbytes, buf))
            except ssl.SSLWantReadError:
                break
            except ssl.SSLZeroReturnError:  # close_notify
                self._closed_by_peer()
                return
            except ssl.SSLError as e:
                log.info("closing %s: TLS error: %s", self.ip, e)
                self.closing = True
                self.raw.abort()
                return
            if n == 0:  # (the ssl module reads a received close_notify as 0 bytes)
                self._closed_by_peer()
                return
            self.app.buffer_updated(n)
        self._flush()  # key updates and other post-handshake messages

    def _closed_by_peer(self) -> None:
        """The client sent close_notify: answer with ours, then close. A client that
        waits for it (asyncio's SSL transport, so aiokafka) otherwise sits out its
        ``ssl_shutdown_timeout`` (30 s) on every close."""
        self.close()

    def set_app_reading(self, on: bool) -> None:
        if on == (not self.app_paused) or self.raw is None:
            return
        self.app_paused = not on
        if on:
            self.raw.resume_reading()
            # Records already received (in the BIO or decrypted inside the SSL object).
            asyncio.get_running_loop().call_soon(self._resume_deliver)
        else:
            self.raw.pause_reading()

    def _resume_deliver(self) -> None:
        if self.app is not None and not self.closing and not self.app_paused:
            self._deliver()

    def encrypt(self, parts: Iterable[Any]) -> None:
        if self.closing or self.sslobj is None:
            return
        for data in parts:
            if len(data):
                self.sslobj.write(data)  # a MemoryBIO never blocks: all of it, now
        self._flush()

    def _flush(self) -> None:
        if self._outgoing.pending and not self.raw.is_closing():
            self.raw.write(self._outgoing.read())

    def queued(self) -> int:
        return int(self.raw.get_write_buffer_size()) + self._outgoing.pending

    def close(self) -> None:
        if self.closing:
            return
        self.closing = True
        if self.sslobj is not None and self.app is not None:
            try:
                self.sslobj.unwrap()  # close_notify; we do not wait for the client's
            except (ssl.SSLError, OSError):
                pass
            self._flush()
        self.raw.close()  # sends what is buffered first
