"""Segment format: builder → footer round trip, read_index's GET count, corruption."""

from __future__ import annotations

import itertools
import random
import struct
import uuid
from collections.abc import AsyncIterator, Sequence
from typing import NamedTuple

import google_crc32c
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from objectstore import ObjectStore, SegmentFormatError
from objectstore.base import ObjectInfo, StoreBase
from objectstore.memory import MemoryStore
from objectstore.segment import (
    ENTRY_SIZE,
    HEADER_SIZE,
    TRAILER_SIZE,
    BatchMeta,
    SegmentBuilder,
    SegmentEntry,
    encode_footer,
)
from objectstore.segment_index import footer_length, iter_segment, parse_footer, read_index

TOPICS = [uuid.UUID(int=n) for n in (0x30, 0x10, 0x20)] + [uuid.uuid4()]


def meta(i: int) -> BatchMeta:
    return BatchMeta(
        record_count=i + 1,
        max_timestamp=1_700_000_000_000 + i,
        base_timestamp=1_700_000_000_000,
        last_offset_delta=i,
        producer_id=1000 + i,
        producer_epoch=i % 7,
        base_sequence=i * 3,
        attributes=i % 4,
    )


def build(
    n: int = 60, seed: int = 1
) -> tuple[bytes, list[SegmentEntry], list[tuple[uuid.UUID, int, bytes]]]:
    rng = random.Random(seed)
    builder = SegmentBuilder()
    added = []
    for i in range(n):
        tid, part = rng.choice(TOPICS), rng.randrange(8)
        batch = rng.randbytes(rng.randrange(61, 400))
        assert builder.add(tid, part, memoryview(batch), meta(i)) == i
        added.append((tid, part, batch))
    data, entries = builder.finish()
    assert builder.size == len(data)
    return data, entries, added


class CountingStore(StoreBase):
    """Counts calls to an inner store (to check read_index's request count)."""

    def __init__(self, inner: ObjectStore) -> None:
        self.inner = inner
        self.gets: list[tuple[int | None, int | None]] = []
        self.heads = 0

    async def put(self, key: str, data: bytes | memoryview) -> None:
        await self.inner.put(key, data)

    async def get(self, key: str, start: int | None = None, end: int | None = None) -> bytes:
        self.gets.append((start, end))
        return await self.inner.get(key, start, end)

    async def head(self, key: str) -> ObjectInfo:
        self.heads += 1
        return await self.inner.head(key)

    async def delete_many(self, keys: Sequence[str]) -> None:
        await self.inner.delete_many(keys)

    def list(
        self, prefix: str = "", *, start_after: str | None = None
    ) -> AsyncIterator[ObjectInfo]:
        return self.inner.list(prefix, start_after=start_after)


def test_round_trip_many_partitions() -> None:
    data, entries, added = build()
    assert data[:HEADER_SIZE] == b"FLOESEG\x01"
    assert len(entries) == len(added)
    for i, (e, (tid, part, batch)) in enumerate(zip(entries, added, strict=True)):
        assert (e.topic_id, e.partition) == (tid, part)
        assert data[e.byte_pos : e.byte_pos + e.byte_len] == batch
        assert e.meta == meta(i)
    # The object is grouped by (topic id bytes, partition), arrival order kept within one.
    in_file = sorted(entries, key=lambda e: e.byte_pos)
    keys = [(e.topic_id.bytes, e.partition) for e in in_file]
    assert keys == sorted(keys)
    for k in set(keys):
        positions = [e.byte_pos for e in entries if (e.topic_id.bytes, e.partition) == k]
        assert positions == sorted(positions)
    # Batches are contiguous from the header to the footer.
    assert in_file[0].byte_pos == HEADER_SIZE
    for a, b in itertools.pairwise(in_file):
        assert a.byte_pos + a.byte_len == b.byte_pos
    assert parse_footer(data, len(data)) == in_file
    assert [(e, bytes(b)) for e, b in iter_segment(data)] == [
        (e, data[e.byte_pos : e.byte_pos + e.byte_len]) for e in in_file
    ]


def test_builder_partitions_are_the_distinct_pairs_added() -> None:
    """What a commit announces to waiting fetches: every partition once, with its id."""
    a, b = uuid.uuid4(), uuid.uuid4()
    sb = SegmentBuilder()
    for tid, part in [(a, 0), (b, 3), (a, 0), (a, 1), (b, 3)]:
        sb.add(tid, part, b"x" * 70, BatchMeta(1, 0, 0, 0))
    assert sorted(sb.partitions(), key=str) == sorted([(a, 0), (a, 1), (b, 3)], key=str)
    assert SegmentBuilder().partitions() == []


class _Row(NamedTuple):
    topic_id: uuid.UUID
    partition: int
    batch: bytes | memoryview
    meta: BatchMeta


