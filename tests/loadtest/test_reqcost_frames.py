"""loadtest.reqcost's requests (issue 18's width comparison): with ``--partitions N
--per-request P`` the pre-encoded Produce requests, sent in turn, carry P
one-record batches for P distinct partitions each and cover every partition
equally often, so 16 and 10,000 partitions are compared with the same request
shape."""

from __future__ import annotations

from collections import Counter

import pytest

from kafka_protocol.framing import parse_request_header
from kafka_protocol.messages import ProduceRequest
from kafka_protocol.records import iter_batches
from loadtest.reqcost import TOPIC, _frames


@pytest.mark.parametrize(("partitions", "per_request"), [(16, 1), (16, 16), (10, 4), (1000, 16)])
def test_frames_cover_every_partition_evenly(partitions: int, per_request: int) -> None:
    frames = _frames(100, -1, partitions, per_request)
    seen: Counter[int] = Counter()
    for frame in frames:
        header, pos = parse_request_header(memoryview(frame)[4:])
        assert (header.api_key, header.api_version) == (0, 9)
        req = ProduceRequest.decode(memoryview(frame)[4 + pos :], 9)
        (topic,) = req.topic_data
        assert topic.name == TOPIC
        parts = [p.index for p in topic.partition_data]
        assert len(set(parts)) == len(parts) == per_request
        for p in topic.partition_data:
            (batch,) = list(iter_batches(p.records))
            assert batch.records_count == 1
        seen.update(parts)
    assert set(seen) == set(range(partitions))
    assert len(set(seen.values())) == 1  # every partition equally often
