"""``RemoteMetastore``: the :class:`~metastore.protocol.Metastore` protocol over HTTP.

Chosen by ``open_metastore("http://host:port")`` (or ``https://``): every
protocol method becomes ``POST /rpc/<method>`` to a ``floe metastore serve``
(:mod:`metastore.service`), encoded with :mod:`metastore.rpc`, so the client
needs no database credentials and new protocol methods need no code here.
Connection failures raise ``MetastoreError`` (like a lost database
connection); errors raised by the served metastore come back as the same
``MetastoreError`` subclass. Every call carries the shared internal token
(``token=``, default env ``FLOE_INTERNAL_TOKEN``) as ``Authorization: Bearer``
(:mod:`metastore.internal_auth`); a 401 raises ``MetastoreError`` saying so.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp

from metastore.internal_auth import auth_headers, env_token
from metastore.rpc import decode, decode_error, encode, protocol_methods
from metastore.types import MetastoreError


class RemoteMetastore:
    def __init__(
        self, url: str, *, timeout_s: float = 30.0, pool_size: int = 64, token: str | None = None
    ) -> None:
        self.url = url.rstrip("/")
        self._headers = {
            "Content-Type": "application/json",
            **auth_headers(env_token() if token is None else token),
        }
        self._timeout = aiohttp.ClientTimeout(total=timeout_s, sock_connect=5.0)
        self._pool_size = pool_size
        self._session: aiohttp.ClientSession | None = None
        self._methods = protocol_methods()

    async def start(self) -> RemoteMetastore:
        self._session = aiohttp.ClientSession(
            timeout=self._timeout, connector=aiohttp.TCPConnector(limit=self._pool_size)
        )
        return self

    async def call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        if self._session is None:
            await self.start()
        assert self._session is not None
        body = json.dumps({"a": encode(list(args)), "k": encode(kwargs)}, separators=(",", ":"))
        try:
            async with self._session.post(
                f"{self.url}/rpc/{method}", data=body, headers=self._headers
            ) as r:
                if r.status == 401:
                    raise MetastoreError(
                        f"metastore service {self.url} refused {method}: unauthorized"
                        " (FLOE_INTERNAL_TOKEN missing or different from the service's)"
                    )
                payload = json.loads(await r.read())
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
