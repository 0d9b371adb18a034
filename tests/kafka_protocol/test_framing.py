"""FrameDecoder, request header parsing and response framing."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kafka_protocol.exceptions import DecodeError, FrameTooLarge
from kafka_protocol.framing import (
    FrameDecoder,
    RequestHeader,
    encode_request,
    encode_response,
    parse_request_header,
)
from kafka_protocol.messages import (
    ApiVersionsRequest,
    ApiVersionsResponse,
    FetchResponse,
    MetadataRequest,
    ProduceRequest,
)


def _frame(body: bytes) -> bytes:
    return struct.pack(">i", len(body)) + body


def test_split_feeds_byte_by_byte() -> None:
    stream = _frame(b"abc") + _frame(b"") + _frame(b"x" * 1000)
    d = FrameDecoder()
    frames = []
    for i in range(len(stream)):
        frames += d.feed(stream[i : i + 1])
    assert [bytes(f) for f in frames] == [b"abc", b"", b"x" * 1000]
    assert d.buffered == 0


@given(st.lists(st.binary(max_size=300), max_size=8), st.data())
def test_arbitrary_splits(bodies: list[bytes], data: st.DataObject) -> None:
    stream = b"".join(_frame(b) for b in bodies)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=10)))
    d = FrameDecoder()
    out = []
    prev = 0
    for c in [*cuts, len(stream)]:
        out += d.feed(stream[prev:c])
        prev = c
    assert [bytes(f) for f in out] == bodies


def test_frames_survive_later_feeds() -> None:
    d = FrameDecoder()
    (f1,) = d.feed(_frame(b"first") + b"\x00\x00")
    d.feed(b"\x00\x06second")
    assert bytes(f1) == b"first"


def test_too_large_raises_before_buffering() -> None:
    d = FrameDecoder(max_frame_size=1000)
    with pytest.raises(FrameTooLarge):
        d.feed(struct.pack(">i", 1001))
    assert FrameDecoder().max_frame_size == 104857600


def test_huge_declared_size_is_not_preallocated() -> None:
    d = FrameDecoder()
    assert d.feed(struct.pack(">i", 100_000_000) + b"abc") == []
    assert d.buffered < 100


def test_negative_size() -> None:
    with pytest.raises(DecodeError):
        FrameDecoder().feed(struct.pack(">i", -1))


@pytest.mark.parametrize("version", [0, 3, 4])
def test_request_roundtrip_header_v1_and_v2(version: int) -> None:
    req = ApiVersionsRequest(client_software_name="floe", client_software_version="1")
    frame = encode_request(RequestHeader(18, version, 7, "cid"), req)
    (body,) = FrameDecoder().feed(frame)
    hdr, off = parse_request_header(body)
    assert hdr == RequestHeader(18, version, 7, "cid")
    back = ApiVersionsRequest.decode(body[off:], version)
    if version >= 3:
        assert back == req


def test_null_client_id_and_flexible_metadata() -> None:
    req = MetadataRequest(topics=None)
    frame = encode_request(RequestHeader(3, 12, 1, None), req)
    hdr, off = parse_request_header(memoryview(frame)[4:])
    assert hdr.client_id is None
    assert MetadataRequest.decode(memoryview(frame)[4 + off :], 12).topics is None


def test_unknown_api_key_parsed_as_v1() -> None:
    body = struct.pack(">hhi", 999, 5, 42) + struct.pack(">h", 2) + b"id" + b"rest"
    hdr, off = parse_request_header(body)
    assert (hdr.api_key, hdr.correlation_id, hdr.client_id) == (999, 42, "id")
    assert body[off:] == b"rest"


@pytest.mark.parametrize("cut", range(0, 12))
def test_truncated_header(cut: int) -> None:
    frame = encode_request(RequestHeader(0, 9, 1, "client"), ProduceRequest(acks=1))[4:]
    with pytest.raises(DecodeError):
        parse_request_header(frame[:cut])


def test_response_header_versions() -> None:
    parts = encode_response(5, ApiVersionsResponse(), 3)
    data = b"".join(parts)
    assert struct.unpack(">ii", data[:8]) == (len(data) - 4, 5)
    assert ApiVersionsResponse.decode(data[8:], 3) == ApiVersionsResponse()  # header v0
    parts = encode_response(6, FetchResponse(), 12)
    data = b"".join(parts)
    assert data[8] == 0  # header v1 tagged fields
    assert FetchResponse.decode(data[9:], 12) == FetchResponse()


def test_big_fetch_response_is_not_joined() -> None:
    P = FetchResponse.FetchableTopicResponse.PartitionData
    records = b"r" * (1 << 20)
    resp = FetchResponse(
        responses=[FetchResponse.FetchableTopicResponse(topic="t", partitions=[P(records=records)])]
    )
    parts = encode_response(1, resp, 11)
    assert any(p is records for p in parts)
    data = b"".join(parts)
    assert struct.unpack(">i", data[:4])[0] == len(data) - 4
    back = FetchResponse.decode(data[8:], 11)
    assert back.responses[0].partitions[0].records == records
