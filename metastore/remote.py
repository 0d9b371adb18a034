"""``RemoteMetastore``: the :class:`~metastore.protocol.Metastore` protocol over HTTP.

Chosen by ``open_metastore("http://host:port")`` (or ``https://``): every
protocol method becomes ``POST /rpc/<method>`` to a ``floe metastore serve``
(:mod:`metastore.service`), encoded with :mod:`metastore.rpc`, so the client
needs no database credentials and new protocol methods need no code here.
Connection failures raise ``MetastoreError`` (like a lost database
connection); errors raised by the served metastore come back as the same
``MetastoreError`` subclass. Every call carries the metastore credential
(``token=``, default env ``FLOE_METASTORE_TOKEN``, else ``FLOE_INTERNAL_TOKEN``)
as ``Authorization: Bearer`` (:mod:`metastore.internal_auth`); the methods of
the admin scope (ACL and SCRAM changes, SCRAM listings) carry ``admin_token``
instead when one is given (default env ``FLOE_METASTORE_ADMIN_TOKEN``). A 401
or 403 raises ``MetastoreError`` saying which credential is missing.

TLS (issue 42): an ``https://`` URL verifies the service's certificate, and its
name against the URL's host, against ``ca_file`` (default env
``FLOE_METASTORE_CA``: a PEM bundle, e.g. a private CA), else the system trust
store. An untrusted or mismatched certificate, or a service that does not
speak TLS, fails the call at once with a ``MetastoreError`` saying so (never a
hang or a silent fallback to plain HTTP).
"""

from __future__ import annotations

import json
import os
import ssl
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp

from metastore.internal_auth import ADMIN_METHODS, auth_headers, env_metastore_client_tokens
from metastore.rpc import decode, decode_error, encode, protocol_methods
from metastore.types import MetastoreError

CA_ENV = "FLOE_METASTORE_CA"


def client_ssl_context(url: str, ca_file: str | None = None) -> ssl.SSLContext | None:
    """The context an ``https://`` service is verified with (None for ``http://``):
    ``ca_file`` (default env ``FLOE_METASTORE_CA``) or the system trust store."""
    if not url.lower().startswith("https://"):
        return None
    ca = (os.environ.get(CA_ENV, "") if ca_file is None else ca_file).strip()
    try:
        ctx = ssl.create_default_context(cafile=ca or None)
    except (OSError, ssl.SSLError) as e:
        raise MetastoreError(f"cannot load the metastore service CA bundle {ca!r} ({CA_ENV}): {e}") from e
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    return ctx


class RemoteMetastore:
    def __init__(
        self,
        url: str,
        *,
        timeout_s: float = 30.0,
        pool_size: int = 64,
        token: str | None = None,
        admin_token: str | None = None,
        ca_file: str | None = None,
    ) -> None:
        self.url = url.rstrip("/")
        self._ssl = client_ssl_context(self.url, ca_file)
        env_tok, env_admin = env_metastore_client_tokens()
        token = env_tok if token is None else token
        admin_token = env_admin if admin_token is None else admin_token
        self._headers = {"Content-Type": "application/json", **auth_headers(token)}
        self._admin_headers = {"Content-Type": "application/json", **auth_headers(admin_token or token)}
        self._timeout = aiohttp.ClientTimeout(total=timeout_s, sock_connect=5.0)
        self._pool_size = pool_size
        self._session: aiohttp.ClientSession | None = None
        self._methods = protocol_methods()

    async def start(self) -> RemoteMetastore:
        self._session = aiohttp.ClientSession(
            timeout=self._timeout,
            # ssl=True: aiohttp's default verification (system store) for https; ours when given.
            connector=aiohttp.TCPConnector(limit=self._pool_size, ssl=self._ssl if self._ssl is not None else True),
        )
        return self

    async def call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        if self._session is None:
            await self.start()
        assert self._session is not None
        body = json.dumps({"a": encode(list(args)), "k": encode(kwargs)}, separators=(",", ":"))
        try:
            async with self._session.post(
                f"{self.url}/rpc/{method}",
                data=body,
                headers=self._admin_headers if method in ADMIN_METHODS else self._headers,
            ) as r:
                if r.status == 401:
                    raise MetastoreError(
                        f"metastore service {self.url} refused {method}: unauthorized"
                        " (FLOE_METASTORE_TOKEN / FLOE_INTERNAL_TOKEN missing or different from the service's)"
                    )
                if r.status == 403:
                    raise MetastoreError(
                        f"metastore service {self.url} refused {method}: it needs the metastore"
                        " admin credential (FLOE_METASTORE_ADMIN_TOKEN)"
                    )
                payload = json.loads(await r.read())
        except aiohttp.ClientConnectorCertificateError as e:
            raise MetastoreError(
                f"metastore service {self.url}: its TLS certificate is not trusted ({e.certificate_error});"
                f" set {CA_ENV} to the CA bundle that signed it"
            ) from e
        except aiohttp.ClientSSLError as e:
            raise MetastoreError(
                f"metastore service {self.url}: TLS handshake failed ({e}); does it serve"
                f" {'https (floe metastore serve --tls-cert/--tls-key)' if self._ssl else 'plain http'}?"
            ) from e
        except (aiohttp.ClientError, OSError, TimeoutError, ValueError) as e:
            raise MetastoreError(f"metastore service {self.url} unreachable ({method}): {e}") from e
        if "error" in payload:
            raise decode_error(payload["error"])
        return decode(payload["r"])

    def __getattr__(self, name: str) -> Callable[..., Awaitable[Any]]:
        if name.startswith("_") or name not in self._methods:
            raise AttributeError(name)

        async def method(*args: Any, **kwargs: Any) -> Any:
            return await self.call(name, *args, **kwargs)

        method.__name__ = name
        return method

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def __aenter__(self) -> RemoteMetastore:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
