"""Authentication of Floe's internal HTTP surfaces: one aiohttp middleware.

Where it sits: in front of every route of ``floe metastore serve``
(``/rpc/{method}``, :mod:`metastore.service`) and of the agent's admin HTTP
server (``/blocks`` peer cache, ``/kafka`` group relay, the ``/floe/plan/v1``
planning API; :mod:`agent.server`). Only the routes named *open* (``/metrics``,
``/healthz``, ``/readyz``) pass without a credential.

The credential is a shared secret, ``internal_token`` (env
``FLOE_INTERNAL_TOKEN``; in AWS from Secrets Manager), sent as
``Authorization: Bearer <token>`` by every internal client (the agents' peer
client and group relay, :class:`~metastore.remote.RemoteMetastore`, the Spark
source's planning client) and compared in constant time
(:func:`hmac.compare_digest`). A request without it, or with another one, gets
``401`` and nothing else: the handler never runs and the body is never read.

Without a configured token the surface is **loopback only**: callers whose
address is 127.0.0.0/8 or ::1 are served (``floe dev``, tests, a sidecar),
anyone else gets 401. ``floe metastore serve`` goes further and refuses to
start without a token unless it binds a loopback address
(:func:`require_token_or_loopback`). Lives in ``metastore`` (which imports
nothing of Floe's) so that both surfaces share this one implementation.
"""

from __future__ import annotations

import hmac
import ipaddress
import logging
import os
from collections.abc import Awaitable, Callable, Iterable

from aiohttp import web

log = logging.getLogger(__name__)

ENV = "FLOE_INTERNAL_TOKEN"
OPEN_PATHS = frozenset(("/metrics", "/healthz", "/readyz"))

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def env_token() -> str:
    """The token from ``FLOE_INTERNAL_TOKEN`` ('' when unset)."""
    return os.environ.get(ENV, "").strip()


def auth_headers(token: str | None) -> dict[str, str]:
    """The header an internal client sends (none without a token)."""
    return {"Authorization": f"Bearer {token}"} if token else {}


def is_loopback(host: str | None) -> bool:
    if not host:
        return False
    try:
        return ipaddress.ip_address(host.strip("[]").split("%")[0]).is_loopback
    except ValueError:
        return host == "localhost"


def check(header: str | None, token: str) -> bool:
    """Whether an ``Authorization`` header carries ``token`` (constant time)."""
    if not token or not header:
        return False
    scheme, _, value = header.partition(" ")
    if scheme.lower() != "bearer":
        return False
    return hmac.compare_digest(value.strip().encode(), token.encode())


def internal_auth_middleware(
    token: str, open_paths: Iterable[str] = OPEN_PATHS
) -> Callable[..., Awaitable[web.StreamResponse]]:
    """The middleware: ``open_paths`` pass; every other route needs the token
    (or, with no token configured, a loopback caller)."""
    opened = frozenset(open_paths)

    @web.middleware
    async def internal_auth(request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.path in opened:
            return await handler(request)
        if token:
            ok = check(request.headers.get("Authorization"), token)
        else:
            ok = is_loopback(request.remote)
        if not ok:
            log.info(
                "refused %s %s from %s: %s",
                request.method, request.path, request.remote,
                "bad or missing internal token" if token else "no internal_token set (loopback only)",
            )  # fmt: skip
            return web.Response(
                status=401, text="unauthorized", headers={"WWW-Authenticate": "Bearer"}
            )
        return await handler(request)

    return internal_auth


class InsecureBindError(RuntimeError):
    """An internal surface asked to listen beyond loopback without a token."""


def require_token_or_loopback(token: str, host: str, what: str) -> None:
    """Refuse (one clear line) to serve ``what`` on a non-loopback ``host`` without a token."""
    if not token and not is_loopback(host):
        raise InsecureBindError(
            f"{what} on {host} needs a shared secret: set {ENV} (the same value on every agent)"
            " or bind a loopback address (--host 127.0.0.1)"
        )
