"""Step 0 of a produce: is this partition's record set one valid batch that may be stored?

Where it sits: in the produce handler (:mod:`agent.handlers.produce`), per
partition, before anything is reserved or appended (:mod:`agent.produce`).
:func:`fast_meta` checks the common case with one header unpack and one CRC;
when it says no, :func:`check_batch` says why, with the Kafka error code a
client expects (CORRUPT_MESSAGE, UNSUPPORTED_FOR_MESSAGE_FORMAT, INVALID_RECORD,
MESSAGE_TOO_LARGE). :func:`keyless` applies Kafka's rule for compacted topics:
every record needs a key (INVALID_RECORD otherwise); it is the one check that
decodes records (decompressing, bounded), and only for compacted topics.
"""

from __future__ import annotations

import struct
from typing import Any

from crc32c import crc32c

from kafka_protocol.errors import ErrorCode
from kafka_protocol.exceptions import CorruptRecordError, DecodeError, UnsupportedMagic
from kafka_protocol.records import RecordBatchView
from objectstore.segment import BatchMeta

__all__ = ["check_batch", "fast_meta", "keyless"]

_HEADER = struct.Struct(">qiibIhiqqqhii")  # RecordBatch v2 header, 61 bytes
# attributes bits that send a batch down the slow path: an unknown codec (5-7) or control
_ODD_ATTRS = 0x20
_new_tuple = tuple.__new__


def fast_meta(records: Any, max_bytes: int) -> BatchMeta | None:
    """The batch's header fields when it is exactly one valid v2 batch that may be
    produced (the common case, checked with one unpack and one CRC); ``None``
    when anything is off, and :func:`check_batch` says what."""
    if records is None:
        return None
    n = len(records)
    if n < 61 or n > max_bytes:
        return None
    _, blen, _, magic, crc, attrs, lod, bts, mts, pid, epoch, seq, count = _HEADER.unpack_from(records)
    if (
        magic != 2
        or blen + 12 != n
        or attrs & _ODD_ATTRS
        or attrs & 0x07 > 4
        or count <= 0
        or lod < 0
        or (pid >= 0 and seq < 0)
        or (attrs & 0x10 and pid < 0)
        or (attrs & 0x07 == 0 and count > (n - 61) // 7)
    ):
        return None
    if crc32c(records[21:]) != crc:
        return None
    # tuple.__new__ directly: the NamedTuple's __new__ is a Python frame per batch.
    return _new_tuple(BatchMeta, (count, mts, bts, lod, pid, epoch, seq, attrs))



def check_batch(records: Any, max_bytes: int) -> tuple[int, RecordBatchView | None, str | None]:
    """(error code, view, message) for one partition's record set."""
    if records is None or len(records) == 0:
        return ErrorCode.CORRUPT_MESSAGE, None, "empty record set"
    try:
        view = RecordBatchView(records)
    except UnsupportedMagic as e:
        return ErrorCode.UNSUPPORTED_FOR_MESSAGE_FORMAT, None, str(e)
    except (CorruptRecordError, DecodeError) as e:
        # A set of several batches fails the "exactly one batch" length check here.
        if len(records) >= 61:
            try:
                first = RecordBatchView.at(records, 0)
                if first.size < len(records):
                    return ErrorCode.INVALID_RECORD, None, "produce must carry exactly one record batch per partition"
            except (CorruptRecordError, DecodeError):
                pass
        return ErrorCode.CORRUPT_MESSAGE, None, str(e)
    if view.size > max_bytes:
        return ErrorCode.MESSAGE_TOO_LARGE, None, f"batch of {view.size} bytes exceeds max.message.bytes={max_bytes}"
    try:
        view.validate()
    except (CorruptRecordError, DecodeError) as e:
        return ErrorCode.CORRUPT_MESSAGE, None, str(e)
    if view.records_count <= 0:
        return ErrorCode.CORRUPT_MESSAGE, None, "record batch without records"
    if view.is_control:
        return ErrorCode.INVALID_RECORD, None, "clients may not produce control batches"
    if view.producer_id >= 0 and view.base_sequence < 0:
        # sequence -1 with a producer id is how the sequencer knows a marker
        return ErrorCode.INVALID_RECORD, None, "a producer's batch must carry a sequence number"
    if view.is_transactional and view.producer_id < 0:
        return ErrorCode.INVALID_RECORD, None, "a transactional batch needs a producer id"
    return ErrorCode.NONE, view, None


def keyless(records: Any) -> tuple[int, str] | None:
    """For a compacted topic: (INVALID_RECORD, why) when a record of the batch has no
    key, (CORRUPT_MESSAGE, why) when its records cannot be decoded; None when every
    record has a key. The batch's CRC was checked before."""
    try:
        for r in RecordBatchView(records).records():
            if r.key is None:
                return ErrorCode.INVALID_RECORD, "Compacted topic cannot accept message without key"
    except (CorruptRecordError, DecodeError) as e:
        return ErrorCode.CORRUPT_MESSAGE, str(e)
    return None
