"""Fetch (key 1).

Behavior, as Kafka (the read side, step by step: :mod:`agent.fetch`):

- Per partition: an unknown topic or partition gets UNKNOWN_TOPIC_OR_PARTITION
  (UNKNOWN_TOPIC_ID when addressed by id, v13+), a topic the principal may not
  READ TOPIC_AUTHORIZATION_FAILED; a fetch offset outside
  ``[log_start_offset, high_watermark]`` gets OFFSET_OUT_OF_RANGE; at the high
  watermark the partition answers with an empty record set (never null).
- Records: the whole batch holding the fetch offset first, then the following
  batches within ``min(partition_max_bytes, bytes left of max_bytes)``; the
  first partition with data always gets a whole batch (KIP-74).
- read_committed: last stable offset and aborted transactions.
- high_watermark, last_stable_offset, log_start_offset; preferred_read_replica -1.
- Long-poll: with fewer than ``min_bytes`` and ``max_wait_ms > 0`` the response
  waits (as a Deferred: the connection keeps reading) until a commit to one of
  the requested partitions or ``max_wait_ms``. Any partition error answers at once.
- Fetch sessions (KIP-227, v7+): epoch 0 creates a session (id 0 when the cache
  is full), incremental requests name only changed and forgotten partitions and
  get only partitions with news; epoch -1 closes a session; an unknown session
  gets FETCH_SESSION_ID_NOT_FOUND, a wrong epoch INVALID_FETCH_SESSION_EPOCH.
  ``current_leader_epoch``, ``last_fetched_epoch``, ``rack_id`` are ignored.
- Size: ``max_bytes`` is capped by ``fetch_max_bytes`` and by what is left of
  the agent's budget of unread responses.
- A storage failure answers KAFKA_STORAGE_ERROR for that partition (retriable).

Versions: 4-18. v4 must be in range (librdkafka only produces magic 2 once it
sees Fetch v4) and so must v10 (librdkafka 2.0); v12+ are flexible, v13+ name
topics by id. v0-3 (magic 0/1 message sets) are not served.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from agent.fetch import serve
from agent.handlers.registry import handler
from kafka_protocol.messages import FetchRequest

if TYPE_CHECKING:
    from agent.broker import Broker
    from agent.connection import RequestContext

MIN_VERSION = 4
MAX_VERSION = 18


@handler(FetchRequest, min_version=MIN_VERSION, max_version=MAX_VERSION)
async def handle(broker: Broker, ctx: RequestContext, req: FetchRequest) -> Any:
    return await serve(broker, ctx, req)
