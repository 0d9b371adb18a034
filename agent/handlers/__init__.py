"""Kafka API handlers, one module per API; :func:`make_dispatcher` routes frames.

Importing this package registers every handler module in
:data:`agent.handlers.registry.REGISTRY`.
"""

from __future__ import annotations

import functools
import importlib
import logging
import pkgutil
from typing import TYPE_CHECKING, Any

from agent.cluster.forward import GROUP_APIS
from agent.connection import Deferred, Reply, RequestContext
from agent.handlers._isolated import PRODUCE, redirect_produce
from agent.handlers._unavailable import unavailable_response
from agent.handlers.registry import REGISTRY, HandlerSpec
from agent.metrics import METRICS
from agent.security.authorizer import may_relay
from kafka_protocol.exceptions import UnsupportedVersion
from kafka_protocol.messages import ApiVersionsResponse
from metastore.unavailable import metastore_unavailable

if TYPE_CHECKING:
    from agent.broker import Broker

log = logging.getLogger(__name__)

def _register_all() -> None:
    """Import every handler module of this package (each registers itself)."""
    for mod in pkgutil.iter_modules(__path__):
        if mod.name != "registry" and not mod.name.startswith("_"):
            importlib.import_module(f"{__name__}.{mod.name}")


_register_all()

UNSUPPORTED_VERSION = 35
API_VERSIONS_KEY = 18


def make_dispatcher(broker: Broker) -> Any:
    async def dispatch(ctx: RequestContext, frame: memoryview, body_at: int) -> Any:
        h = ctx.header
        spec: HandlerSpec | None = REGISTRY.get(h.api_key)
        auth = ctx.conn.auth if ctx.conn is not None else None  # None: relayed by a peer
        if auth is not None and not auth.may_serve(spec is not None and spec.pre_auth):
            # SASL listener, not (or no longer: KIP-368) authenticated: Kafka closes.
            if not ctx.conn.closed and not auth.failed:  # failed: closed after its answer
                log.warning(
                    "closing %s: api key %d before SASL authentication (%s)",
                    ctx.conn.peer, h.api_key, "session expired" if auth.expired else auth.state.value,
                )
                ctx.conn.close()
            return None
        if spec is None or not spec.min_version <= h.api_version <= spec.max_version:
            if h.api_key == API_VERSIONS_KEY:
                # KIP-511: answer an unknown ApiVersions version with v0 and our
                # ranges, so the client can retry with one we support.
                return Reply(
                    ApiVersionsResponse(error_code=UNSUPPORTED_VERSION, api_keys=api_version_list()),
                    0,
                )
            raise UnsupportedVersion(f"api key {h.api_key} version {h.api_version} is not supported")
        request = spec.request_cls.decode(frame[body_at:], h.api_version)
        _request_counter(spec.name).inc()
        if h.api_key in GROUP_APIS and not ctx.attrs.get("relayed"):
            # Several agents behind one address: the client cannot reach the group's
            # coordinator itself, so relay the request to it (agent.cluster.forward).
            fw = broker.cluster.forwarder
            owner = fw.target(h.api_key, request)
            # Authorize here first and answer a refused request here (the handler gives the
            # exact authorization errors); the owner authorizes again with the principal.
            if owner is not None and await may_relay(broker, ctx, h.api_key, request):

                async def local() -> Any:
                    result = await spec.func(broker, ctx, request)
                    return await result.awaitable if isinstance(result, Deferred) else result

                return Deferred(
                    fw.relay(owner, bytes(frame), ctx.client_host, local, principal=str(ctx.conn.principal))
                )
        if h.api_key == PRODUCE and broker.cluster.turns_away():  # isolated as slow (issue 43)
            if (redirect := redirect_produce(request)) is not None:
                return redirect
        try:
            result = await spec.func(broker, ctx, request)
        except Exception as e:
            if not metastore_unavailable(e):
                raise
            return unavailable_response(spec, request, h.api_key, e)
        if isinstance(result, Deferred):
            if result.then is not None:  # no coroutine: the writer calls on_error
                result.on_error = functools.partial(_unavailable_or_raise, spec, request, h.api_key)
                return result
            return Deferred(_guarded(result.awaitable, spec, request, h.api_key))
        return result

    return dispatch


def _unavailable_or_raise(spec: HandlerSpec, request: Any, api_key: int, e: Exception) -> Any:
    if not metastore_unavailable(e):
        raise e
    return unavailable_response(spec, request, api_key, e)


async def _guarded(awaitable: Any, spec: HandlerSpec, request: Any, api_key: int) -> Any:
    """A Deferred's result, or a retriable error response if the metastore went away."""
    try:
        return await awaitable
    except Exception as e:
        if not metastore_unavailable(e):
            raise
        return unavailable_response(spec, request, api_key, e)


@functools.cache
def _request_counter(api: str) -> Any:
    """The labelled child, looked up once per API rather than per request."""
    return METRICS.requests.labels(api)


def api_version_list() -> list[ApiVersionsResponse.ApiVersion]:
    return [
        ApiVersionsResponse.ApiVersion(api_key=s.api_key, min_version=s.min_version, max_version=s.max_version)
        for s in sorted(REGISTRY.values(), key=lambda s: s.api_key)
    ]
