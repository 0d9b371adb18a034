"""ListTransactions (key 66).

Behavior: the transactional ids this agent coordinates (ring owner), filtered by
state names, producer ids, ``duration_filter`` (v1+: open longer than this
many ms) and ``transactional_id_pattern`` (v2+: a Java regular expression;
Python's ``re.search`` here). Unknown state names come back in
``unknown_state_filters``. Ask every agent (as Kafka's admin client asks every
broker) for the whole list.

Versions: 0-2 (flexible).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from agent.handlers.registry import handler
from agent.security.authorizer import RT, Op, allowed
from kafka_protocol.errors import ErrorCode
from kafka_protocol.messages import ListTransactionsRequest, ListTransactionsResponse
from metastore.types import TXN_STATES, MetastoreError

if TYPE_CHECKING:
    from agent.broker import Broker
    from agent.connection import RequestContext


@handler(ListTransactionsRequest)
async def handle(broker: Broker, ctx: RequestContext, req: ListTransactionsRequest) -> ListTransactionsResponse:
    unknown = [s for s in req.state_filters if s not in TXN_STATES]
    states = [s for s in req.state_filters if s in TXN_STATES]
    if req.state_filters and not states:
        return ListTransactionsResponse(throttle_time_ms=0, error_code=0, unknown_state_filters=unknown)
    pattern = None
    if req.transactional_id_pattern:
        try:
            pattern = re.compile(req.transactional_id_pattern)
        except re.error:
            return ListTransactionsResponse(throttle_time_ms=0, error_code=ErrorCode.INVALID_REQUEST)
    try:
        recs = await broker.meta.txn_list(states, list(req.producer_id_filters))
    except MetastoreError:
        return ListTransactionsResponse(throttle_time_ms=0, error_code=ErrorCode.COORDINATOR_NOT_AVAILABLE)
    now = broker.clock.now_ms()
    out = [
        ListTransactionsResponse.TransactionState(
            transactional_id=r.transactional_id, producer_id=r.producer_id, transaction_state=r.state
        )
        for r in recs
        if broker.cluster.owns_group(r.transactional_id)
        and allowed(broker, ctx, Op.DESCRIBE, RT.TRANSACTIONAL_ID, r.transactional_id)
        and (req.duration_filter < 0 or (r.started_at_ms >= 0 and now - r.started_at_ms > req.duration_filter))
        and (pattern is None or pattern.search(r.transactional_id))
    ]
    return ListTransactionsResponse(
        throttle_time_ms=0, error_code=0, unknown_state_filters=unknown, transaction_states=out
    )
