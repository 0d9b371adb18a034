"""Step 2 of a Fetch: the request's topics -> one :class:`~agent.fetch.model.Want` per partition.

Where it sits: after :mod:`agent.fetch.request` (which form the request is) and
before :mod:`agent.fetch.session` (which keeps the wants of a session). Each
requested partition is resolved against the topic table (by name, or by id from
v13) and READ on its topic is checked, as Kafka:

- a topic the principal may not READ: TOPIC_AUTHORIZATION_FAILED (a name is
  checked whether or not the topic exists, so a refusal leaks nothing; an id
  only once it is known);
- an unknown topic: UNKNOWN_TOPIC_OR_PARTITION (UNKNOWN_TOPIC_ID by id);
- a partition outside the topic: UNKNOWN_TOPIC_OR_PARTITION.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agent.fetch.model import Want
from agent.security.authorizer import RT, Op, allowed
from kafka_protocol.errors import ErrorCode
from kafka_protocol.messages._runtime import ZERO_UUID
from metastore.topic_config import compacted

if TYPE_CHECKING:
    from agent.connection import RequestContext
    from agent.fetch.host import FetchHost
    from kafka_protocol.messages import FetchRequest
    from metastore import TopicInfo


async def resolve(host: FetchHost, ctx: RequestContext, req: FetchRequest, by_id: bool) -> list[Want]:
    """The request's partitions in order, each with its topic id or its error (READ checked)."""
    wants: list[Want] = []
    for ti, t in enumerate(req.topics):
        info: TopicInfo | None
        if by_id:
            info = await host.topic_by_id(t.topic_id) if t.topic_id != ZERO_UUID else None
        else:
            info = await host.topic(t.topic)
        # READ on the topic (a name is checked whether or not it exists; an id only once known).
        name = info.name if info is not None else (None if by_id else t.topic)
        denied = name is not None and not allowed(host, ctx, Op.READ, RT.TOPIC, name)
        is_compacted = info is not None and compacted(info.config)
        for p in t.partitions:
            w = Want(ti, p.partition, p.fetch_offset, max(0, p.partition_max_bytes), None)
            if denied:
                w.error = ErrorCode.TOPIC_AUTHORIZATION_FAILED
            elif info is None:
                w.error = ErrorCode.UNKNOWN_TOPIC_ID if by_id else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            elif not 0 <= p.partition < info.partitions:
                w.error = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            else:
                w.topic_id, w.topic_partitions = info.id, info.partitions
                w.compacted = is_compacted
            wants.append(w)
    return wants
