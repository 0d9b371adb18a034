"""Admin APIs on the wire, every version, with inputs real clients refuse to send.

One plain socket per test speaks our own codec to a real agent; every error
must come back as an error code on the same connection, never a dropped one.
"""

from __future__ import annotations

import socket
import struct
import uuid
from typing import Any

import pytest

from kafka_protocol.errors import ErrorCode
from kafka_protocol.framing import RequestHeader, encode_request
from kafka_protocol.messages import (
    RESPONSES,
    ApiVersionsRequest,
    CreatePartitionsRequest,
    CreateTopicsRequest,
    DeleteRecordsRequest,
    DeleteTopicsRequest,
    DescribeClusterRequest,
    DescribeConfigsRequest,
    IncrementalAlterConfigsRequest,
    InitProducerIdRequest,
)
from kafka_protocol.messages._runtime import skip_tagged_fields

ZERO = uuid.UUID(int=0)

CT = CreateTopicsRequest.CreatableTopic
DT = DeleteTopicsRequest.DeleteTopicState
CP = CreatePartitionsRequest.CreatePartitionsTopic
DC = DescribeConfigsRequest.DescribeConfigsResource
IAC = IncrementalAlterConfigsRequest.AlterConfigsResource
DR = DeleteRecordsRequest.DeleteRecordsTopic


class Wire:
    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=15)
        self.correlation = 0

    def _read(self, n: int) -> bytes:
        buf = bytearray()
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            assert chunk, "the agent closed the connection"
            buf += chunk
        return bytes(buf)

    def call(self, req: Any, version: int) -> Any:
        self.correlation += 1
        header = RequestHeader(req.API_KEY, version, self.correlation, "admin-wire-test")
        self.sock.sendall(encode_request(header, req))
        (size,) = struct.unpack(">i", self._read(4))
        frame = memoryview(self._read(size))
        (correlation,) = struct.unpack_from(">i", frame, 0)
        assert correlation == self.correlation
        cls: Any = RESPONSES[req.API_KEY]
        pos = skip_tagged_fields(frame, 4) if cls.header_version(version) >= 1 else 4
        return cls.decode(frame[pos:], version)

    def alive(self) -> None:
        assert self.call(ApiVersionsRequest(), 0).error_code == 0

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def wire(floe_agent):
    w = Wire(floe_agent.port)
    yield w
    w.alive()
    w.close()


def create(wire: Wire, *topics: CT, version: int = 7, validate_only: bool = False) -> list[Any]:
    res = wire.call(CreateTopicsRequest(topics=list(topics), timeout_ms=5000, validate_only=validate_only), version)
    return list(res.topics)


def test_create_and_delete_topics_every_version(floe_agent, wire):
    for v in range(CreateTopicsRequest.MIN_VERSION, CreateTopicsRequest.MAX_VERSION + 1):
        (r,) = create(wire, CT(name=f"sweep-{v}", num_partitions=2, replication_factor=1), version=v)
        assert (r.name, r.error_code) == (f"sweep-{v}", 0), v
        if v >= 5:
            assert (r.num_partitions, r.replication_factor) == (2, 1)
            assert {c.name: c.value for c in r.configs}["cleanup.policy"] == "delete"
        if v >= 7:
            assert r.topic_id != ZERO
    for n in range(CreateTopicsRequest.MAX_VERSION + 1):
        v = min(n, DeleteTopicsRequest.MAX_VERSION)
        if v >= 6:
            req = DeleteTopicsRequest(topics=[DT(name=f"sweep-{n}", topic_id=ZERO)], timeout_ms=5000)
        else:
            req = DeleteTopicsRequest(topic_names=[f"sweep-{n}"], timeout_ms=5000)
        (r,) = wire.call(req, v).responses
        assert (r.name, r.error_code) == (f"sweep-{n}", 0), v
    assert floe_agent.call(floe_agent.broker.meta.list_topics()) == []


