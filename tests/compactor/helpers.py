"""Helpers of the compactor tests: seed segments straight into a metastore + store,
and read a partition back through the agent's real fetch reader."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass

from agent.cache import BlockCache
from agent.clock import SystemClock
from agent.fetch.reader import FetchReader
from kafka_protocol.compression import Compression
from kafka_protocol.records import RecordBatchBuilder, iter_batches
from metastore import BatchToCommit, ErrorCode, Metastore
from objectstore.base import ObjectStore
from objectstore.segment import BatchMeta, SegmentBuilder


@dataclass(frozen=True)
class Rec:
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    timestamp: int
    headers: tuple[tuple[str, bytes | None], ...] = ()


def make_batch(
    records: Sequence[tuple[bytes | None, bytes | None]],
    ts: int,
    codec: Compression = Compression.NONE,
    headers: Sequence[tuple[str, bytes | None]] = (),
) -> bytes:
    b = RecordBatchBuilder(codec)
    for i, (k, v) in enumerate(records):
        b.append(k, v, headers, timestamp_ms=ts + i)
    return b.build()


async def commit_segment(
    meta: Metastore,
    store: ObjectStore,
    key: str,
    batches: Sequence[tuple[uuid.UUID, int, bytes]],
) -> list[int]:
    """PUT one segment holding ``batches`` and commit it; returns base offsets."""
    sb = SegmentBuilder()
    for topic_id, partition, data in batches:
        sb.add(topic_id, partition, data, BatchMeta.from_record_batch(data))
    data, entries = sb.finish()
    await store.put(key, data)
    commits = [
        BatchToCommit(
            e.topic_id,
            e.partition,
            e.byte_pos,
            e.byte_len,
            e.record_count,
            e.last_offset_delta,
            e.base_timestamp,
            e.max_timestamp,
        )
        for e in entries
    ]
    results = await meta.commit_object(key, len(data), "test-agent", commits)
    assert all(r.error == ErrorCode.NONE for r in results)
    return [r.base_offset for r in results]


def fetch_reader(meta: Metastore, store: ObjectStore, block: int = 1 << 20) -> FetchReader:
    cache = BlockCache(store.get, capacity_bytes=1 << 28, block_size=block)
    return FetchReader(meta, cache, SystemClock(), lookup_ttl_ms=0)


async def read_partition(
    meta: Metastore,
    store: ObjectStore,
    topic_id: uuid.UUID,
    partition: int,
    start: int | None = None,
) -> list[Rec]:
    """Every record from ``start`` (default: the log start) through the fetch path."""
    reader = fetch_reader(meta, store)
    out: list[Rec] = []
    res = await meta.find_batches(topic_id, partition, 0 if start is None else start, 1)
    offset = res.log_start_offset if start is None else start
    while True:
        res = await reader.find(topic_id, partition, offset, 1 << 20, fresh=True)
        assert res.error == ErrorCode.NONE, res
        if not res.batches:
            return out
        data = await reader.read(res.batches)
        for view in iter_batches(data, validate=True):
            for r in view.records():
                if r.offset >= offset:
                    out.append(
                        Rec(partition, r.offset, r.key, r.value, r.timestamp, tuple(r.headers))
                    )
            offset = max(offset, view.last_offset + 1)
