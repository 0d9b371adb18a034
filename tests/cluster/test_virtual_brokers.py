"""Virtual brokers (agent.cluster.virtual): each agent listed as several node ids.

Unit level: the ids of every agent are distinct and map back to their agent,
Metadata's leaders are the ring owner's ids spread evenly, one virtual broker is
exactly the old presentation. Over the wire (two in-process agents on one
metastore): Metadata and DescribeCluster list every agent's ids at that agent's
own address, each partition's leader is a node id of its ring owner, and a
DescribeConfigs broker resource answers for any of the agent's ids.
"""

from __future__ import annotations

import uuid
from collections import Counter
from pathlib import Path
from typing import Any

from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic, ResourceType

from agent.cluster import Peer, Rings
from agent.cluster.virtual import VirtualNodes, virtual_ids
from agent.groups.share.sessions import ShareSessionCache
from agent.handlers.describe_configs import _describe_broker
from kafka_protocol.messages import (
    DescribeClusterRequest,
    DescribeClusterResponse,
    DescribeConfigsRequest,
    MetadataRequest,
    MetadataResponse,
)
from tests.interop._raw import RawConn

PEERS = [Peer(f"agent-{i}", "127.0.0.1", 9100 + i, None, None) for i in range(3)]


def test_ids_are_distinct_and_resolve_to_their_agent() -> None:
    v = VirtualNodes(PEERS, 4)
    assert len(v.nodes) == 12 and len({n for n, _ in v.nodes}) == 12
    for p in PEERS:
        ids = v.ids[p.agent_id]
        assert ids[0] == p.node_id  # virtual broker 0 is the agent's own node id
        assert ids == virtual_ids(p.agent_id, 4)
        assert all(v.peer(n) is p for n in ids)
    assert v.peer(12345) is None
    # Numeric agent ids keep their node id; their virtual ids do not collide with small numbers.
    assert virtual_ids("3", 3)[0] == 3 and all(n > 1000 for n in virtual_ids("3", 3)[1:])


def test_leaders_spread_over_the_owners_virtual_ids() -> None:
    rings = Rings(PEERS)
    v = VirtualNodes(rings.peers, 4)
    for _ in range(20):
        topic = uuid.uuid4()
        leaders = v.leaders(rings.all, topic, 48, PEERS[0])
        for p, n in enumerate(leaders):
            assert v.peer(n) == rings.all.owner(f"{topic}:{p}")  # cache locality kept
        for agent_id, ids in v.ids.items():
            counts = Counter(n for n in leaders if n in ids)
            owned = sum(counts.values())
            if owned >= 4:
                assert set(counts) == set(ids), (agent_id, counts)
            assert max(counts.values(), default=0) - min(counts.get(n, 0) for n in ids) <= 1
    # One agent: its partitions go round robin over its ids.
    one = Rings(PEERS[:1])
    lone = VirtualNodes(one.peers, 4)
    assert Counter(lone.leaders(one.all, uuid.uuid4(), 16, PEERS[0])) == dict.fromkeys(lone.ids["agent-0"], 4)


def test_one_virtual_broker_is_the_plain_presentation() -> None:
    rings = Rings(PEERS)
    v = VirtualNodes(rings.peers, 1)
    topic = uuid.uuid4()
    assert v.leaders(rings.all, topic, 30, PEERS[0]) == [rings.all.owner(f"{topic}:{p}").node_id for p in range(30)]
    assert [(n, p.agent_id) for n, p in v.nodes] == [(p.node_id, p.agent_id) for p in rings.peers]


def test_metadata_lists_virtual_ids_at_each_agents_address(agent_factory: Any, tmp_path: Path) -> None:
    shared = {"metastore": f"sqlite:///{tmp_path / 'shared.db'}", "objects": f"file://{tmp_path / 'objects'}",
              "virtual_brokers": 3}  # fmt: skip
    a, b = agent_factory(**shared), agent_factory(**shared)
    admin = AdminClient({"bootstrap.servers": a.bootstrap})
    admin.create_topics([NewTopic("vt", 24, 1)])["vt"].result(30)
    by_agent = {x.broker.cluster.me.agent_id: x for x in (a, b)}
    for agent in (a, b):  # both have read the registry since b joined (freshness: test_topic_cache)
        assert len(agent.call(agent.broker.cluster.membership.refresh()).peers) == 2
    for agent in (a, b):
        with RawConn(agent.port) as conn:
            md = conn.request(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name="vt")]), MetadataResponse, 12)
            dc = conn.request(DescribeClusterRequest(), DescribeClusterResponse, 0)
        brokers = {br.node_id: br.port for br in md.brokers}
        assert len(brokers) == 6
        virtual = agent.broker.cluster.virtual
        for node, port in brokers.items():
            owner = virtual.peer(node)
            assert owner is not None and by_agent[owner.agent_id].port == port  # the owning process
        (topic,) = md.topics
        leaders = [p.leader_id for p in sorted(topic.partitions, key=lambda p: p.partition_index)]
        for p, node in enumerate(leaders):
            assert virtual.peer(node) == agent.broker.cluster.leader(topic.topic_id, p, None)
        assert len(set(leaders)) == 6  # every virtual broker leads some partition
        assert {br.broker_id: br.port for br in dc.brokers} == brokers
    # A broker config resource named by any of a's virtual ids is a's.
    res = DescribeConfigsRequest.DescribeConfigsResource
    for node in a.broker.cluster.virtual.ids[a.broker.cluster.me.agent_id]:
        out = _describe_broker(a.broker, res(resource_type=4, resource_name=str(node)), False, False)
        assert out.error_code == 0, out
    other = b.broker.cluster.virtual.ids[b.broker.cluster.me.agent_id][1]
    assert _describe_broker(a.broker, res(resource_type=4, resource_name=str(other)), False, False).error_code != 0
    # Through a real admin client (routed to the virtual node id).
    node = a.broker.cluster.virtual.ids[a.broker.cluster.me.agent_id][2]
    (fut,) = admin.describe_configs([ConfigResource(ResourceType.BROKER, str(node))]).values()
    assert fut.result(30)["broker.id"].value == str(a.broker.node_id)


def test_share_sessions_are_per_member_and_connection() -> None:
    """A share consumer reaches one process through several virtual brokers: one share
    session per connection, which must not replace each other at epoch 0."""

    class Conn:
        _closed = False

    cache, c1, c2 = ShareSessionCache(), Conn(), Conn()
    s1, s2 = cache.open("g", "m", c1), cache.open("g", "m", c2)
    assert s1 is not None and s2 is not None and s1 is not s2 and len(cache) == 2
    cache.advance(s1)
    assert cache.check("g", "m", 2, c1) == (0, s1) and cache.check("g", "m", 1, c2) == (0, s2)
    assert cache.check("g", "m", 1, Conn())[1] is None  # another connection: not found
    c1._closed = True  # c1's connection closed: its session goes when the member opens again
    assert cache.get("g", "m", c1) is None
    s3 = cache.open("g", "m", Conn())
    assert s3 is not None and len(cache) == 2 and cache.get("g", "m", c2) is s2
