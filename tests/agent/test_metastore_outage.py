"""Postgres stopped under a running agent (issue 15): retriable Kafka errors, no tracebacks.

A real agent process on a private Postgres (stopped and restarted by the
test, :meth:`PostgresServer.pause`/``resume``) and a ``file://`` object store.
While Postgres is down, each request that needs the metastore is sent over a
raw connection and must be answered on that same connection, with a
retriable error code where it has one (the client retries), never a closed
connection; the agent logs no traceback. When Postgres is back, a produce +
consume round trip through confluent-kafka works again.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from kafka_protocol.errors import is_retriable
from kafka_protocol.framing import RequestHeader, encode_request
from metastore.pgserver import PostgresServer, find_pg_bin
from tests.agent.test_memory_attacks import create_topic, round_trip
from tests.fixtures.agent_process import AgentProcess, Backend


@pytest.mark.parametrize("api_key", sorted(__import__("agent.handlers", fromlist=["REGISTRY"]).REGISTRY))
def test_every_api_has_an_unavailable_answer(api_key: int) -> None:
    """The generic retriable answer encodes at every version of every served API."""
    from agent.handlers import REGISTRY
    from agent.handlers._unavailable import unavailable_response

    spec = REGISTRY[api_key]
    resp = unavailable_response(spec, spec.request_cls(), api_key, ConnectionRefusedError(111, "refused"))
    for v in range(spec.min_version, spec.max_version + 1):
        resp.encode(v)
    assert any(c and is_retriable(c) for c in _codes(resp)) or not _codes(resp)


@pytest.fixture
def pg() -> Iterator[PostgresServer]:
    if find_pg_bin() is None:
        pytest.skip("PostgreSQL binaries not installed")
    server = PostgresServer().start()
    try:
        yield server
    finally:
        server.stop()


def _call(port: int, api_key: int, version: int, request: Any) -> Any:
    """Send one request; decode its response (fails if the connection is closed)."""
    from kafka_protocol.messages import __dict__ as messages

    resp_cls = messages[type(request).__name__.replace("Request", "Response")]
    with contextlib.closing(socket.create_connection(("127.0.0.1", port), timeout=40)) as s:
        s.sendall(encode_request(RequestHeader(api_key, version, 7, "outage"), request))
        head = b""
        while len(head) < 4:
            chunk = s.recv(4 - len(head))
            assert chunk, f"api {api_key}: the agent closed the connection instead of answering"
            head += chunk
        (size,) = struct.unpack(">i", head)
        body = b""
        while len(body) < size:
            chunk = s.recv(size - len(body))
            assert chunk, f"api {api_key}: connection closed mid-response"
            body += chunk
    hv = resp_cls.header_version(version) if hasattr(resp_cls, "header_version") else 0
    at = 4 + (1 if hv >= 1 else 0)
    return resp_cls.decode(memoryview(body)[at:], version)


def _codes(obj: Any) -> list[int]:
    """Every error_code in a decoded response, depth first."""
    out: list[int] = []
    if isinstance(obj, list):
        for x in obj:
            out += _codes(x)
        return out
    if not hasattr(obj, "__slots__") and not hasattr(obj, "__dict__"):
        return out
    names = getattr(obj, "__slots__", None) or list(vars(obj))
    for name in names:
        v = getattr(obj, name, None)
        if name == "error_code" and isinstance(v, int):
            out.append(v)
        elif isinstance(v, list):
            out += _codes(v)
    return out


@pytest.mark.slow
@pytest.mark.postgres
@pytest.mark.timeout(180)
@pytest.mark.parametrize("backend", ["sqlite-file"], indirect=True)  # only for the fixture; the test brings its own
def test_postgres_down_gives_retriable_errors(
    pg: PostgresServer, tmp_path: Path, agent_process_factory: Callable[..., AgentProcess]
) -> None:
    from kafka_protocol.messages import (
        FindCoordinatorRequest,
        InitProducerIdRequest,
        ListOffsetsRequest,
        MetadataRequest,
        OffsetCommitRequest,
        OffsetFetchRequest,
        ProduceRequest,
    )

    (tmp_path / "objects").mkdir()
    backend = Backend("pg-file", pg.url(), f"file://{tmp_path / 'objects'}")
    agent = agent_process_factory(backend=backend)
    create_topic(agent, "t")
    round_trip(agent, "t", "before")
    since = agent.log_size()
    pg.pause()
    try:
        batch = _record_batch()
        requests: list[tuple[str, int, int, Any]] = [
            ("Metadata", 3, 9, MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name="t")],
                                               allow_auto_topic_creation=False)),
            ("Produce", 0, 7, ProduceRequest(acks=-1, timeout_ms=20000, topic_data=[
                ProduceRequest.TopicProduceData(name="t", partition_data=[
                    ProduceRequest.TopicProduceData.PartitionProduceData(index=0, records=batch)])])),
            ("ListOffsets", 2, 5, ListOffsetsRequest(replica_id=-1, isolation_level=0, topics=[
                ListOffsetsRequest.ListOffsetsTopic(name="t", partitions=[
                    ListOffsetsRequest.ListOffsetsTopic.ListOffsetsPartition(partition_index=0, timestamp=-1)])])),
            ("FindCoordinator", 10, 3, FindCoordinatorRequest(key="g", key_type=0)),
            ("OffsetCommit", 8, 7, OffsetCommitRequest(group_id="g", generation_id_or_member_epoch=-1, member_id="",
                topics=[OffsetCommitRequest.OffsetCommitRequestTopic(name="t", partitions=[
                    OffsetCommitRequest.OffsetCommitRequestTopic.OffsetCommitRequestPartition(
                        partition_index=0, committed_offset=1)])])),
            ("OffsetFetch", 9, 5, OffsetFetchRequest(group_id="g", topics=None)),
            ("InitProducerId", 22, 2, InitProducerIdRequest(transactional_id=None, transaction_timeout_ms=60000)),
        ]  # fmt: skip
        seen: dict[str, list[int]] = {}
        for name, key, version, req in requests:
            t0 = time.monotonic()
            resp = _call(agent.port, key, version, req)
            codes = _codes(resp)
            seen[name] = codes
            print(f"{name}: codes {codes} in {time.monotonic() - t0:.1f} s")
            bad = [c for c in codes if c != 0 and not is_retriable(c)]
            assert not bad, f"{name}: non-retriable error codes {bad} while the metastore is down"
        assert any(c for c in seen["Produce"]), "produce cannot succeed without the metastore"
    finally:
        pg.resume()
    took = round_trip(agent, "t", "after")
    print(f"after Postgres returned: round trip {took:.2f} s")
    problems = [p for p in agent.problems(since) if "Traceback" in p or " ERROR " in p]
    assert not problems, "\n".join(problems[:20]) + agent.log_tail()


def _record_batch() -> bytes:
    """One uncompressed RecordBatch v2 with one record."""
    from kafka_protocol.compression import Compression
    from kafka_protocol.records import RecordBatchBuilder

    b = RecordBatchBuilder(Compression.NONE)
    b.append(None, b"outage", [], timestamp_ms=int(time.time() * 1000))
    return b.build()
