"""Executing one task: read the planned batches, write the new object(s), describe the swap.

Runs the same in-process and inside a PySpark executor: it needs only an object
store, never the metastore. Reads merge adjacent byte ranges of one object into
one ranged GET. A merge copies batches byte-for-byte into
:class:`~objectstore.segment.SegmentBuilder` (which lays them out grouped by
partition), so offsets, CRCs and compression stay exactly as produced; only
the byte positions in the replacement rows change. Key compaction and Parquet
conversion decode records (:mod:`compactor.rewrite`, :mod:`objectstore.parquet`).

New objects get fresh random keys and are PUT create-only; if the swap later
fails they are registered as ``deleting`` (or, after a crash, found by the
orphan GC), never overwritten.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import time
import uuid
from collections.abc import Sequence
from typing import TYPE_CHECKING

from compactor.parquet_merge import run_parquet_merge
from compactor.rewrite import compact_partition
from compactor.tasks import MergeTask, ParquetTask, PoisonedBatch, Task, TaskResult
from kafka_protocol.exceptions import DecodeError
from kafka_protocol.records import Record
from metastore.types import NewObject, ParquetFileInfo, StoredBatch
from objectstore import parquet as pq
from objectstore.base import ObjectStore
from objectstore.segment import BatchMeta, SegmentBuilder

if TYPE_CHECKING:
    import pyarrow as pa

RowKey = tuple[uuid.UUID, int, int]
PARQUET_LEVEL = 2  # Parquet objects are final: never merged again
# Batches no task can decode are carried over, byte-for-byte, into segment objects of
# this level, which no merge or Parquet conversion picks up again.
QUARANTINE_LEVEL = 3
QUARANTINE_PREFIX = "quarantine/"
# Transactional batches and markers of a partition converted to Parquet, carried
# over byte-for-byte (at the quarantine level: never rewritten again).
TRANSACTIONAL_PREFIX = "transactional/"


def row_key(b: StoredBatch) -> RowKey:
    return (b.topic_id, b.partition, b.last_offset)


async def read_rows(
    store: ObjectStore, rows: Sequence[StoredBatch], concurrency: int = 8
) -> tuple[dict[RowKey, bytes], int]:
    """The bytes of every row (merged ranged GETs); returns them and the bytes read."""
    by_object: dict[str, list[StoredBatch]] = {}
    for b in rows:
        by_object.setdefault(b.object_key, []).append(b)
    ranges: list[tuple[str, int, int, list[StoredBatch]]] = []
    for key, group in by_object.items():
        group.sort(key=lambda b: b.byte_pos)
        start, end, members = group[0].byte_pos, group[0].byte_pos + group[0].byte_len, [group[0]]
        for b in group[1:]:
            if b.byte_pos <= end:
                end = max(end, b.byte_pos + b.byte_len)
                members.append(b)
            else:
                ranges.append((key, start, end, members))
                start, end, members = b.byte_pos, b.byte_pos + b.byte_len, [b]
        ranges.append((key, start, end, members))
    sem = asyncio.Semaphore(max(1, concurrency))
    out: dict[RowKey, bytes] = {}

    async def one(key: str, start: int, end: int, members: list[StoredBatch]) -> int:
        async with sem:
            data = await store.get(key, start, end)
        if len(data) != end - start:
            raise ValueError(f"{key}: short read {len(data)} of {end - start} bytes at {start}")
        for b in members:
            lo = b.byte_pos - start
            out[row_key(b)] = data[lo : lo + b.byte_len]
        return len(data)

    sizes = await asyncio.gather(*(one(*r) for r in ranges))
    return out, sum(sizes)


def _object_key(prefix: str, level: int) -> str:
    ms = time.time_ns() // 1_000_000
    return f"{prefix}L{level}/{ms:013d}-{uuid.uuid4().hex}-{os.urandom(3).hex()}"


async def run_merge(task: MergeTask, store: ObjectStore) -> TaskResult:
    datas, nread = await read_rows(store, task.rows, task.read_concurrency)
    specs = {(c.topic_id, c.partition): c for c in task.compact}
    by_partition: dict[tuple[uuid.UUID, int], list[StoredBatch]] = {}
    for b in task.rows:
        by_partition.setdefault((b.topic_id, b.partition), []).append(b)
    planned: list[tuple[StoredBatch, bytes]] = []
    dropped = 0
    bad: list[tuple[StoredBatch, str]] = []
    for tp in sorted(by_partition, key=lambda tp: (tp[0].bytes, tp[1])):
        rows = sorted(by_partition[tp], key=lambda b: b.last_offset)
        spec = specs.get(tp)
        if spec is None:
            planned.extend((b, datas[row_key(b)]) for b in rows)
            continue
        kept, n = compact_partition(rows, datas, spec, bad)
        dropped += n
        planned.extend(kept)

    new_objects: list[NewObject] = []
    replacements: list[StoredBatch] = []
    builder = SegmentBuilder()
    members: list[StoredBatch] = []

    async def flush() -> None:
        nonlocal builder, members
        if not members:
            return
        data, entries = builder.finish()
        key = _object_key(task.key_prefix, task.out_level)
        await store.put(key, data)
        new_objects.append(NewObject(key, len(data), task.out_level, "segment"))
        for b, e in zip(members, entries, strict=True):
            replacements.append(
                dataclasses.replace(
                    b,
                    object_id=-1,
                    object_key=key,
                    byte_pos=e.byte_pos,
                    byte_len=e.byte_len,
                    record_count=e.record_count,
                    base_timestamp=e.base_timestamp,
                    max_timestamp=e.max_timestamp,
                )
            )
        builder, members = SegmentBuilder(), []

    for b, data in planned:
        builder.add(b.topic_id, b.partition, data, BatchMeta.from_record_batch(data))
        members.append(b)
        if builder.size >= task.target_bytes:
            await flush()
    await flush()
    return TaskResult(
        task.task_id,
        new_objects,
        replacements,
        bytes_read=nread,
        bytes_written=sum(o.size for o in new_objects),
        records_dropped=dropped,
        poisoned=[_poison(b, why) for b, why in bad],
    )


def _poison(b: StoredBatch, why: str) -> PoisonedBatch:
    return PoisonedBatch(b.topic_id, b.partition, b.base_offset, b.last_offset, why[:500])


async def _quarantine(
    store: ObjectStore, prefix: str, bad: Sequence[tuple[StoredBatch, bytes]]
) -> tuple[NewObject, list[StoredBatch]]:
    """Carry batches over, byte-for-byte, into one segment at the quarantine level."""
    builder = SegmentBuilder()
    for b, data in bad:
        builder.add(b.topic_id, b.partition, data, BatchMeta.from_record_batch(data))
    data, entries = builder.finish()
    key = _object_key(prefix, QUARANTINE_LEVEL)
    await store.put(key, data)
    rows = [
        dataclasses.replace(
            b, object_id=-1, object_key=key, byte_pos=e.byte_pos, byte_len=e.byte_len
        )
        for (b, _), e in zip(bad, entries, strict=True)
    ]
    return NewObject(key, len(data), QUARANTINE_LEVEL, "segment"), rows


async def run_parquet(task: ParquetTask, store: ObjectStore) -> TaskResult:
    rows = sorted(task.rows, key=lambda b: b.last_offset)
    datas, nread = await read_rows(store, rows, task.read_concurrency)
    dropped = 0
    reasons: list[tuple[StoredBatch, str]] = []
    if task.compact is not None:
        kept, dropped = compact_partition(rows, datas, task.compact, reasons)
    else:
        kept = [(b, datas[row_key(b)]) for b in rows]
    decoded: list[tuple[StoredBatch, pq.DecodedBatch]] = []
    bad: list[tuple[StoredBatch, bytes]] = []
    known = {row_key(b) for b, _ in reasons}
    transactional: list[tuple[StoredBatch, bytes]] = []
    for b, data in kept:
        if row_key(b) in known:
            bad.append((b, data))
            continue
        if b.is_transactional:
            # Transactional data and markers stay segment bytes: readers (read_committed
            # or not) see exactly what they saw, markers included, and the Parquet
            # rows hold no aborted record.
            transactional.append((b, data))
            continue
        try:
            decoded.append((b, pq.decode_batch(data, b.base_offset)))
        except (DecodeError, ValueError) as e:
            # A poisoned batch must not stop the partition's conversion.
            bad.append((b, data))
            reasons.append((b, f"{type(e).__name__}: {e}"))
    # Control batches (no data records) have no rows in the Kafka schema: their
    # batch rows go away with the swap.
    decoded = [(b, d) for b, d in decoded if d.records]
    new_objects: list[NewObject] = []
    carried: list[StoredBatch] = []
    if bad:
        obj, carried = await _quarantine(store, QUARANTINE_PREFIX, bad)
        new_objects.append(obj)
    if transactional:
        obj, kept_txn = await _quarantine(store, TRANSACTIONAL_PREFIX, transactional)
        new_objects.append(obj)
        carried = carried + kept_txn
    poisoned = [_poison(b, why) for b, why in reasons]
    if not decoded:
        return TaskResult(
            task.task_id,
            new_objects,
            carried,
            bytes_read=nread,
            bytes_written=sum(o.size for o in new_objects),
            records_dropped=dropped,
            poisoned=poisoned,
        )
    groups = _by_day(decoded) if task.split_days else {None: decoded}
    replacements: list[StoredBatch] = []
    infos: list[ParquetFileInfo] = []
    for group in groups.values():
        obj, rows_out, info = await _write_parquet(task, store, group)
        new_objects.append(obj)
        replacements.extend(rows_out)
        infos.append(info)
    return TaskResult(
        task.task_id,
        new_objects,
        replacements + carried,
        infos,
        bytes_read=nread,
        bytes_written=sum(o.size for o in new_objects),
        records_dropped=dropped,
        poisoned=poisoned,
    )


async def _registry_columns(
    table: pa.Table, settings: str, rows: Sequence[StoredBatch]
) -> pa.Table:
    """Typed columns of Confluent wire-format Avro values; an unreachable registry
    fails the task (the batches stay in their segments; the next pass retries)
    until the oldest batch is older than the topic's wait, then dead letters."""
    import json

    from objectstore.schema_registry import add_registry_avro_columns

    cfg = json.loads(settings)
    oldest = min((b.append_time for b in rows), default=0)
    give_up = time.time() * 1000 - oldest >= int(cfg["wait_ms"])
    return await add_registry_avro_columns(table, str(cfg["registry"]), give_up=give_up)