def test_create_topics_edge_cases(agent_factory):
    agent = agent_factory(default_partitions=3, auto_create_topics=False)
    wire = Wire(agent.port)
    results = create(
        wire,
        CT(name="dup", num_partitions=1, replication_factor=1),
        CT(name="defaults", num_partitions=-1, replication_factor=-1),
        CT(name="dup", num_partitions=2, replication_factor=1),
        CT(
            name="manual",
            num_partitions=-1,
            replication_factor=-1,
            assignments=[CT.CreatableReplicaAssignment(partition_index=0, broker_ids=[1])],
        ),
        CT(name="null-config", num_partitions=1, replication_factor=1, configs=[CT.CreatableTopicConfig(name="retention.ms", value=None)]),
        CT(name="neg", num_partitions=-2, replication_factor=1),
        CT(name="rf", num_partitions=1, replication_factor=-3),
        CT(name="huge", num_partitions=10**6, replication_factor=1),
        CT(name="..", num_partitions=1, replication_factor=1),
    )
    codes = {r.name: r.error_code for r in results}
    assert codes == {
        "dup": ErrorCode.INVALID_REQUEST,
        "defaults": 0,
        "manual": ErrorCode.INVALID_REQUEST,
        "null-config": ErrorCode.INVALID_CONFIG,
        "neg": ErrorCode.INVALID_PARTITIONS,
        "rf": ErrorCode.INVALID_REPLICATION_FACTOR,
        "huge": ErrorCode.INVALID_PARTITIONS,
        "..": ErrorCode.INVALID_TOPIC_EXCEPTION,
    }
    assert all(r.error_message for r in results if r.error_code)
    defaults = next(r for r in results if r.name == "defaults")
    assert (defaults.num_partitions, defaults.replication_factor) == (3, 1)

    (checked,) = create(wire, CT(name="checked", num_partitions=4, replication_factor=1), validate_only=True)
    assert (checked.error_code, checked.num_partitions) == (0, 4)
    assert checked.topic_id != ZERO  # a fresh id that is not kept, as Kafka answers
    assert [t.name for t in agent.call(agent.broker.meta.list_topics())] == ["defaults"]
    wire.alive()
    wire.close()


