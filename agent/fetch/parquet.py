"""Kafka fetches of data the compactor moved into Parquet: row groups decoded once,
record batches rebuilt vectorised, cached by block.

Where it sits: the read step (:mod:`agent.fetch.read`) hands every batch whose row
points into a Parquet object to :meth:`ParquetFetcher.read`. The object is read
through the agent's :class:`~agent.cache.BlockCache` (so the ring's peer cache
and one GET per block apply) as a random-access file of known size
(:class:`~objectstore.rangefile.RangeFile`; no HEAD, only the footer and the
row groups needed, each in one load). Each row group is decoded and its records encoded
once (:func:`objectstore.parquet_batches.encode_rows`, in a worker thread), kept
in an LRU of ``(object, row group)`` bounded by bytes, with one load in flight
per block; a batch is then a slice of those rows plus a header and a CRC
(:func:`~objectstore.parquet_batches.build_batch`).
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from agent.cache import BlockCache
from metastore.types import BatchLocation
from objectstore.parquet import BATCHES_KEY, decode_batch_infos
from objectstore.parquet_batches import (
    BatchHeader,
    EncodedRows,
    SpanMismatch,
    build_batch,
    encode_rows,
)
from objectstore.rangefile import RangeFile

log = logging.getLogger(__name__)

READ_AHEAD = 2  # row groups decoded ahead of a sequential reader
COLUMNS = ["key", "value", "offset", "timestamp", "timestampType", "headers"]
# (size, (base offset, base timestamp) of every batch row in the object)
Describe = Callable[[str], Awaitable[tuple[int, list[tuple[int, int]]]]]


@dataclass(frozen=True, slots=True)
class _Layout:
    """One Parquet object: its footer, and per row group ``(index, min offset, max
    offset, first byte, end byte)``."""

    metadata: Any  # pyarrow.parquet.FileMetaData
    size: int
    groups: tuple[tuple[int, int, int, int, int], ...]
    spans: tuple[tuple[int, int], ...]
    # The producer fields and codec of each batch (by base offset), from the footer;
    # empty for files written before the compactor kept them.
    headers: dict[int, BatchHeader]


class ParquetFetcher:
    def __init__(
        self, cache: BlockCache, describe: Describe, *, capacity_bytes: int = 256 << 20
    ) -> None:
        self.cache = cache
        self.describe = describe
        self.capacity = capacity_bytes
        self._rows: OrderedDict[tuple[str, int], EncodedRows] = OrderedDict()
        self._bytes = 0
        self._layouts: OrderedDict[str, _Layout] = OrderedDict()
        self._inflight: dict[tuple[str, int], asyncio.Future[Any]] = {}
        self.decoded = 0  # row groups decoded (tests, metrics)
        self._ahead: set[asyncio.Task[Any]] = set()

    def _file(
        self,
        key: str,
        size: int,
        loop: asyncio.AbstractEventLoop,
        metadata: Any = None,
        have: tuple[int, bytes] | None = None,
    ) -> Any:
        """A pyarrow ParquetFile whose reads go through the block cache (call in a
        thread); ``have`` = ``(position, bytes)`` already read serves reads inside it."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        view = memoryview(have[1]) if have is not None else None

        def read(pos: int, n: int) -> Any:
            if have is not None and have[0] <= pos and pos + n <= have[0] + len(have[1]):
                lo = pos - have[0]
                return view[lo : lo + n]  # type: ignore[index]  # no copy
            fut = asyncio.run_coroutine_threadsafe(self.cache.read(key, pos, pos + n), loop)
            return fut.result()

        return pq.ParquetFile(pa.PythonFile(RangeFile(read, size), mode="r"), metadata=metadata)

    async def _once(self, k: tuple[str, int], load: Callable[[], Awaitable[Any]]) -> Any:
        fut = self._inflight.get(k)
        if fut is not None:
            return await asyncio.shield(fut)
        fut = asyncio.get_running_loop().create_future()
        self._inflight[k] = fut
        try:
            value = await load()
            fut.set_result(value)
            return value
        except BaseException as e:
            fut.set_exception(e)
            fut.exception()
            raise
        finally:
            del self._inflight[k]

    async def _layout(self, key: str) -> _Layout:
        got = self._layouts.get(key)
        if got is not None:
            self._layouts.move_to_end(key)
            return got
        size, spans = await self.describe(key)
        loop = asyncio.get_running_loop()

        def load() -> _Layout:
            md = self._file(key, size, loop).metadata
            col = md.schema.to_arrow_schema().get_field_index("offset")
            groups = []
            for i in range(md.num_row_groups):
                rg = md.row_group(i)
                st = rg.column(col).statistics
                lo, hi = (st.min, st.max) if st is not None and st.has_min_max else (0, 1 << 62)
                starts, ends = [], []
                for c in range(rg.num_columns):
                    cc = rg.column(c)
                    first = cc.data_page_offset
                    if cc.has_dictionary_page and cc.dictionary_page_offset:
                        first = min(first, cc.dictionary_page_offset)
                    starts.append(first)
                    ends.append(first + cc.total_compressed_size)
                groups.append((i, int(lo), int(hi), min(starts), max(ends)))
            kv = md.metadata or {}
            infos = decode_batch_infos(kv.get(BATCHES_KEY.encode()))
            headers = {base: BatchHeader.from_info(i) for base, i in infos.items()}
            return _Layout(md, size, tuple(groups), tuple(sorted(spans)), headers)

        layout: _Layout = await self._once((key, -1), lambda: asyncio.to_thread(load))
        self._layouts[key] = layout
        while len(self._layouts) > 4096:
            self._layouts.popitem(last=False)
        return layout

    async def _group(
        self, key: str, layout: _Layout, index: int, *, spans: bool = True
    ) -> EncodedRows:
        k = (key, index)
        got = self._rows.get(k) if spans else None
        if got is not None:
            self._rows.move_to_end(k)
            return got
        loop = asyncio.get_running_loop()
        _, _, _, start, end = layout.groups[index]

        async def load() -> EncodedRows:
            # The row group's bytes in one load (peer cache or object store; not kept
            # as blocks: the decoded rows are what is cached), then decoded and
            # encoded in a worker thread.
            data = await self.cache.read_through(key, start, end)

            def decode() -> EncodedRows:
                f = self._file(key, layout.size, loop, layout.metadata, (start, data))
                names = [c for c in COLUMNS if c in f.schema_arrow.names]
                self.decoded += 1
                table = f.read_row_group(index, columns=names)
                return encode_rows(table, layout.spans if spans else None)

            return await asyncio.to_thread(decode)

        if not spans:  # uncached: only after the batch rows changed under a cached layout
            return await load()
        rows: EncodedRows = await self._once(k, load)
        if k not in self._rows:
            self._rows[k] = rows
            self._bytes += rows.nbytes
            while self._bytes > self.capacity and len(self._rows) > 1:
                _, old = self._rows.popitem(last=False)
                self._bytes -= old.nbytes
        return rows

    def _read_ahead(self, key: str, layout: _Layout, index: int) -> None:
        """Decode the next row groups in the background: consumers read on."""
        for nxt in range(index + 1, min(index + 1 + READ_AHEAD, len(layout.groups))):
            if (key, nxt) in self._rows or (key, nxt) in self._inflight:
                continue
            task = asyncio.get_running_loop().create_task(self._group(key, layout, nxt))
            self._ahead.add(task)
            task.add_done_callback(self._ahead_done)

    def _ahead_done(self, task: asyncio.Task[Any]) -> None:
        self._ahead.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.debug("parquet read-ahead failed: %s", task.exception())

    async def read(self, b: BatchLocation) -> bytes:
        """The batch ``b`` (offsets ``base..last`` of a Parquet object) rebuilt; empty if
        none of its records is left (key compaction)."""
        layout = await self._layout(b.object_key)
        wanted = [g[0] for g in layout.groups if g[2] >= b.base_offset and g[1] <= b.last_offset]
        parts = [await self._group(b.object_key, layout, i) for i in wanted]
        if not parts:
            return b""
        self._read_ahead(b.object_key, layout, wanted[-1])
        header = layout.headers.get(b.base_offset)
        try:
            return self._build(parts, b, header)
        except SpanMismatch:
            parts = [await self._group(b.object_key, layout, i, spans=False) for i in wanted]
            return self._build(parts, b, header)

    @staticmethod
    def _build(parts: list[EncodedRows], b: BatchLocation, header: BatchHeader | None) -> bytes:
        if len(parts) > 1:  # a batch straddling row groups: join just its rows
            parts = [p.rows(*p.span(b.base_offset, b.last_offset)) for p in parts]
        rows = EncodedRows.concat(parts)
        i0, i1 = rows.span(b.base_offset, b.last_offset)
        if i1 <= i0:
            return b""
        return build_batch(rows, i0, i1, b.base_offset, b.last_offset, header)
