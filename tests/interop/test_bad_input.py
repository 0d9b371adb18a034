"""Bad input against the live agent process: each gets a clear error code or a closed
connection, nothing is committed for it, and the agent keeps serving other clients."""

from __future__ import annotations

import os
import struct

import pytest

from kafka_protocol.errors import ErrorCode
from kafka_protocol.framing import RequestHeader, encode_request
from kafka_protocol.messages import (
    ApiVersionsRequest,
    ApiVersionsResponse,
    MetadataRequest,
    MetadataResponse,
    ProduceRequest,
    ProduceResponse,
)
from kafka_protocol.records import Compression
from tests.interop._clients import (
    confluent_consume,
    confluent_produce,
    create_topic,
    make_records,
    unique_topic,
)
from tests.interop._raw import RawConn, produce_request, record_batch

pytestmark = [pytest.mark.interop, pytest.mark.timeout(120)]


def _still_serving(agent) -> None:
    """A fresh librdkafka client can produce and consume through the same agent."""
    topic = unique_topic("after-bad")
    recs = make_records("ok", 1, 5)
    acked = confluent_produce(agent.bootstrap, topic, recs)  # auto-created, 1 partition
    assert [r.offset for r in acked] == list(range(5))
    got = confluent_consume(agent.bootstrap, topic, {0: 5})
    assert [r.value for r in sorted(got, key=lambda r: r.offset)] == [r.value for r in recs]
    assert agent.running(), "the agent process died"


def _hwm(conn: RawConn, topic: str, partitions: list[int]) -> dict[int, int]:
    from kafka_protocol.messages import ListOffsetsRequest, ListOffsetsResponse

    T = ListOffsetsRequest.ListOffsetsTopic
    P = T.ListOffsetsPartition
    req = ListOffsetsRequest(
        replica_id=-1,
        topics=[T(name=topic, partitions=[P(partition_index=p, timestamp=-1) for p in partitions])],
    )
    resp = conn.request(req, ListOffsetsResponse, 1)
    out = {}
    for p in resp.topics[0].partitions:
        assert p.error_code == 0, p
        out[p.partition_index] = p.offset
    return out


def test_garbage_bytes_close_the_connection(shared_agent) -> None:
    with RawConn(shared_agent.port) as c:
        c.send_raw(b"GET / HTTP/1.1\r\nHost: floe\r\n\r\n")  # size 0x47455420: over the frame cap
        assert c.closed_by_peer(), "HTTP garbage did not close the connection"
    with RawConn(shared_agent.port) as c:
        # a well-sized frame whose contents are random: bad header or bad body
        junk = os.urandom(64)
        c.send_raw(struct.pack(">i", len(junk)) + struct.pack(">hhi", 3, 12, 1) + junk[8:])
        assert c.closed_by_peer(), "random Metadata v12 body did not close the connection"
    with RawConn(shared_agent.port) as c:
        c.send_raw(struct.pack(">i", -5) + b"xxxx")
        assert c.closed_by_peer(), "negative frame size did not close the connection"
    _still_serving(shared_agent)


def test_oversized_frame_is_refused_without_buffering(shared_agent) -> None:
    with RawConn(shared_agent.port) as c:
        c.send_raw(
            struct.pack(">i", 200 * 1024 * 1024) + b"\x00" * 1024
        )  # > max_request_bytes (100 MiB)
        assert c.closed_by_peer(), "a 200 MiB frame declaration did not close the connection"
    _still_serving(shared_agent)


