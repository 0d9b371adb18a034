"""OffsetFetch (key 9).

Behavior: committed offsets come from the metastore (the only copy that
matters), so any agent answers the same. Partitions without a commit (or of
unknown topics) get offset -1, empty metadata and no error, as Kafka answers.
A null topic list (v2+) means every partition the group committed, for topics
that still exist. v8+ asks for several groups at once. ``require_stable``
(v7+): a partition with a transactional offset commit waiting for its
transaction to end answers UNSTABLE_OFFSET_COMMIT (offset -1; retriable, the
consumer asks again), as Kafka does; without it the last committed offset.
v10 addresses topics by id (unknown ids get UNKNOWN_TOPIC_ID). A metastore
failure answers COORDINATOR_NOT_AVAILABLE.

Versions: 0-10 (v6+ flexible, v8+ batched groups). Min 0 for old clients.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TypeVar

from agent.handlers.registry import handler
from agent.security.authorizer import RT, Op, allowed
from kafka_protocol.errors import ErrorCode
from kafka_protocol.messages import OffsetFetchRequest, OffsetFetchResponse
from metastore import MetastoreError
from metastore.types import GroupOffset

if TYPE_CHECKING:
    from agent.broker import Broker
    from agent.connection import RequestContext

V8Group = OffsetFetchResponse.OffsetFetchResponseGroup
V8Topic = V8Group.OffsetFetchResponseTopics
V8Partition = V8Topic.OffsetFetchResponsePartitions
OldTopic = OffsetFetchResponse.OffsetFetchResponseTopic
OldPartition = OldTopic.OffsetFetchResponsePartition


@dataclass(slots=True)
class _Topic:
    name: str
    topic_id: uuid.UUID
    # (partition, offset, leader epoch, metadata, error)
    partitions: list[tuple[int, int, int, str | None, int]] = field(default_factory=list)


P = TypeVar("P")


def _partitions(partition: Callable[..., P], topic: _Topic) -> list[P]:
    return [
        partition(
            partition_index=p,
            committed_offset=off,
            committed_leader_epoch=epoch,
            metadata=meta,
            error_code=int(err),
        )
        for p, off, epoch, meta, err in topic.partitions
    ]


async def _group_offsets(
    broker: Broker,
    group_id: str,
    wanted: list[tuple[str, uuid.UUID, list[int]]] | None,
    by_id: bool,
    require_stable: bool = False,
    may: Callable[[str], bool] = lambda _: True,
) -> tuple[int, list[_Topic]]:
    """``wanted`` is (name, topic id, partitions) per requested topic, or None for all;
    ``may(topic)``: the caller may DESCRIBE it (else TOPIC_AUTHORIZATION_FAILED, or
    left out of an all-topics answer)."""
    resolved: list[tuple[_Topic, uuid.UUID | None, list[int]]] = []
    denied: set[int] = set()
    if wanted is not None:
        for name, tid, parts in wanted:
            info = await (broker.topic_by_id(tid) if by_id else broker.topic(name))
            shown = info.name if info else name
            if shown and (info is not None or not by_id) and not may(shown):
                denied.add(len(resolved))
                info = None
            resolved.append((_Topic(info.name if info else name, tid), info.id if info else None, parts))
    try:
        ids = None if wanted is None else [r[1] for r in resolved if r[1] is not None]
        stored: list[GroupOffset] = await broker.groups.fetch_offsets(group_id, ids)
        pending = set(await broker.meta.txn_pending_offsets(group_id)) if require_stable else set()
    except MetastoreError:
        return ErrorCode.COORDINATOR_NOT_AVAILABLE, []
    commits = {(o.topic_id, o.partition): o for o in stored}
    unstable = (-1, -1, "", ErrorCode.UNSTABLE_OFFSET_COMMIT)
    if wanted is None:
        topics: dict[uuid.UUID, _Topic] = {}
        for o in stored:
            if o.topic_id not in topics:
                info = await broker.topic_by_id(o.topic_id)
                if info is None or not may(info.name):
                    continue  # the topic was deleted, or the caller may not see it
                topics[o.topic_id] = _Topic(info.name, info.id)
            if (o.topic_id, o.partition) in pending:
                topics[o.topic_id].partitions.append((o.partition, *unstable))
                continue
            topics[o.topic_id].partitions.append((o.partition, o.offset, o.leader_epoch, o.metadata, 0))
        return ErrorCode.NONE, list(topics.values())
    for i, (topic, found_id, parts) in enumerate(resolved):
        for p in parts:
            if i in denied:
                topic.partitions.append((p, -1, -1, "", ErrorCode.TOPIC_AUTHORIZATION_FAILED))
                continue
            if found_id is None and by_id:
                topic.partitions.append((p, -1, -1, "", ErrorCode.UNKNOWN_TOPIC_ID))
                continue
            commit = commits.get((found_id, p)) if found_id is not None else None
            if found_id is not None and (found_id, p) in pending:
                topic.partitions.append((p, *unstable))
            elif commit is None:
                topic.partitions.append((p, -1, -1, "", 0))
            else:
                topic.partitions.append((p, commit.offset, commit.leader_epoch, commit.metadata, 0))
    return ErrorCode.NONE, [r[0] for r in resolved]


@handler(OffsetFetchRequest, min_version=0)
async def handle(broker: Broker, ctx: RequestContext, req: OffsetFetchRequest) -> OffsetFetchResponse:
    v = ctx.header.api_version

    def may(topic: str) -> bool:
        return allowed(broker, ctx, Op.DESCRIBE, RT.TOPIC, topic)

    if v >= 8:
        groups: list[V8Group] = []
        for g in req.groups:
            wanted = (
                None
                if g.topics is None
                else [(t.name, t.topic_id, list(t.partition_indexes)) for t in g.topics]
            )
            member_error = (
                await broker.consumer_groups.validate_fetch(g.group_id, g.member_id, g.member_epoch) if v >= 9 else None
            )  # KIP-848: a consumer-group member fetches with its id and epoch
            error: int
            topics: list[_Topic] = []
            if not allowed(broker, ctx, Op.DESCRIBE, RT.GROUP, g.group_id):
                error = ErrorCode.GROUP_AUTHORIZATION_FAILED
            elif member_error:
                error = member_error
            else:
                error, topics = await _group_offsets(broker, g.group_id, wanted, v >= 10, req.require_stable, may)
            groups.append(
                V8Group(
                    group_id=g.group_id,
                    error_code=int(error),
                    topics=[
                        V8Topic(
                            name=t.name,
                            topic_id=t.topic_id,
                            partitions=_partitions(V8Partition, t),
                        )
                        for t in topics
                    ],
                )
            )
        return OffsetFetchResponse(throttle_time_ms=0, groups=groups)
    old_wanted = (
        None
        if req.topics is None and v >= 2
        else [(t.name, uuid.UUID(int=0), list(t.partition_indexes)) for t in req.topics or []]
    )
    old_error: int
    old_topics: list[_Topic]
    if not allowed(broker, ctx, Op.DESCRIBE, RT.GROUP, req.group_id):
        old_error, old_topics = ErrorCode.GROUP_AUTHORIZATION_FAILED, []
    else:
        old_error, old_topics = await _group_offsets(
            broker, req.group_id, old_wanted, False, v >= 7 and req.require_stable, may
        )
    error, topics = old_error, old_topics
    if error and v < 2 and old_wanted is not None:
        # v0-1 have no top-level error: report it on every partition.
        topics = [_Topic(n, tid, [(p, -1, -1, "", error) for p in parts]) for n, tid, parts in old_wanted]
    return OffsetFetchResponse(
        throttle_time_ms=0,
        error_code=int(error),
        topics=[
            OldTopic(
                name=t.name,
                partitions=_partitions(OldPartition, t),
            )
            for t in topics
        ],
    )
