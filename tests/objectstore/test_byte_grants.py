"""objectstore.byte_grants: runs never bridge a hole, coverage is exact, and an S3 presign
of a byte range signs the Range header (SigV4) even where botocore would pick SigV2."""

from __future__ import annotations

import asyncio
import itertools
from urllib.parse import parse_qs, urlsplit

import pytest
from hypothesis import given
from hypothesis import strategies as st

from objectstore import presign_get
from objectstore.byte_grants import covered, merge_ranges, range_header
from objectstore.retry import RetryingStore

spans = st.lists(
    st.tuples(st.integers(0, 400), st.integers(1, 60)).map(lambda t: (t[0], t[0] + t[1])), max_size=12
)


def _bytes(rs: list[tuple[int, int]]) -> set[int]:
    return {i for s, e in rs for i in range(s, e)}


@given(spans, st.integers(0, 200))
def test_merge_keeps_exactly_the_bytes(rs: list[tuple[int, int]], cap: int) -> None:
    out = merge_ranges(rs, cap)
    assert _bytes(out) == _bytes(rs)  # no hole bridged, nothing dropped
    assert out == sorted(out) and all(a[1] <= b[0] for a, b in itertools.pairwise(out))
    disjoint = all(a[1] <= b[0] for a, b in itertools.pairwise(sorted(set(rs))))
    if disjoint and all(e - s <= cap for s, e in rs):
        assert all(e - s <= cap for s, e in out)  # batches never overlap: the cap holds
    for lo in range(0, 470, 7):
        for hi in (lo + 1, lo + 13):
            assert covered(lo, hi, out) == (set(range(lo, hi)) <= _bytes(rs))


def test_merge_adjacent_until_the_cap() -> None:
    assert merge_ranges([(0, 10), (10, 20), (20, 30), (31, 40)], 20) == [(0, 20), (20, 30), (31, 40)]
    assert merge_ranges([(0, 50)], 10) == [(0, 50)]
    assert range_header(10, 21) == "bytes=10-20"
    with pytest.raises(ValueError):
        range_header(5, 5)


@pytest.mark.s3
def test_s3_presign_signs_the_range(s3_url: str) -> None:
    from objectstore import open_object_store

    async def go() -> tuple[str | None, str | None]:
        store = open_object_store(s3_url)
        assert isinstance(store, RetryingStore)  # looked through to the S3 backend
        try:
            return await presign_get(store, "a/b.seg", 600, (100, 200)), await presign_get(store, "a/b.seg", 600)
        finally:
            await store.close()

    ranged, whole = asyncio.run(go())
    assert ranged is not None and whole is not None
    q = parse_qs(urlsplit(ranged).query)
    assert q["X-Amz-Algorithm"] == ["AWS4-HMAC-SHA256"]
    assert q["X-Amz-SignedHeaders"] == ["host;range"]
    assert parse_qs(urlsplit(whole).query)["X-Amz-SignedHeaders"] == ["host"]


@pytest.mark.s3
def test_s3_presign_ranges_signs_each_range_alone(s3_url: str, moto_server: str) -> None:
    """The URLs signed without botocore (objectstore.sigv4) verify as S3 verifies them,
    each for its own range only."""
    from objectstore import open_object_store, presign_ranges
    from tests.spark_source.sigv4_gate import SigV4Gate

    ranges = [(0, 100), (100, 250), (4096, 8192), (10, 11)]

    async def go() -> list[str] | None:
        store = open_object_store(s3_url)
        try:
            return await presign_ranges(store, "dir/a b+c.seg", 600, ranges)
        finally:
            await store.close()

    urls = asyncio.run(go())
    assert urls is not None and len(urls) == len(ranges)
    gate = SigV4Gate(moto_server, {"testing": "testing"})
    for i, url in enumerate(urls):
        parts = urlsplit(url)
        path_qs = f"{parts.path}?{parts.query}"
        for j, (lo, hi) in enumerate(ranges):
            why = gate.check(path_qs, {"Range": range_header(lo, hi)})
            assert (why is None) == (i == j), (i, j, why)
        assert gate.check(path_qs, {}) == "SignatureDoesNotMatch"