def test_extend_lays_out_what_add_does() -> None:
    """The produce path adds a request's batches with one extend: the object, its
    entries (in add order) and the announced partitions are those of add, batch by batch."""
    rng = random.Random(7)
    rows = [
        _Row(rng.choice(TOPICS), rng.randrange(5), memoryview(rng.randbytes(rng.randrange(61, 200))), meta(i))
        for i in range(80)
    ]
    one, bulk = SegmentBuilder(), SegmentBuilder()
    for r in rows:
        one.add(r.topic_id, r.partition, r.batch, r.meta, copy=False)
    bulk.extend(rows[:30])
    bulk.extend(iter(rows[30:]))
    assert (len(bulk), bulk.size) == (len(one), one.size)
    assert sorted(bulk.partitions(), key=str) == sorted(one.partitions(), key=str)
    data, entries = bulk.finish()
    assert (data, entries) == one.finish()
    assert parse_footer(data, len(data)) == sorted(entries, key=lambda e: e.byte_pos)
    for e, r in zip(entries, rows, strict=True):
        assert (e.topic_id, e.partition, e.meta) == (r.topic_id, r.partition, r.meta)
        assert data[e.byte_pos : e.byte_pos + e.byte_len] == r.batch


def test_extend_refuses_what_add_refuses() -> None:
    """A bad row raises as add would; the rows before it stay added."""
    good = _Row(TOPICS[0], 0, b"x" * 70, meta(0))
    for bad in (_Row(TOPICS[0], -1, b"x" * 70, meta(1)), _Row(TOPICS[0], 2**31, b"x", meta(1)),
                _Row(TOPICS[1], 0, b"", meta(1))):
        sb = SegmentBuilder()
        with pytest.raises(ValueError):
            sb.extend([good, bad, good])
        assert len(sb) == 1 and sb.size == SegmentBuilder().size + 70 + ENTRY_SIZE
        assert sb.finish()[1] == [SegmentEntry(TOPICS[0], 0, HEADER_SIZE, 70, *meta(0))]


def test_empty_segment() -> None:
    data, entries = SegmentBuilder().finish()
    assert entries == []
    assert parse_footer(data, len(data)) == []


def test_builder_copies_buffers() -> None:
    buf = bytearray(b"x" * 100)
    builder = SegmentBuilder()
    builder.add(TOPICS[0], 0, memoryview(buf), meta(0))
    buf[:] = b"y" * 100
    data, (e,) = builder.finish()
    assert data[e.byte_pos : e.byte_pos + e.byte_len] == b"x" * 100


def test_builder_rejects_bad_partition() -> None:
    with pytest.raises(ValueError):
        SegmentBuilder().add(TOPICS[0], -1, b"x", meta(0))
    with pytest.raises(ValueError):
        SegmentBuilder().add(TOPICS[0], 0, b"", meta(0))


def test_batch_meta_from_record_batch() -> None:
    header = struct.pack(">qiiBIhiqqqhii", 0, 100, 0, 2, 0, 0x13, 4, 111, 222, 77, 3, 9, 5)
    assert BatchMeta.from_record_batch(header + b"records") == BatchMeta(
        5, 222, 111, 4, 77, 3, 9, 0x13
    )
    with pytest.raises(ValueError):
        BatchMeta.from_record_batch(header[:20])
    with pytest.raises(ValueError):
        BatchMeta.from_record_batch(header[:16] + b"\x01" + header[17:])


async def test_read_index_one_ranged_get() -> None:
    data, entries, _ = build(n=50)
    store = CountingStore(MemoryStore())
    await store.put("seg", data)
    index = await read_index(store, "seg", object_size=len(data))
    assert index == sorted(entries, key=lambda e: e.byte_pos)
    assert store.gets == [(0, len(data))] and store.heads == 0  # small object: tail is all of it

    big, entries, _ = build(n=2000, seed=3)  # footer ~144 KB > the 64 KiB guess
    await store.put("big", big)
    store.gets.clear()
    assert await read_index(store, "big", object_size=len(big), guess=4096) == sorted(
        entries, key=lambda e: e.byte_pos
    )
    assert len(store.gets) == 2
    store.gets.clear()
    assert len(await read_index(store, "big", guess=1 << 20)) == 2000  # size via HEAD
    assert len(store.gets) == 1 and store.heads == 1


async def test_read_index_through_every_backend(store: ObjectStore) -> None:
    data, entries, _ = build(n=300, seed=5)
    await store.put("segments/0001", data)
    counted = CountingStore(store)
    index = await read_index(counted, "segments/0001", object_size=len(data), guess=32 * 1024)
    assert index == sorted(entries, key=lambda e: e.byte_pos)
    assert len(counted.gets) == 1


async def test_read_index_of_a_non_segment() -> None:
    store = MemoryStore()
    await store.put("junk", b"not a segment at all, just some bytes")
    with pytest.raises(SegmentFormatError):
        await read_index(store, "junk")
    await store.put("tiny", b"x")
    with pytest.raises(SegmentFormatError):
        await read_index(store, "tiny")


def _with_footer(data: bytes, footer: bytes) -> bytes:
    """Replace an object's footer (re-signing it) to reach the checks after the CRC."""
    total = footer_length(data, len(data))
    body = data[: len(data) - total]
    return (
        body
        + footer
        + struct.pack(">II8s", len(footer), google_crc32c.value(footer), b"FLOESEG\x01")
    )


