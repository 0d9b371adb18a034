"""Codec micro-benchmark: ``python -m loadtest.codec``.

Measures our generated codec against kafka-python's (the baseline) on the two
hot paths of an agent: decoding a Produce request and encoding a Fetch
response, each 16 partitions carrying 1 MiB of record batches in total.
"""

from __future__ import annotations

import functools
import os
import time
from collections.abc import Callable
from typing import Any

from kafka_protocol.messages import FetchResponse, ProduceRequest

PARTITIONS = 16
TOTAL = 1 << 20


def _bench(fn: Callable[[], Any], min_time: float = 0.5) -> float:
    """Best-of-5 µs per call."""
    n = 1
    while True:
        t = time.perf_counter()
        for _ in range(n):
            fn()
        dt = time.perf_counter() - t
        if dt > min_time / 5:
            break
        n *= 2
    best = dt
    for _ in range(4):
        t = time.perf_counter()
        for _ in range(n):
            fn()
        best = min(best, time.perf_counter() - t)
    return best / n * 1e6


def _produce(records: list[bytes]) -> ProduceRequest:
    P = ProduceRequest.TopicProduceData
    return ProduceRequest(
        acks=-1,
        timeout_ms=30000,
        topic_data=[
            P(
                name="bench-topic",
                partition_data=[
                    P.PartitionProduceData(index=i, records=r) for i, r in enumerate(records)
                ],
            )
        ],
    )


def _fetch(records: list[bytes]) -> FetchResponse:
    T = FetchResponse.FetchableTopicResponse
    return FetchResponse(
        responses=[
            T(
                topic="bench-topic",
                partitions=[
                    T.PartitionData(
                        partition_index=i,
                        high_watermark=1000,
                        last_stable_offset=1000,
                        log_start_offset=0,
                        records=r,
                    )
                    for i, r in enumerate(records)
                ],
            )
        ]
    )


def main() -> None:
    from kafka.protocol.consumer import FetchResponse as KFetchResponse
    from kafka.protocol.producer import ProduceRequest as KProduceRequest

    records = [os.urandom(TOTAL // PARTITIONS) for _ in range(PARTITIONS)]
    print(f"{PARTITIONS} partitions, {TOTAL} bytes of records in total; µs per call\n")
    print(f"{'case':38} {'floe':>10} {'kafka-python':>14} {'speedup':>9}")
    for v in (7, 9, 13):
        req = _produce(records)
        if v >= 13:
            import uuid

            req.topic_data[0].topic_id = uuid.UUID(int=1)
        data = req.encode(v)
        ours = _bench(functools.partial(ProduceRequest.decode, data, v))
        theirs = _bench(functools.partial(KProduceRequest.decode, data, version=v))
        print(
            f"{f'Produce v{v} request decode':38} {ours:10.1f} {theirs:14.1f} {theirs / ours:8.1f}x"
        )
    for v in (11, 12, 16):
        resp = _fetch(records)
        K = KFetchResponse
        kresp = K(
            version=v,
            responses=[
                K.FetchableTopicResponse(
                    topic="bench-topic",
                    partitions=[
                        K.FetchableTopicResponse.PartitionData(
                            partition_index=i,
                            high_watermark=1000,
                            last_stable_offset=1000,
                            log_start_offset=0,
                            records=r,
                        )
                        for i, r in enumerate(records)
                    ],
                )
            ],
        )
        assert bytes(kresp.encode()) == resp.encode(v) or v >= 13
        ours = _bench(functools.partial(resp.encode_parts, v))
        joined = _bench(functools.partial(resp.encode, v))
        theirs = _bench(kresp.encode)
        print(
            f"{f'Fetch v{v} response encode_parts':38} {ours:10.1f} {theirs:14.1f} {theirs / ours:8.1f}x"
        )
        print(
            f"{f'Fetch v{v} response encode (joined)':38} {joined:10.1f} {theirs:14.1f} {theirs / joined:8.1f}x"
        )


if __name__ == "__main__":
    main()
