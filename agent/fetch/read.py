"""Step 8 of a Fetch: the chosen batches' bytes, block cache -> patched bytes.

Where it sits: after :mod:`agent.fetch.plan` has chosen each partition's batches
(lookups, read_committed cut, byte budget), before :mod:`agent.fetch.answer`
builds the response. :func:`read_all` reads every partition with batches in one
go: :meth:`BatchReads.read_many` asks the agent's
:class:`~agent.cache.BlockCache` once for every block the response's batches
touch (hits without a coroutine, misses loaded together: the ring owner's peer
cache, then a ranged GET), then :func:`batch_pieces` lays out each partition's
batches with their ``baseOffset`` (the metastore's offset; producers' batches are
stored with base offset 0) and ``partitionLeaderEpoch`` (0: there are no
elections) patched. Both fields lie outside the CRC, so nothing is re-encoded. A
Fetch's records are views into the cached blocks (:class:`BufferParts`, written to
the socket uncopied) when that pins few blocks beyond the bytes sent
(``PIN_RATIO``), else one buffer per partition. Batches the compactor moved into Parquet objects are rebuilt from
their rows (:class:`agent.fetch.parquet.ParquetFetcher`). A partition whose
bytes cannot be read gets KAFKA_STORAGE_ERROR (retriable; its cached lookups are
dropped, so the retry plans again), the others their bytes.
"""

from __future__ import annotations

import asyncio
import logging
import struct
import uuid
from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

from agent.cache import BlockCache
from agent.fetch.parquet import ParquetFetcher
from kafka_protocol.errors import ErrorCode
from kafka_protocol.messages._runtime import ZERO_COPY_THRESHOLD, BufferParts
from kafka_protocol.records import (
    BATCH_LENGTH_OFFSET,
    LOG_OVERHEAD,
    MAGIC_OFFSET,
    PARTITION_LEADER_EPOCH_OFFSET,
)
from metastore.types import BatchLocation
from objectstore.errors import ObjectStoreError
from objectstore.parquet import is_parquet_key

if TYPE_CHECKING:
    from agent.fetch.model import PartitionFetch, Want
    from metastore import Metastore

log = logging.getLogger(__name__)

_I32 = struct.Struct(">i")
# A batch's first fields, rewritten on the way out: baseOffset, batchLength (as
# stored) and partitionLeaderEpoch (0). All three lie outside the CRC.
_HEAD = struct.Struct(">qii")
_PATCHED = PARTITION_LEADER_EPOCH_OFFSET + 4
assert _HEAD.size == _PATCHED


class BatchReadError(Exception):
    """The bytes at a batch's recorded position are not that batch."""


# What a read of a partition's bytes may fail with (that partition alone gets an error).
_READ_ERRORS = (ObjectStoreError, BatchReadError, OSError)


# Fetches whose bytes are read and assembled at once, per agent. Assembling copied
# every batch of a response on the event loop (now only when PIN_RATIO says so); 32 Fetches doing it at the same time
# put ~1 s of such work in the loop's ready queue, ahead of every produce callback
# (a well-behaved producer waited 1.1 s while 32 clients fetched 2^31-1 bytes). The
# others wait here without work queued, so other requests interleave with at most
# this many.
READ_SLOTS = 4

# A Fetch's records go out as views into the cached blocks (BufferParts: the
# kernel's copy into the socket is the only one; a catch-up read spent more agent
# CPU copying 16 MiB responses into fresh buffers than on anything else of its
# own) unless the blocks they pin would be more than this many times the bytes
# sent: a view keeps its whole block alive until the client has read it, even
# once the cache evicted it, and the response budget counts the bytes sent. A
# worker of two serves half a segment's partitions, so a catch-up Fetch's blocks
# are 2-3 times its bytes.
PIN_RATIO = 4


class _Reader(Protocol):
    read_slots: asyncio.Semaphore

    async def read_records(
        self, parts: Sequence[Sequence[BatchLocation]]
    ) -> list[bytes | BufferParts | Exception]: ...

    def forget(self, topic_id: uuid.UUID, partition: int, *, tail: bool = True) -> None: ...


