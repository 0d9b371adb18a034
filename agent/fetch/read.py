"""Step 8 of a Fetch: the chosen batches' bytes, block cache -> patched bytes.

Where it sits: after :mod:`agent.fetch.plan` has chosen each partition's batches
(lookups, read_committed cut, byte budget), before :mod:`agent.fetch.answer`
builds the response. :func:`read_all` reads every partition with batches in one
go: :meth:`BatchReads.read_many` asks the agent's
:class:`~agent.cache.BlockCache` once for every block the response's batches
touch (hits without a coroutine, misses loaded together: the ring owner's peer
cache, then a ranged GET), then :func:`assemble` copies each partition's batches
into one buffer with their ``baseOffset`` (the metastore's offset; producers'
batches are stored with base offset 0) and ``partitionLeaderEpoch`` (0: there
are no elections) patched. Both fields lie outside the CRC, so nothing is
re-encoded. Batches the compactor moved into Parquet objects are rebuilt from
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
from kafka_protocol.records import (
    BATCH_LENGTH_OFFSET,
    LOG_OVERHEAD,
    MAGIC_OFFSET,
    patch_base_offset,
    patch_partition_leader_epoch,
)
from metastore.types import BatchLocation
from objectstore.errors import ObjectStoreError
from objectstore.parquet import is_parquet_key

if TYPE_CHECKING:
    from agent.fetch.model import PartitionFetch, Want
    from metastore import Metastore

log = logging.getLogger(__name__)

_I32 = struct.Struct(">i")


class BatchReadError(Exception):
    """The bytes at a batch's recorded position are not that batch."""


# What a read of a partition's bytes may fail with (that partition alone gets an error).
_READ_ERRORS = (ObjectStoreError, BatchReadError, OSError)


# Fetches whose bytes are read and assembled at once, per agent. Assembling copies
# every batch of a response on the event loop; 32 Fetches doing it at the same time
# put ~1 s of such work in the loop's ready queue, ahead of every produce callback
# (a well-behaved producer waited 1.1 s while 32 clients fetched 2^31-1 bytes). The
# others wait here without work queued, so other requests interleave with at most
# this many.
READ_SLOTS = 4


class _Reader(Protocol):
    read_slots: asyncio.Semaphore

    async def read_many(self, parts: Sequence[Sequence[BatchLocation]]) -> list[bytes | Exception]: ...

    def forget(self, topic_id: uuid.UUID, partition: int, *, tail: bool = True) -> None: ...


async def read_all(reader: _Reader, wants: list[Want], found: list[PartitionFetch]) -> None:
    """The bytes of every partition with batches to send, in one planned read."""
    todo = [(w, pf) for w, pf in zip(wants, found, strict=True) if pf.batches]
    if not todo:
        return
    async with reader.read_slots:
        datas = await reader.read_many([pf.batches for _, pf in todo])
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
        reads: dict[tuple[str, int], tuple[int, bytes]] = {}
        failed: dict[tuple[str, int], Exception] = {}
        for b, (first, last) in zip(flat, spans, strict=True):
            key = b.object_key
            found = [got[(key, i)] for i in range(first, last + 1)]
            error = next((d for d in found if isinstance(d, BaseException)), None)
            if error is not None:
                if not isinstance(error, _READ_ERRORS):
                    raise error
                failed[(key, b.byte_pos)] = error
            else:
                data = found[0] if len(found) == 1 else b"".join(found)  # type: ignore[arg-type]
                reads[(key, b.byte_pos)] = (first * size, data)  # type: ignore[assignment]
        out: list[bytes | Exception] = []
        for bs in parts:
            error = next((failed[k] for b in bs if (k := (b.object_key, b.byte_pos)) in failed), None) if failed else None
            if error is not None:
                out.append(error)
                continue
            try:
                out.append(assemble(bs, reads))
            except BatchReadError as e:
                out.append(e)
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


def assemble(batches: Sequence[BatchLocation], reads: dict[tuple[str, int], tuple[int, bytes]]) -> bytes:
    """Copy ``batches`` (in order) out of the bytes read and patch their headers.

    ``reads`` maps ``(object_key, byte_pos)`` of each batch to ``(start, bytes)``:
    bytes of the object from ``start`` on that hold the batch.
    """
    out = bytearray(sum(b.byte_len for b in batches))
    pos = 0
    for b in batches:
        start, data = reads[(b.object_key, b.byte_pos)]
        lo = b.byte_pos - start
        chunk = data[lo : lo + b.byte_len]
        if len(chunk) != b.byte_len:
            raise BatchReadError(
                f"object {b.object_key} has {len(chunk)} bytes at {b.byte_pos}, expected {b.byte_len}"
            )
        out[pos : pos + b.byte_len] = chunk
        (length,) = _I32.unpack_from(out, pos + BATCH_LENGTH_OFFSET)
        if length + LOG_OVERHEAD != b.byte_len or out[pos + MAGIC_OFFSET] != 2:
            raise BatchReadError(
                f"object {b.object_key} at {b.byte_pos}: not a v2 batch of {b.byte_len} bytes"
            )
        patch_base_offset(out, pos, b.base_offset)
        patch_partition_leader_epoch(out, pos, 0)
        pos += b.byte_len
    return bytes(out)
