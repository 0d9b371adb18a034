"""ApiVersions (key 18).

Behavior: lists every API in the handler registry with the version range we
serve, so what we advertise is exactly what we handle. A version we do not know
is answered in v0 with UNSUPPORTED_VERSION (see the dispatcher).

Versions: 0-4 (v3+ flexible; the response header is always v0).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agent.handlers.registry import handler
from kafka_protocol.messages import ApiVersionsRequest, ApiVersionsResponse

if TYPE_CHECKING:
    from agent.broker import Broker
    from agent.connection import RequestContext


@handler(ApiVersionsRequest, pre_auth=True)
async def handle(broker: Broker, ctx: RequestContext, req: ApiVersionsRequest) -> ApiVersionsResponse:
    from agent.handlers import api_version_list

    return ApiVersionsResponse(error_code=0, api_keys=api_version_list(), throttle_time_ms=0)