def test_unknown_api_key_and_version(shared_agent) -> None:
    with RawConn(shared_agent.port) as c:
        corr = c.send(ApiVersionsRequest(), 0)
        resp = c.recv(ApiVersionsResponse, 0, corr)
        assert resp.error_code == 0 and resp.api_keys
    with RawConn(shared_agent.port) as c:
        # ApiVersions v99 (a future client): a v3 frame with the version field patched
        frame = bytearray(
            encode_request(
                RequestHeader(18, 3, 7, "raw"),
                ApiVersionsRequest(client_software_name="raw", client_software_version="1"),
            )
        )
        struct.pack_into(">h", frame, 6, 99)
        c.send_raw(bytes(frame))
        resp = c.recv(ApiVersionsResponse, 0, 7)
        assert resp.error_code == ErrorCode.UNSUPPORTED_VERSION
        assert any(k.api_key == 0 for k in resp.api_keys)
    with RawConn(shared_agent.port) as c:
        # an api key nobody knows (int16 9999): an error or a closed connection, never a hang
        c.send_raw(struct.pack(">i", 10) + struct.pack(">hhi", 9999, 0, 8) + struct.pack(">h", -1))
        assert c.closed_by_peer(), "unknown api key 9999 got neither an error nor a close"
    with RawConn(shared_agent.port) as c:
        # a known api at an unsupported version: Metadata v99
        c.send_raw(struct.pack(">i", 10) + struct.pack(">hhi", 3, 99, 9) + struct.pack(">h", -1))
        assert c.closed_by_peer(), "Metadata v99 got neither an error nor a close"
    _still_serving(shared_agent)


def test_produce_with_corrupt_crc(shared_agent) -> None:
    topic = unique_topic("crc")
    create_topic(shared_agent.bootstrap, topic, 2)
    good = record_batch(3, "good")
    bad = bytearray(record_batch(3, "bad"))
    bad[-2] ^= 0xFF  # a byte inside the records: the CRC32C no longer matches
    with RawConn(shared_agent.port) as c:
        resp = c.request(produce_request(topic, {0: bytes(bad), 1: good}), ProduceResponse, 7)
        parts = {p.index: p for p in resp.responses[0].partition_responses}
        assert parts[0].error_code == ErrorCode.CORRUPT_MESSAGE, parts[0]
        assert parts[0].base_offset == -1
        assert parts[1].error_code == 0, parts[1]
        assert parts[1].base_offset == 0
        # the same connection still works, and nothing of the corrupt batch was committed
        md = c.request(MetadataRequest(topics=None), MetadataResponse, 1)
        assert any(t.name == topic for t in md.topics)
        assert _hwm(c, topic, [0, 1]) == {0: 0, 1: 3}

        # compressed batch with a flipped byte in the compressed payload
        zbad = bytearray(record_batch(50, "z" * 40, compression=Compression.ZSTD))
        zbad[70] ^= 0x55
        resp = c.request(produce_request(topic, {0: bytes(zbad)}), ProduceResponse, 7)
        assert resp.responses[0].partition_responses[0].error_code == ErrorCode.CORRUPT_MESSAGE

        # a truncated batch, and a record set holding two batches
        resp = c.request(produce_request(topic, {0: good[:-5]}), ProduceResponse, 7)
        assert resp.responses[0].partition_responses[0].error_code == ErrorCode.CORRUPT_MESSAGE
        resp = c.request(produce_request(topic, {0: good + good}), ProduceResponse, 7)
        assert resp.responses[0].partition_responses[0].error_code in (
            ErrorCode.CORRUPT_MESSAGE,
            ErrorCode.INVALID_RECORD,
        )
        assert _hwm(c, topic, [0, 1]) == {0: 0, 1: 3}
    _still_serving(shared_agent)


def test_truncated_produce_body_closes_connection(shared_agent) -> None:
    topic = unique_topic("trunc")
    create_topic(shared_agent.bootstrap, topic, 1)
    frame = encode_request(
        RequestHeader(ProduceRequest.API_KEY, 7, 11, "raw"),
        produce_request(topic, {0: record_batch()}),
    )
    body = frame[4:-20]  # a consistent size prefix, but the body ends inside the record set
    with RawConn(shared_agent.port) as c:
        c.send_raw(struct.pack(">i", len(body)) + body)
        assert c.closed_by_peer(), "a truncated Produce body got neither an error nor a close"
    _still_serving(shared_agent)