async def read_all(reader: _Reader, wants: list[Want], found: list[PartitionFetch]) -> None:
    """The bytes of every partition with batches to send, in one planned read."""
    todo = [(w, pf) for w, pf in zip(wants, found, strict=True) if pf.batches]
    if not todo:
        return
    async with reader.read_slots:
        datas = await reader.read_records([pf.batches for _, pf in todo])
    for (w, pf), data in zip(todo, datas, strict=True):
        if isinstance(data, Exception):
            # E.g. the compactor replaced the object after our (cached) lookup.
            log.warning("fetch: reading %s/%d at %d failed: %s", w.topic_id, w.partition, w.fetch_offset, data)
            if w.topic_id is not None:
                reader.forget(w.topic_id, w.partition)
            pf.error = ErrorCode.KAFKA_STORAGE_ERROR
            pf.batches = []
            pf.records = b""
        else:
            pf.records = data


class BatchReads:
    """Batch reads through the block cache; the reader sets ``meta``, ``cache`` and ``parquet``."""

    meta: Metastore
    cache: BlockCache
    parquet: ParquetFetcher

    async def read(self, batches: Sequence[BatchLocation]) -> bytes:
        """The batches' bytes in the given order, with base offsets patched in."""
        if not batches:
            return b""
        if any(is_parquet_key(b.object_key) for b in batches):
            return await self._read_mixed(batches)
        (data,) = await self.read_many([batches])
        if isinstance(data, Exception):
            raise data
        return data

    async def read_many(self, parts: Sequence[Sequence[BatchLocation]]) -> list[bytes | Exception]:
        """:meth:`read` of each partition's batches (see :meth:`read_records`), as bytes."""
        return await self._read_many(parts, views=False)  # type: ignore[return-value]

    async def read_records(
        self, parts: Sequence[Sequence[BatchLocation]]
    ) -> list[bytes | BufferParts | Exception]:
        """:meth:`read_many` for a Fetch response: a partition's records may be
        views into the cached blocks (:class:`BufferParts`, see ``PIN_RATIO``)."""
        return await self._read_many(parts, views=True)

    async def _read_many(
        self, parts: Sequence[Sequence[BatchLocation]], *, views: bool
    ) -> list[bytes | BufferParts | Exception]:
        """:meth:`read` of each partition's batches of one Fetch response, through
        the block cache once for all of them: every block they touch is asked for
        once (hits without a coroutine, misses loaded together), not a read per
        partition. A partition whose bytes could not be read gets the exception
        (an object store error, ``OSError`` or :class:`BatchReadError`) instead of
        its bytes; anything else is raised."""
        flat = [b for bs in parts for b in bs]
        if any(is_parquet_key(b.object_key) for b in flat):
            return list(await asyncio.gather(*(self._read_or_error(bs) for bs in parts)))
        # Block by block: a consumer's partitions need not be neighbours in a segment
        # (an assignor deals them round-robin), their batches share a few blocks.
        cache = self.cache
        size = cache.block_size
        spans = [(b.byte_pos // size, (b.byte_pos + b.byte_len - 1) // size) for b in flat]
        need: dict[tuple[str, int], None] = {}  # every block touched, once, in order
        for b, (first, last) in zip(flat, spans, strict=True):
            for i in range(first, last + 1):
                need[(b.object_key, i)] = None
        got = dict(zip(need, await cache.blocks(list(need)), strict=True))
        reads: dict[tuple[str, int], tuple[int, list[bytes]]] = {}
        failed: dict[tuple[str, int], Exception] = {}
        for b, (first, last) in zip(flat, spans, strict=True):
            key = b.object_key
            found = [got[(key, i)] for i in range(first, last + 1)]
            error = next((d for d in found if isinstance(d, BaseException)), None)
            if error is not None:
                if not isinstance(error, _READ_ERRORS):
                    raise error
                failed[(key, b.byte_pos)] = error
            else:  # the blocks themselves: batch_pieces views only the batch in them
                reads[(key, b.byte_pos)] = (first * size, found)  # type: ignore[assignment]
        if views:  # the blocks viewed, against the bytes sent
            pinned = sum(len(d) for d in got.values() if isinstance(d, bytes))
            views = pinned <= PIN_RATIO * sum(b.byte_len for b in flat)
        out: list[bytes | BufferParts | Exception] = []
        for bs in parts:
            error = next((failed[k] for b in bs if (k := (b.object_key, b.byte_pos)) in failed), None) if failed else None
            if error is not None:
                out.append(error)
                continue
            try:
                pieces = batch_pieces(bs, reads)
            except BatchReadError as e:
                out.append(e)
                continue
            records = BufferParts(pieces)
            out.append(records if views and len(records) >= ZERO_COPY_THRESHOLD else records.join())
        return out

    async def _read_or_error(self, batches: Sequence[BatchLocation]) -> bytes | Exception:
        try:
            return await self.read(batches)
        except _READ_ERRORS as e:
            return e

    async def _read_mixed(self, batches: Sequence[BatchLocation]) -> bytes:
        """Segment batches as usual; batches the compactor moved into Parquet objects
        are rebuilt from their rows (same offsets, keys, values, headers, timestamps)."""
        parts: list[bytes] = []
        run: list[BatchLocation] = []
        for b in batches:
            if is_parquet_key(b.object_key):
                if run:
                    parts.append(await self.read(run))
                    run = []
                parts.append(await self._read_parquet(b))
            else:
                run.append(b)
        if run:
            parts.append(await self.read(run))
        return b"".join(parts)

    async def _read_parquet(self, b: BatchLocation) -> bytes:
        try:
            return await self.parquet.read(b)
        except (ValueError, OSError, KeyError) as e:  # pyarrow's errors derive from these
            raise BatchReadError(f"Parquet object {b.object_key}: {e}") from e

    async def _describe_object(self, key: str) -> tuple[int, list[tuple[int, int]]]:
        """A Parquet object's size and its batch rows' (base offset, base timestamp)."""
        info = await self.meta.get_object(key)
        if info is None:
            raise BatchReadError(f"object {key} is not registered")
        rows = await self.meta.batches_in_objects([info.id])
        return info.size, [(r.base_offset, r.base_timestamp) for r in rows]


def batch_pieces(
    batches: Sequence[BatchLocation], reads: dict[tuple[str, int], tuple[int, list[bytes]]]
) -> list[bytes | memoryview]:
    """``batches`` (in order) as pieces to send, with their headers patched, nothing
    copied but the headers: per batch its first 16 bytes rewritten (baseOffset,
    batchLength, partitionLeaderEpoch), then views of the rest in the blocks read.

    ``reads`` maps ``(object_key, byte_pos)`` of each batch to ``(start, blocks)``:
    consecutive blocks of the object from ``start`` on that hold the batch. Joined
    (:class:`BufferParts`), each byte is copied once; a catch-up read moves ~16 MiB
    per Fetch, and each copy of it (a join of two blocks for a batch across their
    boundary, a zeroed buffer, its copy to bytes) was agent CPU per MB.
    """
    pieces: list[bytes | memoryview] = []
    for b in batches:
        start, blocks = reads[(b.object_key, b.byte_pos)]
        got = _slices(blocks, b.byte_pos - start, b.byte_len)
        n = sum(len(p) for p in got)
        if n != b.byte_len:
            raise BatchReadError(
                f"object {b.object_key} has {n} bytes at {b.byte_pos}, expected {b.byte_len}"
            )
        head = got[0]
        if len(head) <= MAGIC_OFFSET:  # the header itself crosses a block boundary (rare)
            head = memoryview(b"".join(got))
            got = [head]
        (length,) = _I32.unpack_from(head, BATCH_LENGTH_OFFSET)
        if length + LOG_OVERHEAD != b.byte_len or head[MAGIC_OFFSET] != 2:
            raise BatchReadError(
                f"object {b.object_key} at {b.byte_pos}: not a v2 batch of {b.byte_len} bytes"
            )
        pieces.append(_HEAD.pack(b.base_offset, length, 0))
        pieces.append(head[_PATCHED:])
        pieces.extend(got[1:])
    return pieces


def _slices(blocks: list[bytes], lo: int, n: int) -> list[memoryview]:
    """Views of ``n`` bytes from ``lo`` on in the concatenation of ``blocks`` (fewer
    bytes when the blocks end first), without concatenating them."""
    out: list[memoryview] = []
    for block in blocks:
        size = len(block)
        if lo >= size:
            lo -= size
            continue
        take = min(n, size - lo)
        out.append(memoryview(block)[lo : lo + take])
        n -= take
        lo = 0
        if not n:
            break
    return out
