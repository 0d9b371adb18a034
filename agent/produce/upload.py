"""Step 3 of a produce: a sealed segment's object PUT to the store (bounded concurrency).

Where it sits: started by :mod:`agent.produce.append` when a segment is sealed;
:mod:`agent.produce.commit` waits for it. The segment is laid out (header,
batches, index footer: :class:`objectstore.segment.SegmentBuilder`) and PUT with
a create-only key, at most ``upload_concurrency`` at once (the store retries
503s and timeouts with backoff). Uploads run concurrently; commits stay in seal
order. With write-through on, the uploaded bytes go to the block cache too.

With a journal tier the key is under ``journal/`` and the PUT returns once a
quorum of the journal buckets holds the object (:mod:`objectstore.quorum`); if
the quorum is lost (two of three buckets down) the same bytes go to the standard
bucket under a standard key instead: nothing is acknowledged on fewer copies
than the quorum, and producers see no error.
"""

from __future__ import annotations

import asyncio
import logging
import time

from agent.metrics import METRICS
from agent.produce.segment import PipelineState, Segment
from metastore.types import BatchToCommit
from objectstore.errors import ObjectStoreError
from objectstore.journal import JOURNAL_PREFIX, is_journal_key

log = logging.getLogger(__name__)

_FINISH_IN_THREAD = 1 << 20


class Uploader(PipelineState):
    async def _upload(self, seg: Segment) -> tuple[int, list[BatchToCommit]]:
        if seg.builder.size >= _FINISH_IN_THREAD:
            # Laying out a multi-MiB object is a memcpy: keep it off the event loop
            # (bytes.join drops the GIL for large joins).
            data, entries = await asyncio.to_thread(seg.builder.finish)
        else:
            data, entries = seg.builder.finish()
        # One row per batch (~1 KiB each at 1,000 partitions): unpacked and built as a
        # tuple in one step, not through 12 attribute reads and the keyword __new__.
        new = tuple.__new__
        batches: list[BatchToCommit] = [
            new(BatchToCommit, (t, p, pos, n, count, lod, bts, mts, pid, epoch, seq, attrs & 0x10 != 0))
            for t, p, pos, n, count, mts, bts, lod, pid, epoch, seq, attrs in entries
        ]
        async with self._upload_sem:
            t0 = time.perf_counter()
            if is_journal_key(seg.key):
                await self._put_journal(seg, data)
            else:
                await self._store.put(seg.key, data)
                METRICS.puts.inc()
                METRICS.put_bytes.inc(len(data))
            METRICS.put_seconds.observe(time.perf_counter() - t0)
        if self._on_uploaded is not None:
            self._on_uploaded(seg.key, data)
        return len(data), batches

    async def _put_journal(self, seg: Segment, data: bytes) -> None:
        try:
            await self._store.put(seg.key, data)
        except ObjectStoreError as e:
            standard = "segments/" + seg.key[len(JOURNAL_PREFIX) :]
            log.warning("journal quorum lost for %s (%s): written to the standard bucket as %s", seg.key, e, standard)
            METRICS.journal_fallbacks.inc()
            seg.key = standard  # committed under this key (the committer reads it after the upload)
            await self._store.put(seg.key, data)
            METRICS.puts.inc()
            METRICS.put_bytes.inc(len(data))
            return
        METRICS.journal_objects.inc()
        if self._consolidator is not None:
            seg.data = data
