"""DescribeShareGroupOffsets (key 90, KIP-932).

Behavior: per group, the share-partition start offset (SPSO) of each requested
topic partition -- or, with ``topics`` null, of every share partition the group
has state for -- and (v1) its lag: records from the SPSO to the high watermark
not yet acknowledged or archived. A partition the group never fetched answers
start offset -1; an unknown topic UNKNOWN_TOPIC_OR_PARTITION.

Versions: 0-1.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agent.groups.share.manager import lag
from agent.handlers.registry import handler
from agent.security.authorizer import RT, Op, allowed
from kafka_protocol.errors import ErrorCode
from kafka_protocol.messages import (
    DescribeShareGroupOffsetsRequest,
    DescribeShareGroupOffsetsResponse,
)
from metastore import MetastoreError

if TYPE_CHECKING:
    from agent.broker import Broker
    from agent.connection import RequestContext

R = DescribeShareGroupOffsetsResponse
G = R.DescribeShareGroupOffsetsResponseGroup
T = G.DescribeShareGroupOffsetsResponseTopic
P = T.DescribeShareGroupOffsetsResponsePartition


async def _group(broker: Broker, g: DescribeShareGroupOffsetsRequest.DescribeShareGroupOffsetsRequestGroup) -> G:
    try:
        stored = {(s.topic_id, s.partition): s for s in await broker.meta.share_partitions_load(g.group_id)}
        wanted: list[tuple[str, list[int]]] = []
        if g.topics is None:
            names: dict[object, str] = {}
            for tid, _p in sorted(stored, key=lambda k: (str(k[0]), k[1])):
                info = await broker.topic_by_id(tid)
                if info is not None:
                    names[tid] = info.name
            by_name: dict[str, list[int]] = {}
            for tid, p in stored:
                if tid in names:
                    by_name.setdefault(names[tid], []).append(p)
            wanted = sorted((n, sorted(ps)) for n, ps in by_name.items())
        else:
            wanted = [(t.topic_name, list(t.partitions)) for t in g.topics]
        topics = []
        for name, parts in wanted:
            info = await broker.topic(name)
            if info is None:
                topics.append(T(topic_name=name, partitions=[P(partition_index=p, start_offset=-1, error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION) for p in parts]))
                continue
            hwm = {po.partition: po.high_watermark for po in await broker.meta.partition_offsets(info.id)}
            out = []
            for p in parts:
                st = stored.get((info.id, p))
                if not 0 <= p < info.partitions:
                    out.append(P(partition_index=p, start_offset=-1, error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION))
                elif st is None:
                    out.append(P(partition_index=p, start_offset=-1, lag=-1))
                else:
                    out.append(P(partition_index=p, start_offset=st.start_offset, lag=lag(st, hwm.get(p, st.start_offset))))
            topics.append(T(topic_name=name, topic_id=info.id, partitions=out))
        return G(group_id=g.group_id, topics=topics)
    except MetastoreError as e:
        return G(group_id=g.group_id, error_code=ErrorCode.COORDINATOR_NOT_AVAILABLE, error_message=str(e))


@handler(DescribeShareGroupOffsetsRequest)
async def handle(broker: Broker, ctx: RequestContext, req: DescribeShareGroupOffsetsRequest) -> R:
    return R(throttle_time_ms=0, groups=[
        await _group(broker, g) if allowed(broker, ctx, Op.DESCRIBE, RT.GROUP, g.group_id)
        else G(group_id=g.group_id, error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED, error_message="Group authorization failed.")
        for g in req.groups
    ])  # fmt: skip
