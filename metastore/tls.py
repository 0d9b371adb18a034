"""A TLS server context that picks up a renewed certificate without a restart.

Where it sits: under every TLS server of the project. ``floe metastore serve``
uses :class:`ServerTls` directly (:mod:`metastore.service`); the agent's Kafka
listeners and its admin port use it through
:class:`agent.security.tls.TlsContexts`, which adds the client-certificate
settings and the mTLS principal.

Every handshake starts with :attr:`ServerTls.context`, whose SNI callback checks
(at most once per ``check_every_s``) whether a file changed and, if so, builds a
fresh context and hands it to this and every later handshake; existing
connections keep their session. A half-written file keeps the old certificate
in use until a later check succeeds.
"""

from __future__ import annotations

import logging
import os
import ssl
import time
from typing import Any

log = logging.getLogger(__name__)


class ServerTls:
    """The server context from a PEM certificate (chain) and key, and optionally the
    CA that client certificates are verified against (``verify_mode``)."""

    def __init__(
        self,
        certfile: str,
        keyfile: str,
        *,
        cafile: str = "",
        verify_mode: ssl.VerifyMode = ssl.CERT_NONE,
        check_every_s: float = 1.0,
        what: str = "TLS",
    ) -> None:
        self.certfile, self.keyfile, self.cafile = certfile, keyfile, cafile
        self.verify_mode = verify_mode
        self.check_every_s = check_every_s
        self.what = what  # how log lines name this server
        self._stamp = self._file_stamp()
        self._checked = time.monotonic()
        self.current = self._build()
        self.reloads = 0
        # The context every handshake starts with: its SNI callback swaps in ``current``.
        self.context = self._build()
        self.context.sni_callback = self._on_handshake

    def _file_stamp(self) -> tuple[Any, ...]:
        out: list[Any] = []
        for path in (self.certfile, self.keyfile, self.cafile):
            if path:
                st = os.stat(path)
                out.append((st.st_mtime_ns, st.st_size, st.st_ino))
        return tuple(out)

    def _build(self) -> ssl.SSLContext:
        ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        ctx.load_cert_chain(self.certfile, self.keyfile)
        ctx.verify_mode = self.verify_mode
        if self.cafile:
            ctx.load_verify_locations(self.cafile)
        return ctx

    def maybe_reload(self, *, force: bool = False) -> bool:
        """Rebuild the context when a file changed; True when reloaded."""
        now = time.monotonic()
        if not force and now - self._checked < self.check_every_s:
            return False
        self._checked = now
        try:
            stamp = self._file_stamp()
            if stamp == self._stamp and not force:
                return False
            fresh = self._build()
        except (OSError, ssl.SSLError, ValueError) as e:
            log.warning("%s certificate reload failed, keeping the current one: %s", self.what, e)
            return False
        self._stamp = stamp
        self.current = fresh
        self.reloads += 1
        log.info("%s certificate reloaded from %s", self.what, self.certfile)
        return True

    def _on_handshake(self, sslobj: ssl.SSLObject, _name: str | None, _ctx: ssl.SSLContext) -> None:
        self.maybe_reload()
        sslobj.context = self.current
