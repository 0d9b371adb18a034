"""Produce on an isolated agent: send the client to the partition's new leader.

Where it sits: in :func:`agent.handlers.make_dispatcher`, before the Produce
handler. Slow-agent isolation (:mod:`agent.cluster.isolation`) takes a slow
agent out of partition leadership, but a Kafka client learns new leaders only
when it refreshes its metadata -- every 5 minutes by default, or at once after
a NOT_LEADER_OR_FOLLOWER. So while this agent is isolated, a Produce (acks 1
or all) is answered NOT_LEADER_OR_FOLLOWER for every partition, nothing stored:
the client refreshes Metadata (from any agent: the isolated one leads nothing)
and retries on the leader, idempotent producers with the same sequence.

Not done when the agents share one advertised address (a load balancer): the
client could not pick the leader and would loop, so the isolated agent keeps
accepting produce there, as every agent does. acks=0 requests are accepted too
(they get no answer, so an error would only lose them).
"""

from __future__ import annotations

import logging
import time
from typing import Any

from prometheus_client import Counter

from agent.handlers._unavailable import mirror
from agent.metrics import METRICS
from kafka_protocol.errors import ErrorCode
from kafka_protocol.messages import ProduceResponse

log = logging.getLogger(__name__)

PRODUCE = 0
TURNED_AWAY = Counter(
    "floe_isolated_produce_redirects",
    "Produce requests this agent answered NOT_LEADER_OR_FOLLOWER while it was isolated as slow",
    registry=METRICS.registry,
)
_last_log = [0.0]


def redirect_produce(request: Any) -> Any | None:
    """The NOT_LEADER_OR_FOLLOWER answer to ``request``, or None to handle it (acks=0)."""
    if getattr(request, "acks", 1) == 0:
        return None
    TURNED_AWAY.inc()
    now = time.monotonic()
    if now - _last_log[0] >= 10.0:
        _last_log[0] = now
        log.warning("this agent is isolated as slow: answering Produce NOT_LEADER_OR_FOLLOWER")
    return mirror(ProduceResponse, request, int(ErrorCode.NOT_LEADER_OR_FOLLOWER))
