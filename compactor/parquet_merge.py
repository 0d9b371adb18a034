"""Executing a Parquet merge: small Parquet objects of one partition -> one larger one.

Where it sits: executor side, like :mod:`compactor.execute` (it needs only the
object store, so it runs in-process or in a PySpark executor); planned by
:mod:`compactor.parquet_plan`, committed by the runner with
``Metastore.swap_batches`` (every batch row of the inputs repointed to the new
object in one transaction; the inputs go to ``deleting`` and the GC removes
them after the grace period).

Rows are copied, not re-decoded from Kafka batches: the inputs' Arrow tables are
concatenated in offset order (inputs are adjacent, their offset ranges do not
overlap) and re-cut into row groups of ``row_group_rows``, written with the
options of :func:`objectstore.parquet.write_table`. The footer keeps the
inputs' key-value metadata with the merged range (``floe.base_offset`` /
``floe.last_offset``) and the union of their batch headers
(:data:`~objectstore.parquet.BATCHES_KEY`), so the agent's
:class:`~agent.fetch.parquet.ParquetFetcher` rebuilds every batch exactly as
before (codec, producer fields). Batch rows keep their offsets, ``byte_len`` and
``record_count``; only the object changes.

Inputs of one group whose Arrow schemas differ (typed JSON value columns that
evolved between files) are split into runs of one schema; a run of one object is
left where it is (its rows are "replaced" by themselves).
"""

from __future__ import annotations

import asyncio
import dataclasses
import uuid
from collections.abc import Sequence
from typing import Any

from compactor.tasks import ParquetMergeTask, TaskResult
from metastore.types import NewObject, ParquetFileInfo, StoredBatch
from objectstore import parquet as pq
from objectstore.base import ObjectStore

PARQUET_LEVEL = 2  # as compactor.execute: Parquet objects' level
_RANGE_KEYS = (b"floe.base_offset", b"floe.last_offset", pq.BATCHES_KEY.encode(), b"ARROW:schema")


def _open(data: bytes) -> Any:
    import pyarrow as pa
    import pyarrow.parquet as papq

    return papq.ParquetFile(pa.BufferReader(data))


def _schema_runs(keys: Sequence[str], files: dict[str, Any]) -> list[list[str]]:
    runs: list[list[str]] = []
    for k in keys:
        schema = files[k].schema_arrow
        if runs and files[runs[-1][-1]].schema_arrow.equals(schema, check_metadata=False):
            runs[-1].append(k)
        else:
            runs.append([k])
    return runs


def _merge(
    task: ParquetMergeTask, keys: Sequence[str], files: dict[str, Any]
) -> tuple[bytes, tuple[int, int, int, int], int]:
    """One Parquet file of the inputs ``keys``: ``(bytes, (first offset, last offset,
    min ts, max ts), rows)``. Runs in a worker thread; holds one input decoded at a time
    plus one row group."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as papq

    first = files[keys[0]]
    meta = dict(first.schema_arrow.metadata or {})
    for name in _RANGE_KEYS:
        meta.pop(name, None)
    infos: dict[int, pq.BatchInfo] = {}
    for k in keys:
        kv = files[k].metadata.metadata or {}
        infos.update(pq.decode_batch_infos(kv.get(pq.BATCHES_KEY.encode())))
    lo = hi = min_ts = max_ts = None
    sink = pa.BufferOutputStream()
    pending: list[pa.Table] = []
    buffered = rows = 0
    with papq.ParquetWriter(
        sink,
        first.schema_arrow.remove_metadata(),
        compression="zstd",
        use_dictionary=["topic"],
        write_statistics=True,
    ) as w:
        for k in keys:
            t = files[k].read().replace_schema_metadata(None)
            if t.num_rows:
                o = pc.min_max(t["offset"])
                ts = pc.min_max(t["timestamp"].cast("int64"))
                o_lo, o_hi = int(o["min"].as_py()), int(o["max"].as_py())
                t_lo, t_hi = int(ts["min"].as_py()) // 1000, int(ts["max"].as_py()) // 1000
                lo = o_lo if lo is None else min(lo, o_lo)
                hi = o_hi if hi is None else max(hi, o_hi)
                min_ts = t_lo if min_ts is None else min(min_ts, t_lo)
                max_ts = t_hi if max_ts is None else max(max_ts, t_hi)
            rows += t.num_rows
            pending.append(t)
            buffered += t.num_rows
            while buffered >= task.row_group_rows:
                whole = pa.concat_tables(pending)
                w.write_table(whole.slice(0, task.row_group_rows), task.row_group_rows)
                rest = whole.slice(task.row_group_rows)
                pending, buffered = [rest], rest.num_rows
        if buffered:
            w.write_table(pa.concat_tables(pending), task.row_group_rows)
        meta[b"floe.base_offset"] = str(lo).encode()
        meta[b"floe.last_offset"] = str(hi).encode()
        meta[pq.BATCHES_KEY.encode()] = pq.encode_batch_infos(
            [infos[b] for b in sorted(infos)]
        ).encode()
        w.add_key_value_metadata(meta)
    assert lo is not None and hi is not None and min_ts is not None and max_ts is not None
    return bytes(sink.getvalue().to_pybytes()), (int(lo), int(hi), min_ts, max_ts), rows


async def run_parquet_merge(task: ParquetMergeTask, store: ObjectStore) -> TaskResult:
    wanted = [k for g in task.groups for k in g]
    sem = asyncio.Semaphore(max(1, task.read_concurrency))

    async def get(key: str) -> bytes:
        async with sem:
            return await store.get(key)

    datas = dict(zip(wanted, await asyncio.gather(*(get(k) for k in wanted)), strict=True))
    nread = sum(len(d) for d in datas.values())
    files = {k: _open(d) for k, d in datas.items()}
    new_objects: list[NewObject] = []
    infos: list[ParquetFileInfo] = []
    moved: dict[str, str] = {}  # input key -> merged object key
    for group in task.groups:
        for keys in _schema_runs(group, files):
            if len(keys) < 2:
                continue
            data, (first, last, min_ts, max_ts), n = await asyncio.to_thread(
                _merge, task, keys, files
            )
            key = (
                f"{task.key_prefix}{task.topic_id}/{task.partition}/"
                f"{first:020d}-{last:020d}-{uuid.uuid4().hex[:12]}{pq.PARQUET_SUFFIX}"
            )
            await store.put(key, data)
            new_objects.append(NewObject(key, len(data), PARQUET_LEVEL, "parquet"))
            infos.append(
                ParquetFileInfo(key, task.topic_id, task.partition, first, last, n, min_ts, max_ts)
            )
            moved.update((k, key) for k in keys)
    replacements: list[StoredBatch] = [
        dataclasses.replace(b, object_id=-1, object_key=moved[b.object_key])
        if b.object_key in moved
        else b
        for b in task.rows
    ]
    return TaskResult(
        task.task_id,
        new_objects,
        replacements,
        infos,
        bytes_read=nread,
        bytes_written=sum(o.size for o in new_objects),
    )