def test_delete_topics_by_id(floe_agent, wire):
    (r,) = create(wire, CT(name="by-id", num_partitions=1, replication_factor=1))
    missing = uuid.uuid4()
    res = wire.call(
        DeleteTopicsRequest(
            topics=[
                DT(name=None, topic_id=r.topic_id),
                DT(name=None, topic_id=missing),
                DT(name="both", topic_id=missing),
                DT(name="no-such-topic", topic_id=ZERO),
            ],
            timeout_ms=1000,
        ),
        6,
    )
    got = [(x.name, x.topic_id, x.error_code) for x in res.responses]
    assert got == [
        ("by-id", r.topic_id, 0),
        (None, missing, ErrorCode.UNKNOWN_TOPIC_ID),
        ("both", missing, ErrorCode.INVALID_REQUEST),
        ("no-such-topic", ZERO, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
    ]
    assert floe_agent.call(floe_agent.broker.topic("by-id")) is None


def test_create_partitions_every_version(floe_agent, wire):
    create(wire, CT(name="cp", num_partitions=1, replication_factor=1))
    for v in range(CreatePartitionsRequest.MIN_VERSION, CreatePartitionsRequest.MAX_VERSION + 1):
        res = wire.call(CreatePartitionsRequest(topics=[CP(name="cp", count=v + 2, assignments=None)], timeout_ms=1000), v)
        assert [(r.name, r.error_code) for r in res.results] == [("cp", 0)], v
    res = wire.call(
        CreatePartitionsRequest(
            topics=[
                CP(name="cp", count=10, assignments=None),
                CP(name="cp", count=11, assignments=None),
                CP(name="nope", count=2, assignments=None),
                CP(name="cp2", count=-1, assignments=None),
            ],
            timeout_ms=1000,
        ),
        3,
    )
    assert [(r.name, r.error_code) for r in res.results] == [
        ("cp", ErrorCode.INVALID_REQUEST),
        ("nope", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
        ("cp2", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
    ]
    assert floe_agent.call(floe_agent.broker.meta.get_topic("cp")).partitions == 5


def test_describe_configs_versions(floe_agent, wire):
    create(wire, CT(name="dc", num_partitions=1, replication_factor=1, configs=[CT.CreatableTopicConfig(name="retention.ms", value="1000")]))
    for v in range(DescribeConfigsRequest.MIN_VERSION, DescribeConfigsRequest.MAX_VERSION + 1):
        req = DescribeConfigsRequest(
            resources=[DC(resource_type=2, resource_name="dc", configuration_keys=["retention.ms", "segment.ms", "not.a.key"])],
            include_synonyms=True,
            include_documentation=True,
        )
        (r,) = wire.call(req, v).results
        assert r.error_code == 0
        entries = {c.name: c for c in r.configs}
        assert set(entries) == {"retention.ms", "segment.ms"}
        assert entries["retention.ms"].value == "1000"
        if v == 0:
            assert not entries["retention.ms"].is_default and entries["segment.ms"].is_default
        else:
            assert (entries["retention.ms"].config_source, entries["segment.ms"].config_source) == (1, 5)
            assert [s.name for s in entries["retention.ms"].synonyms] == ["retention.ms", "log.retention.ms"]
        if v >= 3:
            assert entries["retention.ms"].config_type == 5  # LONG
            assert entries["retention.ms"].documentation

    res = wire.call(
        DescribeConfigsRequest(
            resources=[
                DC(resource_type=2, resource_name="missing", configuration_keys=None),
                DC(resource_type=2, resource_name="bad/name", configuration_keys=None),
                DC(resource_type=4, resource_name="7", configuration_keys=None),
                DC(resource_type=4, resource_name="", configuration_keys=["num.partitions"]),
                DC(resource_type=8, resource_name="1", configuration_keys=None),
            ]
        ),
        4,
    )
    got = [(r.resource_name, r.error_code, [c.name for c in r.configs]) for r in res.results]
    assert got == [
        ("missing", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, []),
        ("bad/name", ErrorCode.INVALID_TOPIC_EXCEPTION, []),
        ("7", ErrorCode.INVALID_REQUEST, []),
        ("", 0, ["num.partitions"]),
        ("1", ErrorCode.INVALID_REQUEST, []),
    ]


def test_incremental_alter_configs_bad_input(floe_agent, wire):
    create(wire, CT(name="iac", num_partitions=1, replication_factor=1))
    Cfg = IAC.AlterableConfig
    res = wire.call(
        IncrementalAlterConfigsRequest(
            resources=[
                IAC(resource_type=2, resource_name="iac", configs=[Cfg(name="segment.ms", config_operation=0, value="1"), Cfg(name="segment.ms", config_operation=1, value=None)]),
                IAC(resource_type=2, resource_name="iac", configs=[Cfg(name="segment.ms", config_operation=9, value="1")]),
                IAC(resource_type=2, resource_name="iac", configs=[Cfg(name="segment.ms", config_operation=0, value=None)]),
                IAC(resource_type=2, resource_name="iac", configs=[Cfg(name="segment.ms", config_operation=3, value="1")]),
                IAC(resource_type=2, resource_name="gone", configs=[Cfg(name="segment.ms", config_operation=0, value="1")]),
                IAC(resource_type=4, resource_name="1", configs=[Cfg(name="num.partitions", config_operation=0, value="3")]),
                IAC(resource_type=2, resource_name="iac", configs=[Cfg(name="segment.ms", config_operation=0, value="42")]),
            ]
        ),
        1,
    )
    assert [r.error_code for r in res.responses] == [
        ErrorCode.INVALID_REQUEST,
        ErrorCode.INVALID_REQUEST,
        ErrorCode.INVALID_REQUEST,
        ErrorCode.INVALID_CONFIG,  # SUBTRACT on a non-list config, as Kafka 4.1
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ErrorCode.INVALID_REQUEST,
        0,
    ]
    assert all(r.error_message for r in res.responses if r.error_code)
    assert floe_agent.call(floe_agent.broker.meta.get_topic("iac")).config == {"segment.ms": "42"}


def test_describe_cluster_versions(floe_agent, wire):
    for v in range(DescribeClusterRequest.MIN_VERSION, DescribeClusterRequest.MAX_VERSION + 1):
        r = wire.call(DescribeClusterRequest(include_cluster_authorized_operations=False, endpoint_type=1), v)
        node = floe_agent.broker.node_id
        assert (r.error_code, r.cluster_id, r.controller_id) == (0, floe_agent.broker.config.cluster_id, node)
        assert [(b.broker_id, b.port) for b in r.brokers] == [(node, floe_agent.port)]
        assert r.cluster_authorized_operations == -(2**31)
    r = wire.call(DescribeClusterRequest(include_cluster_authorized_operations=True), 0)
    assert r.cluster_authorized_operations & (1 << 12)  # IDEMPOTENT_WRITE
    r = wire.call(DescribeClusterRequest(endpoint_type=2), 1)
    assert (r.error_code, r.brokers) == (ErrorCode.UNSUPPORTED_ENDPOINT_TYPE, [])


def test_delete_records_errors(floe_agent, wire):
    create(wire, CT(name="dr", num_partitions=2, replication_factor=1))
    P = DR.DeleteRecordsPartition
    for v in range(DeleteRecordsRequest.MIN_VERSION, DeleteRecordsRequest.MAX_VERSION + 1):
        res = wire.call(
            DeleteRecordsRequest(
                topics=[
                    DR(name="dr", partitions=[P(partition_index=0, offset=-1), P(partition_index=1, offset=1), P(partition_index=2, offset=0), P(partition_index=0, offset=-5)]),
                    DR(name="nope", partitions=[P(partition_index=0, offset=0)]),
                ],
                timeout_ms=1000,
            ),
            v,
        )
        got = [(t.name, p.partition_index, p.error_code, p.low_watermark) for t in res.topics for p in t.partitions]
        assert got == [
            ("dr", 0, 0, 0),
            ("dr", 1, ErrorCode.OFFSET_OUT_OF_RANGE, -1),
            ("dr", 2, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, -1),
            ("dr", 0, ErrorCode.OFFSET_OUT_OF_RANGE, -1),
            ("nope", 0, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, -1),
        ], v


def test_init_producer_id(wire):
    ids = set()
    for v in range(InitProducerIdRequest.MIN_VERSION, InitProducerIdRequest.MAX_VERSION + 1):
        r = wire.call(InitProducerIdRequest(transactional_id=None, transaction_timeout_ms=60000), v)
        assert (r.error_code, r.producer_epoch) == (0, 0), v
        ids.add(r.producer_id)
    assert len(ids) == InitProducerIdRequest.MAX_VERSION + 1 and min(ids) >= 0

    # KIP-360: an idempotent producer asking for a new epoch gets a fresh id.
    old = wire.call(InitProducerIdRequest(transactional_id=None, transaction_timeout_ms=60000), 4)
    bumped = wire.call(
        InitProducerIdRequest(transactional_id=None, transaction_timeout_ms=60000, producer_id=old.producer_id, producer_epoch=0), 4
    )
    assert bumped.error_code == 0 and bumped.producer_id not in ids | {old.producer_id}
    bad = wire.call(InitProducerIdRequest(transactional_id=None, producer_id=-1, producer_epoch=3), 3)
    assert bad.error_code == ErrorCode.INVALID_REQUEST

    # Transactional ids keep their producer id and bump the epoch (fencing).
    first = wire.call(InitProducerIdRequest(transactional_id="txn-a", transaction_timeout_ms=60000), 1)
    second = wire.call(InitProducerIdRequest(transactional_id="txn-a", transaction_timeout_ms=60000), 5)
    assert (first.error_code, second.error_code) == (0, 0)
    assert second.producer_id == first.producer_id and second.producer_epoch == first.producer_epoch + 1

    for timeout in (0, 900_001):
        r = wire.call(InitProducerIdRequest(transactional_id="txn-b", transaction_timeout_ms=timeout), 2)
        assert r.error_code == ErrorCode.INVALID_TRANSACTION_TIMEOUT
    r = wire.call(InitProducerIdRequest(transactional_id="txn-c", transaction_timeout_ms=1000, enable2_pc=True), 6)
    assert r.error_code == ErrorCode.INVALID_REQUEST
