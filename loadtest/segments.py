"""Writing a built segment as an agent would, for the compactor benchmarks.

Where it sits: :mod:`loadtest.parquet_passes`, :mod:`loadtest.compactor_memory`
and :mod:`loadtest.iceberg` build segments with
:class:`objectstore.segment.SegmentBuilder` in process (no agent, no Kafka
client) and hand them here: the object is PUT and its batches committed to the
metastore in one call, the way the produce pipeline's upload and commit do.
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING

from metastore import BatchToCommit

if TYPE_CHECKING:
    from metastore.protocol import Metastore
    from objectstore import ObjectStore
    from objectstore.segment import SegmentBuilder


async def put_segment(store: ObjectStore, meta: Metastore, sb: SegmentBuilder, prefix: str = "agent/") -> int:
    """PUT ``sb``'s object under a fresh key below ``prefix`` and commit its batches;
    the object's size in bytes."""
    data, entries = sb.finish()
    key = f"{prefix}{uuid.uuid4().hex}"
    await store.put(key, data)
    await meta.commit_object(key, len(data), "bench", [
        BatchToCommit(e.topic_id, e.partition, e.byte_pos, e.byte_len, e.record_count,
                      e.last_offset_delta, e.base_timestamp, e.max_timestamp)
        for e in entries
    ])  # fmt: skip
    return len(data)
