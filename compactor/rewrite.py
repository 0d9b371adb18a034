"""Key compaction (cleanup.policy=compact): keep the latest record per key.

Runs inside a task over the batches of one partition, in offset order. A record
is dropped when a later record in the task has the same key; a tombstone (null
value) that is itself the latest is dropped only once its batch was appended
before ``tombstone_cutoff_ms`` (delete.retention.ms) and the task starts at the
partition's oldest batch (so no older value can reappear). Records without a
key are kept. Control batches are kept as they are, and so are batches that
cannot be decoded (a "poisoned" batch: corrupt, or inflating past the
decompression cap): copied byte-for-byte, their keys unknown, reported back.

Transactions (as Kafka's cleaner): batches at or past the partition's last
stable offset (an open transaction, and whatever follows it) are kept as they
are and hide no older record; batches of aborted transactions are dropped
whole and hide nothing, so neither a read_committed nor a read_uncommitted
reader ever sees an aborted value where a committed one was. Transaction
markers are kept (a reader of the data before them needs them; they go with
retention or DeleteRecords, which also prune the aborted ranges).

Batches that keep every record are copied byte-for-byte; batches that keep none
disappear (their offsets become a gap, as in Kafka); the others are rebuilt with
:class:`~kafka_protocol.records.RecordBatchBuilder`: same codec, producer
fields and timestamp type, each record at its original offset delta, and the
original ``lastOffsetDelta`` so the batch still ends at the same offset. The
metastore row keeps the batch's base and last offsets.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Mapping, Sequence

from compactor.tasks import CompactSpec
from kafka_protocol.exceptions import DecodeError
from kafka_protocol.records import RecordBatchBuilder, RecordBatchView
from metastore.types import StoredBatch
from objectstore.parquet import DecodedBatch, decode_batch, set_last_offset_delta

RowKey = tuple[uuid.UUID, int, int]


def compact_partition(
    rows: Sequence[StoredBatch],
    datas: Mapping[RowKey, bytes],
    spec: CompactSpec,
    poisoned: list[tuple[StoredBatch, str]] | None = None,
) -> tuple[list[tuple[StoredBatch, bytes]], int]:
    """``(kept (row, bytes) pairs, records dropped)`` for one partition's rows; rows
    that cannot be decoded are kept as they are and appended to ``poisoned``."""
    ordered = sorted(rows, key=lambda b: b.last_offset)
    decoded: list[tuple[StoredBatch, bytes, RecordBatchView, DecodedBatch | None]] = []
    latest: dict[bytes, int] = {}
    dropped = 0
    for b in ordered:
        data = datas[(b.topic_id, b.partition, b.last_offset)]
        view = RecordBatchView(data)
        if view.is_control or (spec.stable_offset >= 0 and b.last_offset >= spec.stable_offset):
            decoded.append((b, data, view, None))  # kept as is, hides nothing
            continue
        if view.is_transactional and _aborted(spec, view.producer_id, b.base_offset):
            dropped += b.record_count
            continue
        try:
            batch = decode_batch(data, b.base_offset)
        except (DecodeError, ValueError) as e:
            if poisoned is not None:
                poisoned.append((b, f"{type(e).__name__}: {e}"))
            decoded.append((b, data, view, None))
            continue
        for r in batch.records:
            if r.key is not None:
                latest[r.key] = r.offset
        decoded.append((b, data, view, batch))
    out: list[tuple[StoredBatch, bytes]] = []
    for b, data, view, d in decoded:
        if d is None:
            out.append((b, data))
            continue
        expire = spec.prefix_complete and b.append_time < spec.tombstone_cutoff_ms
        kept = []
        for r in d.records:
            if r.key is None:
                kept.append(r)
            elif latest[r.key] == r.offset and not (r.value is None and expire):
                kept.append(r)
        dropped += len(d.records) - len(kept)
        if len(kept) == len(d.records):
            out.append((b, data))
            continue
        if not kept:
            continue
        builder = RecordBatchBuilder(
            view.compression,
            base_offset=view.base_offset,
            producer_id=view.producer_id,
            producer_epoch=view.producer_epoch,
            base_sequence=view.base_sequence,
            is_transactional=view.is_transactional,
            timestamp_type=view.timestamp_type,
        )
        for r in kept:
            builder.append(
                r.key,
                r.value,
                r.headers,
                timestamp_ms=r.timestamp,
                offset_delta=r.offset - b.base_offset,
            )
        built = set_last_offset_delta(builder.build(), b.last_offset - b.base_offset)
        nv = RecordBatchView(built)
        out.append(
            (
                dataclasses.replace(
                    b,
                    byte_len=len(built),
                    record_count=len(kept),
                    base_timestamp=nv.base_timestamp,
                    max_timestamp=nv.max_timestamp,
                ),
                built,
            )
        )
    return out, dropped


def _aborted(spec: CompactSpec, producer_id: int, offset: int) -> bool:
    return any(pid == producer_id and first <= offset <= last for pid, first, last in spec.aborted)
