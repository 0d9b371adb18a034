"""Metadata (key 3).

Behavior: the brokers are the live agents (agent.cluster), each listed as
``virtual_brokers`` node ids at its own address (agent.cluster.virtual); a
partition's leader is one of the node ids of its ring owner among the agents of
the client's zone (``floe_az=<zone>`` in client.id; all agents when that zone
has none or no hint is given), so its fetches land where its blocks are cached. Any agent accepts any produce and
fetch, so the leader is only a routing hint. A request for all
topics (null list, or an empty list in v0) lists every topic; unknown topics
are auto-created when both the agent option and the request allow it
(``allow_auto_topic_creation``, v4+), otherwise UNKNOWN_TOPIC_OR_PARTITION.
With an authorizer, only topics the caller may DESCRIBE are listed; a named
one it may not describe gets TOPIC_AUTHORIZATION_FAILED (existing or not), and
auto-creation needs CREATE on the cluster or the topic (else
TOPIC_AUTHORIZATION_FAILED).
Topic ids (v10+) are the metastore's stable, non-zero UUIDs; v12+ requests may
name topics by id. Topic entries come pre-encoded from the broker's
metadata cache (agent/metadata_cache.py), so a Metadata request for a topic of
10,000 partitions does not rebuild or re-encode its partitions.

Versions: 0-13 (v9+ flexible).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from agent.cluster import client_zone
from agent.handlers.registry import handler
from agent.metadata_cache import EncodedResponse, assemble, encode_topic
from agent.security.authorizer import RT, Op, allowed, cluster_allowed
from kafka_protocol.messages import MetadataRequest, MetadataResponse
from kafka_protocol.messages._runtime import ZERO_UUID
from metastore.topic_config import validate_topic_name

if TYPE_CHECKING:
    from agent.broker import Broker
    from agent.connection import RequestContext
    from metastore import TopicInfo

UNKNOWN_TOPIC_OR_PARTITION = 3
INVALID_TOPIC_EXCEPTION = 17
UNKNOWN_TOPIC_ID = 100
TOPIC_AUTHORIZATION_FAILED = 29

Topic = MetadataResponse.MetadataResponseTopic


def _leaders(broker: Broker, info: TopicInfo, zone: str | None) -> Callable[[], list[int]]:
    return lambda: broker.cluster.leaders(info.id, info.partitions, zone)


def topic_bytes(broker: Broker, info: TopicInfo, zone: str | None, version: int) -> bytes:
    """The encoded topic entry, from the metadata cache."""
    return broker.metadata.entry(
        info.id, info.name, info.partitions, zone, version, _leaders(broker, info, zone)
    )


@handler(MetadataRequest)
async def handle(broker: Broker, ctx: RequestContext, req: MetadataRequest) -> EncodedResponse:
    v = ctx.header.api_version
    zone = client_zone(ctx.client_id)
    # The live agents as the registry has them now (at most 50 ms old), not as of this
    # agent's last heartbeat: every agent lists the same brokers (see fresh_rings).
    await broker.cluster.membership.fresh_rings(0.05)
    # Entries: an encoded error, or a topic to encode once every await is behind us.
    topics: list[bytes | TopicInfo] = []
    wanted = req.topics
    authz = broker.authorizer is not None
    if wanted is None or (v == 0 and not wanted):
        for info in await broker.meta.list_topics():
            # Only the topics the caller may DESCRIBE are listed (Kafka's rule).
            if authz and not allowed(broker, ctx, Op.DESCRIBE, RT.TOPIC, info.name):
                continue
            topics.append(info)
    else:
        allow_create = broker.config.auto_create_topics and (v < 4 or req.allow_auto_topic_creation)
        for t in wanted:
            info = None
            if t.name is None or (t.name == "" and t.topic_id != ZERO_UUID):
                info = await broker.topic_by_id(t.topic_id)
                if info is None:
                    topics.append(encode_topic(Topic(error_code=UNKNOWN_TOPIC_ID, name=None, topic_id=t.topic_id), v))
                    continue
                if authz and not allowed(broker, ctx, Op.DESCRIBE, RT.TOPIC, info.name):
                    topics.append(encode_topic(Topic(error_code=TOPIC_AUTHORIZATION_FAILED, name=None, topic_id=t.topic_id), v))
                    continue
            else:
                if authz and not allowed(broker, ctx, Op.DESCRIBE, RT.TOPIC, t.name):
                    topics.append(encode_topic(Topic(error_code=TOPIC_AUTHORIZATION_FAILED, name=t.name), v))
                    continue
                info = await broker.topic(t.name)
                if (
                    info is None
                    and allow_create
                    and authz
                    and not cluster_allowed(broker, ctx, Op.CREATE)
                    and not allowed(broker, ctx, Op.CREATE, RT.TOPIC, t.name)
                ):  # auto-creation needs CREATE on the cluster or the topic
                    topics.append(encode_topic(Topic(error_code=TOPIC_AUTHORIZATION_FAILED, name=t.name), v))
                    continue
                if info is None and allow_create:
                    info = await broker.auto_create(t.name)
                    if info is None:
                        topics.append(encode_topic(Topic(error_code=INVALID_TOPIC_EXCEPTION, name=t.name), v))
                        continue
            if info is None:
                # Kafka answers an illegal name INVALID_TOPIC_EXCEPTION, a legal unknown one UNKNOWN_TOPIC_OR_PARTITION.
                bad = t.name is not None and validate_topic_name(t.name) is not None
                code = INVALID_TOPIC_EXCEPTION if bad else UNKNOWN_TOPIC_OR_PARTITION
                topics.append(encode_topic(Topic(error_code=code, name=t.name), v))
                continue
            topics.append(info)
    # No await from here to the answer: the leaders (cached per rings) and the brokers
    # come from one membership view. Encoding the leaders before an await and the
    # brokers after it let a membership change in between list a leader that is not
    # among the brokers (an agent that had just left), and librdkafka then failed the
    # partition as "Unknown partition" (CI, test_txn_jepsen, after an agent restart).
    broker.metadata.check_rings(broker.cluster.placement)  # leaders: live minus isolated
    encoded = [t if isinstance(t, bytes) else topic_bytes(broker, t, zone, v) for t in topics]
    node = broker.advertised
    head = MetadataResponse(
        throttle_time_ms=0,
        brokers=[
            MetadataResponse.MetadataResponseBroker(node_id=n, host=ep[0], port=ep[1], rack=p.zone)
            for n, p in broker.cluster.nodes()  # virtual_brokers per agent, all at its address
            if (ep := p.endpoint(ctx.listener_name))
        ],
        cluster_id=broker.config.cluster_id,
        controller_id=node.node_id,
    )
    return assemble(head, encoded, v)
