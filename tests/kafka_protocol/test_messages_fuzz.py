"""Untrusted-input robustness: every decode either succeeds or raises DecodeError.

Covers random bytes, truncations and mutations of valid encodings for every
message type and version, and the CVE-2022-34917 class of bugs: a declared
length or count far beyond the buffer must fail fast, before allocating.
"""

from __future__ import annotations

import random
import struct
import tracemalloc
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kafka_protocol import messages
from kafka_protocol.codegen.samples import Sampler
from kafka_protocol.codegen.schema import APIS, load_message
from kafka_protocol.exceptions import DecodeError, UnsupportedVersion
from kafka_protocol.messages import FetchRequest, MetadataRequest, ProduceRequest
from kafka_protocol.messages._runtime import read_uvarint, read_uvarlong

MODELS = {n: load_message(n) for _, names in APIS for n in names}
CASES = [(n, v) for n, m in MODELS.items() for v in range(m.min_version, m.max_version + 1)]
REQUEST_CASES = [(n, v) for n, v in CASES if MODELS[n].kind == "request"]


def _try_decode(cls: Any, data: bytes, version: int) -> None:
    try:
        cls.decode(data, version)
    except DecodeError:
        pass


def _valid(name: str, version: int, seed: int) -> bytes:
    obj = Sampler(random.Random(seed), null_ratio=0.3).message(MODELS[name], version)
    data: bytes = obj.encode(version)
    return data


@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(CASES), st.binary(max_size=200))
def test_random_bytes(case: tuple[str, int], data: bytes) -> None:
    name, version = case
    _try_decode(getattr(messages, name), data, version)


@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.sampled_from(REQUEST_CASES),
    st.integers(0, 2**32),
    st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)), min_size=1, max_size=6),
)
def test_mutated_valid_requests(
    case: tuple[str, int], seed: int, edits: list[tuple[int, int]]
) -> None:
    name, version = case
    data = bytearray(_valid(name, version, seed))
    if not data:
        return
    for at, byte in edits:
        data[at % len(data)] = byte
    _try_decode(getattr(messages, name), bytes(data), version)


@pytest.mark.parametrize(("name", "version"), CASES, ids=[f"{n}-v{v}" for n, v in CASES])
def test_every_truncation_raises(name: str, version: int) -> None:
    cls = getattr(messages, name)
    data = _valid(name, version, 11)
    assert cls.decode(data, version) is not None
    for cut in range(len(data)):
        with pytest.raises(DecodeError):
            cls.decode(data[:cut], version)


def test_unsupported_version() -> None:
    with pytest.raises(UnsupportedVersion):
        ProduceRequest.decode(b"", 99)
    with pytest.raises(UnsupportedVersion):
        ProduceRequest().encode(-1)


def _bounded(fn: Any) -> None:
    tracemalloc.start()
    try:
        with pytest.raises(DecodeError):
            fn()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 64 * 1024, peak


GIANT = [
    # Produce v3: null txn id, acks, timeout, then 2**31-1 topics in 10 bytes
    (
        "produce-v3-array",
        lambda: ProduceRequest.decode(
            b"\xff\xff" + struct.pack(">hii", 1, 0, 0x7FFFFFFF) + b"\0" * 10, 3
        ),
    ),
    # Produce v9: compact array count as a 5-byte varint (2**32-2 elements)
    (
        "produce-v9-compact-array",
        lambda: ProduceRequest.decode(
            b"\x00" + struct.pack(">hi", 1, 0) + b"\xff\xff\xff\xff\x0f" + b"\0" * 10, 9
        ),
    ),
    # Produce v7: one topic whose name claims 32767 bytes
    (
        "produce-v7-string",
        lambda: ProduceRequest.decode(
            b"\xff\xff" + struct.pack(">hiih", 1, 0, 1, 0x7FFF) + b"ab", 7
        ),
    ),
    # Produce v7: records claiming 2 GiB
    (
        "produce-v7-records",
        lambda: ProduceRequest.decode(
            b"\xff\xff"
            + struct.pack(">hiih", 1, 0, 1, 1)
            + b"t"
            + struct.pack(">iii", 1, 0, 0x7FFFFFFF)
            + b"x" * 20,
            7,
        ),
    ),
    # Metadata v4: 2**31-1 topics
    (
        "metadata-v4-array",
        lambda: MetadataRequest.decode(struct.pack(">i", 0x7FFFFFFF) + b"\0" * 8, 4),
    ),
    # negative lengths other than -1
    ("metadata-v4-negative", lambda: MetadataRequest.decode(struct.pack(">i", -2), 4)),
    ("produce-v3-negative-string", lambda: ProduceRequest.decode(b"\xff\xfe" + b"\0" * 20, 3)),
    # varint longer than 5 bytes
    (
        "fetch-v12-long-varint",
        lambda: FetchRequest.decode(
            struct.pack(">iiiibii", -1, 0, 0, 0, 0, 0, 0) + b"\xff" * 12, 12
        ),
    ),
]


@pytest.mark.parametrize("fn", [g[1] for g in GIANT], ids=[g[0] for g in GIANT])
def test_giant_declared_sizes_fail_fast(fn: Any) -> None:
    _bounded(fn)


def test_varint_limits() -> None:
    with pytest.raises(DecodeError):
        read_uvarint(memoryview(b"\x80\x80\x80\x80\x80\x01"), 0)
    assert read_uvarint(memoryview(b"\xff\xff\xff\xff\x0f"), 0) == (2**32 - 1, 5)
    with pytest.raises(DecodeError):
        read_uvarlong(memoryview(b"\x80" * 10 + b"\x01"), 0)
