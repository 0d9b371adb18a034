"""Authentication of Floe's internal HTTP surfaces: scoped shared secrets, one middleware.

Where it sits: in front of every route of ``floe metastore serve``
(``/rpc/{method}``, :mod:`metastore.service`) and of the agent's admin HTTP
server (``/blocks`` peer cache, ``/kafka`` group relay; :mod:`agent.server`).
Open routes (``/metrics``, ``/healthz``, ``/readyz``) pass without a
credential; the planning API (``/floe/plan/v1``, :mod:`agent.planning`) passes
too, because it authenticates a *Kafka principal* itself and checks its ACLs:
Spark drivers hold no internal credential.

Each credential grants one **scope** (issue 42), so that a secret stolen from
one place does not open the others:

* ``peer`` (``FLOE_PEER_TOKEN``): agent to agent, ``/blocks`` and ``/kafka``;
* ``metastore`` (``FLOE_METASTORE_TOKEN``): agents and the compactor to
  ``floe metastore serve``, every method but the :data:`ADMIN_METHODS`;
* ``metastore-admin`` (``FLOE_METASTORE_ADMIN_TOKEN``): every method, including
  those that change ACLs and SCRAM users or list SCRAM stored keys
  (``floe users`` / ``floe acls`` through the service).

``FLOE_INTERNAL_TOKEN`` (the single token of earlier versions) still works: it
stands for the peer and the metastore credential wherever those are not set
(never for the admin scope). Tokens travel as ``Authorization: Bearer`` and are
compared in constant time (:func:`hmac.compare_digest`) against every
configured token, so the time taken does not tell which one nearly matched. A
request without a valid credential gets 401, one whose credential lacks the
route's scope 403; either way the handler never runs and the body is never read.

Without any configured token the surface is **loopback only**: callers whose
address is 127.0.0.0/8 or ::1 get every scope (``floe dev``, tests, a
sidecar), anyone else 401. ``floe metastore serve`` refuses to start without a
token unless it binds a loopback address (:func:`require_token_or_loopback`).
Lives in ``metastore`` (which imports nothing of Floe's) so that both surfaces
share this one implementation.
"""

from __future__ import annotations

import hmac
import ipaddress
import logging
import os
from collections.abc import Awaitable, Callable, Iterable, Mapping

from aiohttp import web

log = logging.getLogger(__name__)

ENV = "FLOE_INTERNAL_TOKEN"  # legacy: peer + metastore
PEER_ENV = "FLOE_PEER_TOKEN"
METASTORE_ENV = "FLOE_METASTORE_TOKEN"
ADMIN_ENV = "FLOE_METASTORE_ADMIN_TOKEN"

PEER = "peer"
METASTORE = "metastore"
ADMIN = "metastore-admin"
ALL_SCOPES = frozenset((PEER, METASTORE, ADMIN))

OPEN_PATHS = frozenset(("/metrics", "/healthz", "/readyz"))
SCOPES_KEY = "floe_scopes"  # request[SCOPES_KEY]: the scopes the caller proved

# Metastore methods that change who may do what, or expose SCRAM stored keys.
# get_scram_credential (one user, one mechanism) stays in the metastore scope:
# agents verify SCRAM logins with it.
ADMIN_METHODS = frozenset(
    ("create_acls", "delete_acls", "put_scram_credential", "delete_scram_credential", "list_scram_credentials")
)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def env_token(name: str = ENV) -> str:
    """The token from environment variable ``name`` ('' when unset)."""
    return os.environ.get(name, "").strip()


def peer_token(explicit: str = "", legacy: str = "") -> str:
    """The peer credential: ``explicit`` (FLOE_PEER_TOKEN), else the legacy internal token."""
    return explicit or legacy


def metastore_token(explicit: str = "", legacy: str = "") -> str:
    """The metastore-service credential: ``explicit`` (FLOE_METASTORE_TOKEN), else the legacy token."""
    return explicit or legacy


def env_metastore_client_tokens() -> tuple[str, str]:
    """(token, admin token) a metastore client takes from its environment by default."""
    return metastore_token(env_token(METASTORE_ENV), env_token()), env_token(ADMIN_ENV)


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


def granted(header: str | None, tokens: Mapping[str, str]) -> frozenset[str]:
    """The scopes whose token the header carries (each token compared, none skipped)."""
    results = [(scope, check(header, tok)) for scope, tok in tokens.items() if tok]
    return frozenset(scope for scope, ok in results if ok)


def scoped_auth_middleware(
    tokens: Mapping[str, str],
    route_scope: Callable[[str], str | None],
    open_paths: Iterable[str] = OPEN_PATHS,
    public_prefixes: Iterable[str] = (),
) -> Callable[..., Awaitable[web.StreamResponse]]:
    """The middleware. ``tokens``: scope -> token; ``route_scope(path)``: the scope a
    route needs (None: any proven scope). ``open_paths`` and ``public_prefixes``
    pass unchecked (a public route authenticates its callers itself)."""
    opened = frozenset(open_paths)
    public = tuple(public_prefixes)
    configured = {s: t for s, t in tokens.items() if t}

    @web.middleware
    async def internal_auth(request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.path in opened or (public and request.path.startswith(public)):
            return await handler(request)
        if configured:
            scopes = granted(request.headers.get("Authorization"), configured)
        else:
            scopes = ALL_SCOPES if is_loopback(request.remote) else frozenset()
        need = route_scope(request.path)
        if not scopes:
            log.info(
                "refused %s %s from %s: %s",
                request.method, request.path, request.remote,
                "bad or missing internal token" if configured else "no internal token set (loopback only)",
            )  # fmt: skip
            return web.Response(status=401, text="unauthorized", headers={"WWW-Authenticate": "Bearer"})
        if need is not None and need not in scopes:
            log.info(
                "refused %s %s from %s: its credential (%s) lacks the %s scope",
                request.method, request.path, request.remote, ",".join(sorted(scopes)), need,
            )  # fmt: skip
            return web.Response(status=403, text=f"forbidden: this route needs the {need} credential")
        request[SCOPES_KEY] = scopes
        return await handler(request)

    return internal_auth


def internal_auth_middleware(
    token: str, open_paths: Iterable[str] = OPEN_PATHS
) -> Callable[..., Awaitable[web.StreamResponse]]:
    """One token for every route (the pre-scopes form, kept for callers that have one secret)."""
    return scoped_auth_middleware({PEER: token, METASTORE: token}, lambda _: None, open_paths)


class InsecureBindError(RuntimeError):
    """An internal surface asked to listen beyond loopback without a token."""


def require_token_or_loopback(token: str, host: str, what: str, env: str = ENV) -> None:
    """Refuse (one clear line) to serve ``what`` on a non-loopback ``host`` without a token."""
    if not token and not is_loopback(host):
        raise InsecureBindError(
            f"{what} on {host} needs a shared secret: set {env} (the same value on every"
            " client) or bind a loopback address (--host 127.0.0.1)"
        )


def peer_surface_middleware(
    token: str, public_prefixes: Iterable[str] = ()
) -> Callable[..., Awaitable[web.StreamResponse]]:
    """The agent's admin HTTP server: every route but the open ones and ``public_prefixes``
    (the planning API, which authenticates Kafka principals itself) needs the peer credential."""
    return scoped_auth_middleware({PEER: token}, lambda _: PEER, OPEN_PATHS, public_prefixes)
