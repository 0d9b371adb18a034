"""metastore.runs on arbitrary input: a run row's ``entries`` either unpack to
whole batches or fail with RunFormatError (never a crash, never a partial
batch), and what a lookup answers out of a run keeps its promises."""

from __future__ import annotations

import itertools

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from metastore import runs


@given(st.binary(max_size=4 * runs.ENTRY.itemsize + 3))
@settings(max_examples=300, deadline=None)
def test_unpack_arbitrary_bytes(raw: bytes) -> None:
    try:
        e = runs.unpack(raw)
    except runs.RunFormatError:
        assert not raw or raw[0] != runs.FORMAT or (len(raw) - 1) % runs.ENTRY.itemsize
        return
    assert raw[0] == runs.FORMAT
    assert len(e) * runs.ENTRY.itemsize + 1 == len(raw)


_sizes = st.lists(st.tuples(st.integers(1, 5), st.integers(1, 3_000)), min_size=1, max_size=40)


@given(_sizes, st.integers(0, 130), st.integers(1, 20_000), st.integers(1, 50))
@settings(max_examples=300, deadline=None)
def test_lookup_out_of_a_run(sizes: list[tuple[int, int]], offset: int, max_bytes: int, max_batches: int) -> None:
    """Batches of ``sizes`` (records, bytes) packed in one run from offset 0: the
    answer starts at the batch holding ``offset``, is contiguous, never exceeds
    ``max_bytes`` beyond its first batch, nor ``max_batches``."""
    e = np.zeros(len(sizes), dtype=runs.ENTRY)
    base = 0
    for i, (records, n) in enumerate(sizes):
        e[i] = (base, base + records - 1, 7 + i % 3, 100 * i, n, records, 0, 1000 + i, -1, -1, -1)
        base += records
    keys = {7: "a", 8: "b", 9: "c"}
    assert runs.unpack(runs.pack(e)).tolist() == e.tolist()
    found = runs.trim(runs.locations(runs.pack(e), keys, 5, offset), max_bytes, max_batches)
    if offset >= base:
        assert found == []
        return
    assert found[0].base_offset <= offset <= found[0].last_offset
    assert all(b.base_offset == a.last_offset + 1 for a, b in itertools.pairwise(found))
    assert len(found) <= max_batches
    assert len(found) == 1 or sum(b.byte_len for b in found) <= max_bytes
    assert all(b.object_key == keys[7 + (b.byte_pos // 100) % 3] for b in found)