async def _write_parquet(
    task: ParquetTask, store: ObjectStore, decoded: Sequence[tuple[StoredBatch, pq.DecodedBatch]]
) -> tuple[NewObject, list[StoredBatch], ParquetFileInfo]:
    """One Parquet object of ``decoded`` (offset order); the footer keeps each
    batch's producer fields and codec so the agent rebuilds it as produced."""
    table = pq.batches_to_table(task.topic, task.partition, (d for _, d in decoded))
    if task.value_format == "json":
        from objectstore.json_values import add_json_columns

        table = add_json_columns(table, task.value_schema)
    elif task.value_format == "avro" and task.value_schema and '"registry"' in task.value_schema:
        table = await _registry_columns(table, task.value_schema, [b for b, _ in decoded])
    elif task.value_format in ("avro", "protobuf") and task.value_schema:
        from objectstore.typed_values import add_typed_columns

        table = add_typed_columns(table, task.value_format, task.value_schema)
    first, last, min_ts, max_ts = pq.table_stats(table)
    headers = [d.header for _, d in decoded if d.header is not None]
    data = pq.write_table(
        table,
        row_group_rows=task.row_group_rows,
        metadata={
            "floe.topic": task.topic,
            "floe.topic_id": str(task.topic_id),
            "floe.partition": str(task.partition),
            "floe.base_offset": str(first),
            "floe.last_offset": str(last),
            pq.BATCHES_KEY: pq.encode_batch_infos(headers),
        },
    )
    key = (
        f"{task.key_prefix}{task.topic_id}/{task.partition}/"
        f"{first:020d}-{last:020d}-{uuid.uuid4().hex[:12]}{pq.PARQUET_SUFFIX}"
    )
    await store.put(key, data)
    replacements = [
        dataclasses.replace(
            b, object_id=-1, object_key=key, byte_pos=0, record_count=len(d.records)
        )
        for b, d in decoded
    ]
    info = ParquetFileInfo(
        key, task.topic_id, task.partition, first, last, table.num_rows, min_ts, max_ts
    )
    return NewObject(key, len(data), PARQUET_LEVEL, "parquet"), replacements, info


