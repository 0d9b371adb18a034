"""After the ack, off the critical path: journal objects rewritten into standard objects.

Where it sits: behind :mod:`agent.produce.ack`. With a journal tier (issue 40)
the pipeline seals small journal objects every few milliseconds, PUTs each to a
quorum of journal buckets (:class:`objectstore.quorum.QuorumStore`) and commits
it, so produce requests are answered without waiting for a standard-bucket
PUT. Once answered, a committed journal object's bytes are handed to the
:class:`Consolidator`, which gathers them for ``consolidate_interval_ms`` or
``consolidate_bytes`` and then:

1. reads the batch rows the metastore holds for those objects
   (``batches_in_object_keys``: offsets, append times, run rows unpacked);
2. lays the batches out as one standard segment from the bytes it kept (no GET)
   and PUTs it to the standard bucket (create-only key);
3. repoints the rows by compare-and-swap (``swap_batches``, the compactor's
   merge), a few journal objects per transaction so that no swap holds the
   commits back for long: offsets never change, so readers see neither a gap
   nor a duplicate across the switch; the journal objects, no longer referenced, become
   ``deleting`` and the GC removes them from every journal bucket after its
   grace period (readers holding old lookups still find them until then).

A conflict (retention, DeleteRecords or the compactor changed a row meanwhile)
changes nothing: the new object is registered as ``deleting`` and the journal
objects stay, for the compactor's L0 merge, which also takes the journal
objects of an agent killed before it consolidated them. What the consolidator
holds is bounded (``4 x consolidate_bytes``; beyond, the oldest are left to the
compactor).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Callable

from agent.clock import Clock
from agent.metrics import METRICS
from agent.produce.keys import object_key
from metastore.types import NewObject, StoredBatch
from objectstore.base import ObjectStore
from objectstore.errors import ObjectStoreError
from objectstore.segment import BatchMeta, SegmentBuilder

log = logging.getLogger(__name__)

_HOLD_FACTOR = 4  # held bytes beyond consolidate_bytes x this are left to the compactor
_SWAP_OBJECTS = 16  # journal objects whose rows move in one swap transaction


class Consolidator:
    """Gathers committed journal objects and rewrites them into standard segments."""

    def __init__(
        self,
        store: ObjectStore,
        metastore: object,
        *,
        agent_id: str,
        interval_ms: int,
        max_bytes: int,
        clock: Clock,
        on_uploaded: Callable[[str, bytes], None] | None = None,
        prefix: str = "segments/",
    ) -> None:
        self._store = store
        self._meta = metastore
        self._agent_id = agent_id
        self._interval = interval_ms / 1000.0
        self._max_bytes = max_bytes
        self._clock = clock
        self._on_uploaded = on_uploaded
        self._prefix = prefix
        self._held: list[tuple[str, bytes]] = []
        self._held_bytes = 0
        self._first_at: float | None = None
        self._wake = asyncio.Event()
        self._closing = False
        self._task: asyncio.Task[None] | None = None
        self._seq = 0

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="floe-consolidator")

    def add(self, key: str, data: bytes) -> None:
        """A journal object whose commit has returned (its requests are answered)."""
        if self._first_at is None:
            self._first_at = self._clock.monotonic()
            self._wake.set()  # the loop starts its timer
        self._held.append((key, data))
        self._held_bytes += len(data)
        while self._held_bytes > _HOLD_FACTOR * self._max_bytes and len(self._held) > 1:
            old_key, old = self._held.pop(0)  # left in the journal for the compactor
            self._held_bytes -= len(old)
            log.warning("consolidation is behind: %s left to the compactor", old_key)
        METRICS.journal_unconsolidated_bytes.set(self._held_bytes)
        if self._held_bytes >= self._max_bytes:
            self._wake.set()

    async def close(self) -> None:
        """Consolidate what is held, then stop."""
        self._closing = True
        self._wake.set()
        if self._task is not None:
            await self._task

    async def _run(self) -> None:
        while True:
            timeout = None
            if self._first_at is not None:
                timeout = max(0.0, self._first_at + self._interval - self._clock.monotonic())
            try:
                await asyncio.wait_for(self._wake.wait(), timeout)
            except TimeoutError:
                pass
            self._wake.clear()
            due = (
                self._first_at is not None
                and self._clock.monotonic() >= self._first_at + self._interval
            )
            if not (due or self._closing or self._held_bytes >= self._max_bytes):
                continue
            take: list[tuple[str, bytes]] = []
            size = 0
            while self._held and (size < self._max_bytes or not take):
                k, d = self._held.pop(0)
                take.append((k, d))
                size += len(d)
            self._held_bytes -= size
            self._first_at = self._clock.monotonic() if self._held else None
            METRICS.journal_unconsolidated_bytes.set(self._held_bytes)
            if take:
                try:
                    await self.consolidate(take)
                except Exception as e:  # the journal keeps them; the compactor merges them
                    METRICS.consolidations.labels("failed").inc()
                    log.warning(
                        "consolidation of %d journal objects failed: %s: %s",
                        len(take),
                        type(e).__name__,
                        e,
                    )
            if self._closing and not self._held:
                return

    async def consolidate(self, items: list[tuple[str, bytes]]) -> str | None:
        """Rewrite ``items`` (journal key, bytes) into one standard object; its key, or None."""
        data_of = dict(items)
        rows: list[StoredBatch] = [
            r
            for r in await self._meta.batches_in_object_keys(list(data_of))  # type: ignore[attr-defined]
            if r.object_key in data_of
        ]
        if not rows:
            return None
        builder = SegmentBuilder()
        for r in rows:
            raw = data_of[r.object_key][r.byte_pos : r.byte_pos + r.byte_len]
            builder.add(r.topic_id, r.partition, raw, BatchMeta.from_record_batch(raw))
        data, entries = await asyncio.to_thread(builder.finish)
        key = self._key()
        try:
            await self._store.put(key, data)
        except ObjectStoreError:
            METRICS.upload_failures.inc()
            raise
        METRICS.puts.inc()
        METRICS.put_bytes.inc(len(data))
        replacements = [
            dataclasses.replace(r, object_key=key, byte_pos=e.byte_pos, byte_len=e.byte_len)
            for r, e in zip(rows, entries, strict=True)
        ]
        # The rows move in several short swaps, a few journal objects each (the first
        # registers the new object): each swap holds the partitions' lock (Postgres)
        # or the database's (SQLite) for a few ms, so commits on the journal's
        # critical path are not held up behind one long swap. Offsets never change,
        # so a reader sees either copy of a batch, never a gap.
        new_objects = [NewObject(key, len(data), 0)]
        order = {k: i // _SWAP_OBJECTS for i, (k, _) in enumerate(items)}
        parts: dict[int, list[int]] = {}
        for i, r in enumerate(rows):
            parts.setdefault(order[r.object_key], []).append(i)
        for idx in parts.values():
            t0 = time.perf_counter()
            swap = await self._meta.swap_batches(  # type: ignore[attr-defined]
                [rows[i] for i in idx], [replacements[i] for i in idx], new_objects
            )
            METRICS.consolidation_swap_seconds.observe(time.perf_counter() - t0)
            if not swap.ok:
                METRICS.consolidations.labels("conflict").inc()
                log.info(
                    "consolidation into %s conflicted (%s); the journal objects stay",
                    key,
                    swap.message,
                )
                return None
            new_objects = []
        METRICS.consolidations.labels("ok").inc()
        METRICS.consolidated_bytes.inc(len(data))
        if self._on_uploaded is not None:
            self._on_uploaded(key, data)
        return key

    def _key(self) -> str:
        self._seq += 1
        return object_key(self._prefix, self._agent_id, f"c{self._seq:07d}")
