"""The produce handler's one-unpack batch check (issue 13) agrees with the full one.

``fast_meta`` accepts a batch only if ``check_batch`` would, with the same
header fields; anything else it leaves to ``check_batch`` (which says why)."""

from __future__ import annotations

import struct

from hypothesis import given, settings
from hypothesis import strategies as st

from agent.produce.validate import check_batch, fast_meta
from kafka_protocol.errors import ErrorCode
from kafka_protocol.records import RecordBatchBuilder


def _batch(n: int = 2, **kw) -> bytes:
    b = RecordBatchBuilder(**kw)
    for i in range(n):
        b.append(b"k%d" % i, b"v" * (10 + i), timestamp_ms=1_700_000_000_000 + i)
    return b.build()


def _agree(data: bytes | None, max_bytes: int = 1 << 20) -> None:
    meta = fast_meta(memoryview(data) if data is not None else None, max_bytes)
    code, view, _msg = check_batch(data, max_bytes)
    if meta is None:
        return  # the slow path decides; nothing to compare
    assert code == ErrorCode.NONE and view is not None, f"fast path accepted what the full check refuses ({code})"
    assert meta == (
        view.records_count, view.max_timestamp, view.base_timestamp, view.last_offset_delta,
        view.producer_id, view.producer_epoch, view.base_sequence, view.attributes,
    )


def test_valid_batch_takes_the_fast_path():
    data = _batch()
    meta = fast_meta(memoryview(data), 1 << 20)
    assert meta is not None and meta.record_count == 2
    _agree(data)


def test_refusals_fall_back():
    data = _batch()
    assert fast_meta(memoryview(data), len(data) - 1) is None  # too large
    bad_crc = bytearray(data)
    bad_crc[-1] ^= 1
    assert fast_meta(memoryview(bytes(bad_crc)), 1 << 20) is None
    assert check_batch(bytes(bad_crc), 1 << 20)[0] == ErrorCode.CORRUPT_MESSAGE
    two = data + data
    assert fast_meta(memoryview(two), 1 << 20) is None
    assert check_batch(two, 1 << 20)[0] == ErrorCode.INVALID_RECORD
    assert fast_meta(None, 1 << 20) is None
    assert fast_meta(memoryview(b""), 1 << 20) is None


@settings(max_examples=400, deadline=None)
@given(
    pos=st.integers(0, 120),
    value=st.integers(0, 255),
    cut=st.integers(0, 3),
    pid=st.sampled_from([-1, 0, 7]),
    seq=st.sampled_from([-1, 0, 5]),
)
def test_mutated_batches_agree(pos: int, value: int, cut: int, pid: int, seq: int) -> None:
    data = bytearray(_batch(producer_id=pid, producer_epoch=0 if pid >= 0 else -1, base_sequence=seq))
    if pos < len(data):
        data[pos] = value
    if cut:
        del data[-cut:]
    _agree(bytes(data))
    # and with the CRC made valid again, so the header checks themselves are compared
    if len(data) >= 61:
        from crc32c import crc32c

        struct.pack_into(">I", data, 17, crc32c(bytes(data[21:])))
        _agree(bytes(data))