DAY_MS = 86_400_000


def _by_day(
    decoded: Sequence[tuple[StoredBatch, pq.DecodedBatch]],
) -> dict[int, list[tuple[StoredBatch, pq.DecodedBatch]]]:
    """Rows grouped by the UTC day of their timestamp, one Parquet file (one Iceberg
    partition value of ``day(timestamp)``) per group. A batch whose records fall on
    several days (one across midnight, or out-of-order timestamps) is cut into
    sub-batches of consecutive same-day records: each gets a batch row of its own
    (offsets tile the original batch, byte length shared out, base sequence moved
    with its first offset), so the Kafka view keeps every record at its offset."""
    out: dict[int, list[tuple[StoredBatch, pq.DecodedBatch]]] = {}
    for b, d in decoded:
        runs: list[list[Record]] = []
        days: list[int] = []
        for r in d.records:
            day = r.timestamp // DAY_MS
            if not days or days[-1] != day:
                runs.append([])
                days.append(day)
            runs[-1].append(r)
        if len(runs) == 1:
            out.setdefault(days[0], []).append((b, d))
            continue
        total = len(d.records)
        left = b.byte_len
        append = d.timestamp_type == 1
        for i, (day, recs) in enumerate(zip(days, runs, strict=True)):
            base = b.base_offset if i == 0 else recs[0].offset
            last = b.last_offset if i == len(runs) - 1 else runs[i + 1][0].offset - 1
            share = left if i == len(runs) - 1 else max(1, b.byte_len * len(recs) // total)
            left -= share
            seq = b.base_sequence + (base - b.base_offset) if b.base_sequence >= 0 else -1
            base_ts = b.base_timestamp if append else recs[0].timestamp
            max_ts = b.max_timestamp if append else max(r.timestamp for r in recs)
            row = dataclasses.replace(
                b,
                base_offset=base,
                last_offset=last,
                byte_len=max(1, share),
                record_count=len(recs),
                base_timestamp=base_ts,
                max_timestamp=max_ts,
                base_sequence=seq,
            )
            h = d.header
            header = (
                dataclasses.replace(
                    h,
                    base_offset=base,
                    base_sequence=h.base_sequence + (base - b.base_offset)
                    if h.base_sequence >= 0
                    else -1,
                    base_timestamp=base_ts,
                    max_timestamp=max_ts,
                )
                if h is not None
                else None
            )
            out.setdefault(day, []).append(
                (row, pq.DecodedBatch(base, last, d.timestamp_type, recs, header))
            )
    return out


async def execute_task(task: Task, store: ObjectStore) -> TaskResult:
    if isinstance(task, MergeTask):
        return await run_merge(task, store)
    if isinstance(task, ParquetTask):
        return await run_parquet(task, store)
    return await run_parquet_merge(task, store)
