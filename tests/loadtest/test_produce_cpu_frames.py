"""loadtest.produce_cpu's request shapes (issue 41): ``wide`` is what librdkafka sends at
1,000 partitions (many partitions per request, one record per batch), ``narrow`` what
it sends at 16 (every partition in each request, many records per batch); sent in turn
the pre-encoded requests cover every partition equally often."""

from __future__ import annotations

from collections import Counter

import pytest

from kafka_protocol.framing import parse_request_header
from kafka_protocol.messages import ProduceRequest
from kafka_protocol.records import iter_batches
from loadtest.produce_cpu import SHAPES, frames


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_shapes_cover_every_partition_with_the_right_batches(shape: str) -> None:
    partitions, per_request, records = SHAPES[shape]
    seen: Counter[int] = Counter()
    for frame in frames("t", partitions, per_request, records, 64):
        header, pos = parse_request_header(memoryview(frame)[4:])
        assert (header.api_key, header.api_version) == (0, 9)
        req = ProduceRequest.decode(memoryview(frame)[4 + pos :], 9)
        (topic,) = req.topic_data
        parts = [p.index for p in topic.partition_data]
        assert len(set(parts)) == len(parts) == per_request
        for p in topic.partition_data:
            (batch,) = list(iter_batches(p.records))
            assert batch.records_count == records
            batch.validate()  # the agent's CRC check passes
        seen.update(parts)
    assert set(seen) == set(range(partitions))
    assert len(set(seen.values())) == 1