def corruptions() -> list[tuple[str, bytes]]:
    data, entries, _ = build(n=10)
    in_file = sorted(entries, key=lambda e: e.byte_pos)
    n = len(data)
    flip = bytearray(data)
    flip[n - TRAILER_SIZE - 5] ^= 0x40  # inside the footer: CRC mismatch
    bad_len = bytearray(data)
    struct.pack_into(">I", bad_len, n - TRAILER_SIZE, 10**6)
    odd_len = bytearray(data)
    struct.pack_into(">I", odd_len, n - TRAILER_SIZE, 4 + ENTRY_SIZE * 10 + 1)
    count = bytearray(encode_footer(in_file))
    struct.pack_into(">I", count, 0, 9)
    past_end = [*in_file[:-1], in_file[-1]._replace(byte_len=in_file[-1].byte_len + 1)]
    overlap = [
        in_file[0],
        in_file[1]._replace(byte_pos=in_file[1].byte_pos - 1),
        *in_file[2:],
    ]
    before_header = [in_file[0]._replace(byte_pos=2), *in_file[1:]]
    return [
        ("trailer magic", data[:-2] + b"XX"),
        ("version", data[:-1] + b"\x02"),
        ("crc", bytes(flip)),
        ("footer len too big", bytes(bad_len)),
        ("footer len not entries", bytes(odd_len)),
        ("count mismatch", _with_footer(data, bytes(count))),
        ("entry past end", _with_footer(data, encode_footer(past_end))),
        ("entries overlap", _with_footer(data, encode_footer(overlap))),
        ("entry in header", _with_footer(data, encode_footer(before_header))),
        ("truncated", data[: n - 3]),
        ("too small", data[-TRAILER_SIZE:]),
    ]


@pytest.mark.parametrize(("case", "blob"), corruptions(), ids=[c for c, _ in corruptions()])
def test_corrupt_footer_rejected(case: str, blob: bytes) -> None:
    with pytest.raises(SegmentFormatError):
        parse_footer(blob, len(blob))


def test_partial_tail_and_bad_header() -> None:
    data, _, _ = build(n=10)
    with pytest.raises(SegmentFormatError, match="footer needs"):
        parse_footer(data[-TRAILER_SIZE - 10 :], len(data))
    with pytest.raises(SegmentFormatError):
        parse_footer(data[-5:], len(data))
    with pytest.raises(SegmentFormatError):
        parse_footer(data, len(data) - 1)  # tail longer than the claimed object
    with pytest.raises(SegmentFormatError):
        list(iter_segment(b"NOTASEG" + data[7:]))


entry_args = st.tuples(
    st.sampled_from(TOPICS),
    st.integers(0, 2**31 - 1),
    st.binary(min_size=1, max_size=300),
    st.builds(
        BatchMeta,
        record_count=st.integers(0, 2**31 - 1),
        max_timestamp=st.integers(-(2**63), 2**63 - 1),
        base_timestamp=st.integers(-(2**63), 2**63 - 1),
        last_offset_delta=st.integers(-(2**31), 2**31 - 1),
        producer_id=st.integers(-(2**63), 2**63 - 1),
        producer_epoch=st.integers(-(2**15), 2**15 - 1),
        base_sequence=st.integers(-(2**31), 2**31 - 1),
        attributes=st.integers(-(2**15), 2**15 - 1),
    ),
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(entry_args, max_size=40))
def test_hypothesis_round_trip(batches: list[tuple[uuid.UUID, int, bytes, BatchMeta]]) -> None:
    builder = SegmentBuilder()
    for tid, part, batch, m in batches:
        builder.add(tid, part, batch, m)
    data, entries = builder.finish()
    assert len(data) == builder.size
    for (tid, part, batch, m), e in zip(batches, entries, strict=True):
        assert (e.topic_id, e.partition, e.meta) == (tid, part, m)
        assert data[e.byte_pos : e.byte_pos + e.byte_len] == batch
    assert parse_footer(data, len(data)) == sorted(entries, key=lambda e: e.byte_pos)
    # Any tail at least as long as the footer works.
    total = footer_length(data, len(data))
    assert parse_footer(data[-total:], len(data)) == parse_footer(data, len(data))


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_hypothesis_mutations_never_crash(data_strategy: st.DataObject) -> None:
    data, _, _ = build(n=5)
    blob = bytearray(data)
    for _ in range(data_strategy.draw(st.integers(1, 4))):
        pos = data_strategy.draw(st.integers(len(blob) - 400, len(blob) - 1))
        blob[pos] = data_strategy.draw(st.integers(0, 255))
    try:
        entries = parse_footer(bytes(blob), len(blob))
    except SegmentFormatError:
        return
    total = footer_length(bytes(blob), len(blob))
    for e in entries:  # whatever got through is within the data area
        assert HEADER_SIZE <= e.byte_pos and e.byte_pos + e.byte_len <= len(blob) - total


@given(st.binary(max_size=200), st.integers(0, 500))
def test_hypothesis_garbage_only_raises_format_errors(blob: bytes, extra: int) -> None:
    with pytest.raises(SegmentFormatError):
        parse_footer(blob, len(blob) + extra)
