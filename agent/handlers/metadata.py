"""Metadata (key 3).

Behavior: one broker (this agent) leads every partition. A request for all
topics (null list, or an empty list in v0) lists every topic; unknown topics
are auto-created when both the agent option and the request allow it
(``allow_auto_topic_creation``, v4+), otherwise UNKNOWN_TOPIC_OR_PARTITION.
Topic ids (v10+) are the metastore's stable, non-zero UUIDs; v12+ requests may
name topics by id.

Versions: 0-13 (v9+ flexible).
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING

from agent.handlers.registry import handler
from kafka_protocol.messages import MetadataRequest, MetadataResponse

if TYPE_CHECKING:
    from agent.broker import Broker
    from agent.connection import RequestContext
    from metastore import TopicInfo

UNKNOWN_TOPIC_OR_PARTITION = 3
INVALID_TOPIC_EXCEPTION = 17
UNKNOWN_TOPIC_ID = 100
ZERO_UUID = uuid.UUID(int=0)

Topic = MetadataResponse.MetadataResponseTopic
Partition = MetadataResponse.MetadataResponseTopic.MetadataResponsePartition


def topic_entry(broker: Broker, info: TopicInfo) -> Topic:
    node = broker.node_id
    return Topic(
        error_code=0,
        name=info.name,
        topic_id=info.id,
        is_internal=False,
        partitions=[
            Partition(
                error_code=0,
                partition_index=p,
                leader_id=node,
                leader_epoch=0,
                replica_nodes=[node],
                isr_nodes=[node],
                offline_replicas=[],
            )
            for p in range(info.partitions)
        ],
    )


@handler(MetadataRequest)
async def handle(broker: Broker, ctx: RequestContext, req: MetadataRequest) -> MetadataResponse:
    v = ctx.header.api_version
    topics: list[Topic] = []
    wanted = req.topics
    if wanted is None or (v == 0 and not wanted):
        for info in await broker.meta.list_topics():
            topics.append(topic_entry(broker, info))
    else:
        allow_create = broker.config.auto_create_topics and (v < 4 or req.allow_auto_topic_creation)
        for t in wanted:
            info = None
            if t.name is None or (t.name == "" and t.topic_id != ZERO_UUID):
                info = await broker.topic_by_id(t.topic_id)
                if info is None:
                    topics.append(Topic(error_code=UNKNOWN_TOPIC_ID, name=None, topic_id=t.topic_id))
                    continue
            else:
                info = await broker.topic(t.name)
                if info is None and allow_create:
                    info = await broker.auto_create(t.name)
                    if info is None:
                        topics.append(Topic(error_code=INVALID_TOPIC_EXCEPTION, name=t.name))
                        continue
            if info is None:
                topics.append(Topic(error_code=UNKNOWN_TOPIC_OR_PARTITION, name=t.name))
                continue
            topics.append(topic_entry(broker, info))
    node = broker.advertised
    return MetadataResponse(
        throttle_time_ms=0,
        brokers=[MetadataResponse.MetadataResponseBroker(node_id=node.node_id, host=node.host, port=node.port, rack=node.rack)],
        cluster_id=broker.config.cluster_id,
        controller_id=node.node_id,
        topics=topics,
    )
