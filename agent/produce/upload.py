"""Step 3 of a produce: a sealed segment's object PUT to the store (bounded concurrency).

Where it sits: started by :mod:`agent.produce.append` when a segment is sealed;
:mod:`agent.produce.commit` waits for it. The segment is laid out (header,
batches, index footer: :class:`objectstore.segment.SegmentBuilder`) and PUT with
a create-only key, at most ``upload_concurrency`` at once (the store retries
503s and timeouts with backoff). Uploads run concurrently; commits stay in seal
order. With write-through on, the uploaded bytes go to the block cache too.
"""

from __future__ import annotations

import asyncio
import time

from agent.metrics import METRICS
from agent.produce.segment import PipelineState, Segment
from metastore.types import BatchToCommit

_FINISH_IN_THREAD = 1 << 20


class Uploader(PipelineState):
    async def _upload(self, seg: Segment) -> tuple[int, list[BatchToCommit]]:
        if seg.builder.size >= _FINISH_IN_THREAD:
            # Laying out a multi-MiB object is a memcpy: keep it off the event loop
            # (bytes.join drops the GIL for large joins).
            data, entries = await asyncio.to_thread(seg.builder.finish)
        else:
            data, entries = seg.builder.finish()
        batches = [
            BatchToCommit(
                e.topic_id, e.partition, e.byte_pos, e.byte_len, e.record_count,
                e.last_offset_delta, e.base_timestamp, e.max_timestamp,
                e.producer_id, e.producer_epoch, e.base_sequence,
                bool(e.attributes & 0x10),
            )
            for e in entries
        ]
        async with self._upload_sem:
            t0 = time.perf_counter()
            await self._store.put(seg.key, data)
            METRICS.put_seconds.observe(time.perf_counter() - t0)
        METRICS.puts.inc()
        METRICS.put_bytes.inc(len(data))
        if self._on_uploaded is not None:
            self._on_uploaded(seg.key, data)
        return len(data), batches
