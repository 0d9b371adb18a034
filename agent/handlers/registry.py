"""The handler registry: api_key -> (version range, request class, handler).

Each handler module registers itself with :func:`handler`; ApiVersions is built
from this table, so what we advertise is exactly what we serve.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from agent.broker import Broker
    from agent.connection import RequestContext

HandlerFunc = Callable[["Broker", "RequestContext", Any], Awaitable[Any]]


@dataclass(frozen=True, slots=True)
class HandlerSpec:
    api_key: int
    name: str
    min_version: int
    max_version: int
    request_cls: Any
    func: HandlerFunc
    # Served before SASL authentication completes.
    pre_auth: bool = False


REGISTRY: dict[int, HandlerSpec] = {}


def handler(
    request_cls: Any,
    *,
    min_version: int | None = None,
    max_version: int | None = None,
    pre_auth: bool = False,
) -> Callable[[HandlerFunc], HandlerFunc]:
    """Register ``func`` for ``request_cls`` over ``[min_version, max_version]``.

    The range defaults to everything the codec knows and is clamped to it.
    """

    def deco(func: HandlerFunc) -> HandlerFunc:
        lo = request_cls.MIN_VERSION if min_version is None else max(min_version, request_cls.MIN_VERSION)
        hi = request_cls.MAX_VERSION if max_version is None else min(max_version, request_cls.MAX_VERSION)
        api_key = request_cls.API_KEY
        if api_key in REGISTRY:
            raise RuntimeError(f"duplicate handler for api key {api_key}")
        REGISTRY[api_key] = HandlerSpec(
            api_key, request_cls.API_NAME, lo, hi, request_cls, func, pre_auth
        )
        return func

    return deco
