"""Records held as parts (BufferParts): encoded exactly as the joined bytes, the parts uncopied."""

from __future__ import annotations

import os

import pytest

from kafka_protocol.messages import FetchResponse
from kafka_protocol.messages._runtime import ZERO_COPY_THRESHOLD, BufferParts

Topic = FetchResponse.FetchableTopicResponse
Part = Topic.PartitionData


def _response(records: bytes | BufferParts) -> FetchResponse:
    parts = [Part(partition_index=i, high_watermark=9, records=records) for i in range(2)]
    return FetchResponse(session_id=7, responses=[Topic(topic="t", partitions=parts)])


@pytest.mark.parametrize("version", [4, 11, 12, 16, 18])  # non-compact and compact records
@pytest.mark.parametrize("size", [10, ZERO_COPY_THRESHOLD - 1, ZERO_COPY_THRESHOLD, 100_000])
def test_parts_encode_as_their_join_and_pass_through_uncopied(version: int, size: int) -> None:
    data = os.urandom(size)
    block = memoryview(data)
    views = [block[: size // 3], b"patched", block[size // 3 + 7 :]]
    joined = b"".join(views)
    parts = BufferParts(views)
    assert len(parts) == len(joined) and parts == joined and bytes(parts) == joined

    wire = _response(parts).encode(version)
    assert wire == _response(joined).encode(version)
    decoded = FetchResponse.decode(wire, version)
    assert [bytes(p.records) for p in decoded.responses[0].partitions] == [joined, joined]

    out = _response(parts).encode_parts(version)
    if size >= ZERO_COPY_THRESHOLD:  # the views themselves go to the socket, twice
        assert sum(1 for p in out if p is views[0] or p is views[2]) == 4
    else:
        assert not any(p is views[0] for p in out)
