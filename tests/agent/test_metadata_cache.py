"""Metadata and ListOffsets at width: the cached, pre-encoded topic entries and
the one-query earliest/latest answers (agent/metadata_cache.py, issue 18)."""

from __future__ import annotations

import uuid

from hypothesis import given, settings
from hypothesis import strategies as st

from agent.metadata_cache import assemble, encode_topic
from kafka_protocol.messages import (
    CreatePartitionsRequest,
    DeleteTopicsRequest,
    ListOffsetsRequest,
    MetadataRequest,
    MetadataResponse,
)
from tests.agent.test_fetch_protocol import make_topic, produce_batch, raw_call

Topic = MetadataResponse.MetadataResponseTopic
Partition = Topic.MetadataResponsePartition
Broker = MetadataResponse.MetadataResponseBroker

_names = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=20)
_i32 = st.integers(-(2**31), 2**31 - 1)
_partitions = st.builds(
    Partition,
    error_code=st.integers(-32768, 32767),
    partition_index=_i32,
    leader_id=_i32,
    leader_epoch=_i32,
    replica_nodes=st.lists(_i32, max_size=3),
    isr_nodes=st.lists(_i32, max_size=3),
    offline_replicas=st.lists(_i32, max_size=2),
)
_topics = st.builds(
    Topic,
    error_code=st.integers(-32768, 32767),
    name=_names,
    topic_id=st.uuids(),
    is_internal=st.booleans(),
    partitions=st.lists(_partitions, max_size=200),
)
_brokers = st.builds(Broker, node_id=_i32, host=_names, port=_i32, rack=st.none() | _names)


@settings(max_examples=150, deadline=None)
@given(
    version=st.integers(MetadataResponse.MIN_VERSION, MetadataResponse.MAX_VERSION),
    topics=st.lists(_topics, max_size=4),
    brokers=st.lists(_brokers, max_size=3),
    cluster_id=st.none() | _names,
    controller=_i32,
    throttle=_i32,
)
def test_spliced_response_is_the_plain_encoding(version, topics, brokers, cluster_id, controller, throttle):
    def head(ts: list[Topic]) -> MetadataResponse:
        return MetadataResponse(
            throttle_time_ms=throttle, brokers=brokers, cluster_id=cluster_id,
            controller_id=controller, topics=ts,
        )

    plain = head(topics).encode(version)
    spliced = assemble(head([]), [encode_topic(t, version) for t in topics], version)
    assert b"".join(spliced.encode_parts(version)) == plain
    assert spliced.header_version(version) == MetadataResponse.header_version(version)


def _metadata(agent, names: list[str] | None, version: int = 12) -> MetadataResponse:
    topics = None if names is None else [MetadataRequest.MetadataRequestTopic(name=n) for n in names]
    return raw_call(agent, MetadataRequest(topics=topics, allow_auto_topic_creation=False), version)


def test_wide_topic_metadata_cached_and_invalidated(floe_agent):
    broker = floe_agent.broker
    tid = make_topic(floe_agent, "wide", partitions=3000)
    node = floe_agent.broker.advertised.node_id
    for version in (1, 9, 12):
        md = _metadata(floe_agent, ["wide"], version)
        (t,) = md.topics
        assert t.error_code == 0 and t.name == "wide"
        assert [p.partition_index for p in t.partitions] == list(range(3000))
        assert {p.leader_id for p in t.partitions} == {node}
        assert t.partitions[7].replica_nodes == [node] and t.partitions[7].isr_nodes == [node]
        if version >= 10:
            assert t.topic_id == tid
    hits = broker.metadata.hits
    assert _metadata(floe_agent, ["wide"]).topics[0].partitions[2999].partition_index == 2999
    assert broker.metadata.hits == hits + 1  # the second request reused the encoded entry

    # All topics, an unknown one, then CreatePartitions and DeleteTopics through this agent.
    make_topic(floe_agent, "narrow", partitions=2)
    floe_agent.broker.invalidate_topics()  # created behind the agent's back (make_topic)
    assert [t.name for t in _metadata(floe_agent, None).topics] == ["narrow", "wide"]
    (missing,) = _metadata(floe_agent, ["nope"]).topics
    assert missing.error_code == 3 and missing.partitions == []
    CP = CreatePartitionsRequest.CreatePartitionsTopic
    grown = raw_call(floe_agent, CreatePartitionsRequest(topics=[CP(name="wide", count=3005)], timeout_ms=5000), 3)
    assert grown.results[0].error_code == 0
    assert len(_metadata(floe_agent, ["wide"]).topics[0].partitions) == 3005
    DT = DeleteTopicsRequest.DeleteTopicState
    gone = raw_call(floe_agent, DeleteTopicsRequest(topics=[DT(name="narrow", topic_id=uuid.UUID(int=0))], timeout_ms=5000), 6)
    assert gone.responses[0].error_code == 0
    assert [t.name for t in _metadata(floe_agent, None).topics] == ["wide"]


def test_list_offsets_many_partitions_one_query(floe_agent):
    make_topic(floe_agent, "lo-wide", partitions=20)
    for p, n in ((3, 5), (3, 2), (11, 4)):
        produce_batch(floe_agent, "lo-wide", p, n)
    LT = ListOffsetsRequest.ListOffsetsTopic
    LP = LT.ListOffsetsPartition
    calls: list[object] = []
    meta = floe_agent.broker.meta
    real = meta.list_offsets

    async def counting(*args, **kwargs):
        calls.append(args)
        return await real(*args, **kwargs)

    meta.list_offsets = counting
    try:
        req = ListOffsetsRequest(
            replica_id=-1,
            topics=[LT(name="lo-wide", partitions=[LP(partition_index=p, timestamp=-1) for p in range(21)])],
        )
        (t,) = raw_call(floe_agent, req, 7).topics
        latest = {p.partition_index: (p.error_code, p.offset) for p in t.partitions}
        req.topics[0].partitions = [LP(partition_index=p, timestamp=-2) for p in range(20)]
        (t,) = raw_call(floe_agent, req, 7).topics
        earliest = {p.partition_index: (p.error_code, p.offset) for p in t.partitions}
    finally:
        del meta.list_offsets
    assert calls == []  # every answer came from the one query per request
    assert latest == {**{p: (0, 0) for p in range(20)}, 3: (0, 7), 11: (0, 4), 20: (3, -1)}
    assert earliest == {p: (0, 0) for p in range(20)}
