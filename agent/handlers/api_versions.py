"""ApiVersions (key 18).

Behavior: lists every API in the handler registry with the version range we
serve, so what we advertise is exactly what we handle. A version we do not know
is answered in v0 with UNSUPPORTED_VERSION (see the dispatcher).

Features (v3+): ``transaction.version`` is supported from 0 to 2 and finalized
at ``transaction_version`` (default 2): a Java 4.x producer then uses
transactions v2 (KIP-890 part 2: EndTxn v5 bumps the epoch per transaction,
Produce v12+ and TxnOffsetCommit v5 add partitions and groups implicitly).
As Kafka does, a v3 answer omits supported features whose minimum is 0 (older
clients reject them). The finalized-features epoch is constant (1): the level
is a deployment setting, not changed at run time.

Versions: 0-4 (v3+ flexible; the response header is always v0).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agent.handlers.registry import handler
from kafka_protocol.messages import ApiVersionsRequest, ApiVersionsResponse

SupportedFeature = ApiVersionsResponse.SupportedFeatureKey
Finalized = ApiVersionsResponse.FinalizedFeatureKey
TXN_VERSION = "transaction.version"
FEATURES_EPOCH = 1

if TYPE_CHECKING:
    from agent.broker import Broker
    from agent.connection import RequestContext


@handler(ApiVersionsRequest, pre_auth=True)
async def handle(broker: Broker, ctx: RequestContext, req: ApiVersionsRequest) -> ApiVersionsResponse:
    from agent.handlers import api_version_list

    level = broker.config.transaction_version
    supported = [] if ctx.header.api_version < 4 else [SupportedFeature(name=TXN_VERSION, min_version=0, max_version=2)]
    return ApiVersionsResponse(
        error_code=0,
        api_keys=api_version_list(),
        throttle_time_ms=0,
        supported_features=supported,
        finalized_features_epoch=FEATURES_EPOCH,
        finalized_features=[Finalized(name=TXN_VERSION, max_version_level=level, min_version_level=level)],
    )
