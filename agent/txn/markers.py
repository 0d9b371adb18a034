"""Transaction markers: the COMMIT / ABORT control batches the coordinator writes.

Where it sits: built by :mod:`agent.txn.coordinator` and appended to the produce
pipeline like any client batch (one object, one metastore commit; no side
channel). A marker is a v2 RecordBatch with the transactional and control
attributes, the transaction's producer id and epoch, sequence -1 (which tells
the sequencer it is a marker) and one record: key ``(version 0, type)`` with
type 0 = ABORT, 1 = COMMIT, value ``(version 0, coordinator epoch)``, as
Kafka's ``EndTransactionMarker``.
"""

from __future__ import annotations

import struct

from kafka_protocol.records import RecordBatchBuilder
from objectstore.segment import BatchMeta

ABORT, COMMIT = 0, 1
_KEY = struct.Struct(">hh")
_VALUE = struct.Struct(">hi")


def marker_batch(
    producer_id: int, producer_epoch: int, commit: bool, timestamp_ms: int, coordinator_epoch: int = 0
) -> tuple[bytes, BatchMeta]:
    """The marker's bytes and the header fields the segment index keeps."""
    builder = RecordBatchBuilder(
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=-1,
        is_transactional=True,
        is_control=True,
    )
    builder.append(
        _KEY.pack(0, COMMIT if commit else ABORT),
        _VALUE.pack(0, coordinator_epoch),
        timestamp_ms=timestamp_ms,
    )
    data = builder.build()
    return data, BatchMeta.from_record_batch(data)


def parse_marker(key: bytes | None) -> int | None:
    """The type of a control record's key (ABORT / COMMIT), None if not a marker."""
    if key is None or len(key) < _KEY.size:
        return None
    version, kind = _KEY.unpack_from(key)
    return kind if version == 0 and kind in (ABORT, COMMIT) else None
