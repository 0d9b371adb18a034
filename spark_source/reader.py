"""Executor side: read a :class:`~spark_source.plan.ReadTask` straight from storage.

Segments are read with one ranged read per :class:`~spark_source.plan.SegmentSpan`
and every batch in it is decoded (all codecs, raw and xerial snappy) with the
real base offset the plan carries (stored batches keep a placeholder 0).
Parquet objects are read with pyarrow, skipping row groups by the offset
column's statistics. Either way the output is ``pyarrow.RecordBatch``\\ es of
exactly Spark's Arrow schema for the Kafka source, holding precisely the
records with ``task.start <= offset < task.end``.

Storage is reached without the metastore and without Floe's async stores:
``file:///dir`` maps keys to files with :func:`objectstore.local.key_path`,
``s3://bucket/prefix?endpoint=...&region=...`` goes through boto3 with one
ranged GET per read and no HEAD (credentials from the URL or the standard AWS
environment); objects the agent presigned for the plan are read with plain
HTTP range requests and need no credentials. A presigned segment object comes
as byte runs, each URL signing its exact ``Range`` (the agent authorized those
bytes and no others): a span is assembled from the runs it overlaps, each run
fetched whole (and kept while the next span reads it too), and a batch outside
every run is an error, never a read of the whole object.

The journal tier (issue 40): batch rows may name ``journal/`` keys, objects that
live only in the journal buckets (at least ``journal_quorum`` of them) until
consolidation or the compactor rewrites them into the standard bucket. Such a
key, when the plan holds no presigned URL for it, is read from the journal URLs
(the ``journal`` option, or those the agents' plan names) in turn: a missing
copy or a failing bucket moves on to the next one, as the agents'
``QuorumStore`` reads do.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl, unquote, urlsplit

from kafka_protocol.records import ATTR_CONTROL, RecordBatchView, patch_base_offset
from objectstore.byte_grants import covered
from objectstore.journal import is_journal_key
from objectstore.local import key_path
from objectstore.parquet import kafka_schema
from objectstore.rangefile import RangeFile
from spark_source.plan import ObjectRef, ParquetSpan, ReadTask, SegmentSpan

if TYPE_CHECKING:
    import pyarrow as pa

# Rows per emitted Arrow batch, and the payload bytes after which one is cut early.
BATCH_ROWS = 8192
BATCH_BYTES = 8 * 1024 * 1024

COLUMNS = ("key", "value", "topic", "partition", "offset", "timestamp", "timestampType")


def output_schema(include_headers: bool) -> pa.Schema:
    """Spark's Arrow schema of the Kafka source (headers only with ``includeHeaders``)."""
    schema = kafka_schema()
    return schema if include_headers else schema.remove(schema.get_field_index("headers"))


_S3_CLIENTS: dict[tuple[str, ...], Any] = {}


class Storage:
    """Read access to one object store URL from an executor (no metastore, no asyncio).

    Reads name their byte range, so no request asks for an object's size first
    (no HEAD): segment spans come with their length, Parquet objects with the
    size the plan carries. Objects the agent presigned are read with plain HTTP
    range GETs and need no credentials at all.
    """

    def __init__(
        self, url: str, *, timeout_ms: int = 120_000, journal: Sequence[str] = ()
    ) -> None:
        self.url = url
        self.timeout_s = timeout_ms / 1000.0
        # The journal buckets, tried in turn for ``journal/`` keys (each holds a copy or not).
        self.journal = [Storage(u, timeout_ms=timeout_ms) for u in journal]
        self.in_journal = False  # this is one journal bucket: it holds journal keys itself
        for bucket in self.journal:
            bucket.in_journal = True
        parts = urlsplit(url)
        self.scheme = parts.scheme.lower()
        self._query: dict[str, str] = {}
        if self.scheme == "file":
            path = unquote(parts.path)
            if parts.netloc and parts.netloc != "localhost":
                path = parts.netloc + path
            self.root = os.path.abspath(path)
        elif self.scheme == "s3":
            self.bucket = parts.netloc
            prefix = unquote(parts.path).strip("/")
            self.prefix = prefix + "/" if prefix else ""
            self._query = dict(parse_qsl(parts.query))
        elif self.scheme != "presigned":
            raise ValueError(f"the Spark source reads file:// and s3:// object stores, not {url!r}")
        self._run: tuple[str, int, int, bytes] | None = None  # the last granted run fetched

    def _s3(self) -> Any:
        """A boto3 S3 client (one per executor process and store), credentials from the
        URL or the standard AWS environment / instance profile."""
        q = self._query
        cache_key = (self.bucket, *(f"{k}={v}" for k, v in sorted(q.items())))
        client = _S3_CLIENTS.get(cache_key)
        if client is None:
            import boto3
            from botocore.config import Config

            kw: dict[str, Any] = {}
            if q.get("endpoint"):
                kw["endpoint_url"] = q["endpoint"]
            if q.get("region"):
                kw["region_name"] = q["region"]
            if q.get("access_key_id"):
                kw["aws_access_key_id"] = q["access_key_id"]
                kw["aws_secret_access_key"] = q.get("secret_access_key", "")
                if q.get("session_token"):
                    kw["aws_session_token"] = q["session_token"]
            cfg = Config(
                read_timeout=self.timeout_s,
                connect_timeout=min(10.0, self.timeout_s),
                retries={"max_attempts": 5, "mode": "standard"},
                s3={"addressing_style": "path"} if q.get("endpoint") else None,
            )
            client = boto3.session.Session().client("s3", config=cfg, **kw)
            _S3_CLIENTS[cache_key] = client
        return client

    def path(self, key: str) -> str:
        return str(key_path(self.root, key))

    def read_range(self, key: str, pos: int, length: int, ref: ObjectRef | None = None) -> bytes:
        if length <= 0:
            return b""
        if ref is not None and ref.ranges:
            return self._read_granted(key, pos, length, ref.ranges)
        if ref is not None and ref.url:
            return _http_range(ref.url, pos, length, self.timeout_s)
        if is_journal_key(key) and not self.in_journal:
            return self._from_journal(key, lambda s: s.read_range(key, pos, length))
        if self.scheme == "file":
            fd = os.open(self.path(key), os.O_RDONLY)
            try:
                chunks = []
                got = 0
                while got < length:
                    chunk = os.pread(fd, length - got, pos + got)
                    if not chunk:
                        raise OSError(f"short read of {key} at {pos + got}")
                    chunks.append(chunk)
                    got += len(chunk)
                return chunks[0] if len(chunks) == 1 else b"".join(chunks)
            finally:
                os.close(fd)
        if self.scheme != "s3":
            raise OSError(f"object {key} has no presigned URL in the plan")
        r = self._s3().get_object(
            Bucket=self.bucket, Key=self.prefix + key, Range=f"bytes={pos}-{pos + length - 1}"
        )
        return bytes(r["Body"].read())

    def _from_journal(self, key: str, read: Callable[[Storage], bytes]) -> bytes:
        """``read`` on the first journal bucket that holds a readable copy of ``key``."""
        if not self.journal:
            raise OSError(
                f"object {key} is in Floe's journal tier: give the source the journal bucket "
                "URLs (option 'journal', as the agents' FLOE_JOURNAL)"
            )
        errors = []
        for bucket in self.journal:
            try:
                return read(bucket)
            except Exception as e:  # a missing copy or a failing bucket: try the next one
                errors.append(f"{bucket.url}: {type(e).__name__}: {e}")
        raise OSError(f"object {key}: no journal bucket could serve it ({'; '.join(errors)})")

    def _read_granted(
        self, key: str, pos: int, length: int, runs: Sequence[tuple[int, int, str]]
    ) -> bytes:
        """``[pos, pos + length)`` from the granted runs that overlap it; bytes no run
        covers (another tenant's, between two of our batches) stay zero."""
        end = pos + length
        buf = bytearray(length)
        for lo, hi, url in runs:
            if hi <= pos or lo >= end:
                continue
            last = self._run
            if last is not None and last[:3] == (key, lo, hi):
                data = last[3]
            else:
                data = _http_range(url, lo, hi - lo, self.timeout_s)
                self._run = (key, lo, hi, data)
            a, b = max(lo, pos), min(hi, end)
            buf[a - pos : b - pos] = data[a - lo : b - lo]
        return bytes(buf)

    def open_parquet(self, key: str, ref: ObjectRef | None = None) -> Any:
        import pyarrow as pa
        import pyarrow.parquet as pq

        if self.scheme == "file" and (ref is None or not ref.presigned) and (
            self.in_journal or not is_journal_key(key)
        ):
            return pq.ParquetFile(self.path(key))
        size = ref.size if ref is not None else -1
        if size < 0:
            if self.scheme != "s3":
                raise OSError(f"object {key}: no size in the plan")
            head = self._s3().head_object(Bucket=self.bucket, Key=self.prefix + key)
            size = int(head["ContentLength"])
        f = RangeFile(lambda pos, n: self.read_range(key, pos, n, ref), size)
        return pq.ParquetFile(pa.PythonFile(f, mode="r"))


def _http_range(url: str, pos: int, length: int, timeout_s: float) -> bytes:
    import urllib.request

    req = urllib.request.Request(url, headers={"Range": f"bytes={pos}-{pos + length - 1}"})
    with urllib.request.urlopen(req, timeout=timeout_s) as r:
        data = bytes(r.read())
    if len(data) != length:
        raise OSError(f"presigned read returned {len(data)} of {length} bytes at {pos}")
    return data


@dataclass(frozen=True)
class RowFilter:
    """Pushed-down timestamp bounds (inclusive, microseconds) applied to rows.

    Partition and offset predicates prune the plan instead; Spark re-checks every
    pushed predicate anyway, so this only saves work.
    """

    ts_min_us: int | None = None
    ts_max_us: int | None = None

    def empty(self) -> bool:
        return self.ts_min_us is None and self.ts_max_us is None


class _Builder:
    """Column lists for one output batch."""

    __slots__ = ("headers", "keys", "nbytes", "offsets", "stamps", "types", "values")

    def __init__(self) -> None:
        self.keys: list[bytes | None] = []
        self.values: list[bytes | None] = []
        self.offsets: list[int] = []
        self.stamps: list[int] = []
        self.types: list[int] = []
        self.headers: list[list[dict[str, Any]]] = []
        self.nbytes = 0


def _to_batch(b: _Builder, task: ReadTask, schema: pa.Schema) -> pa.RecordBatch:
    import pyarrow as pa

    n = len(b.offsets)
    arrays = [
        pa.array(b.keys, pa.binary()),
        pa.array(b.values, pa.binary()),
        pa.DictionaryArray.from_arrays(pa.array([0] * n, pa.int32()), [task.topic]).cast(
            pa.string()
        )
        if n
        else pa.array([], pa.string()),
        pa.array([task.partition] * n, pa.int32()),
        pa.array(b.offsets, pa.int64()),
        pa.array(b.stamps, pa.timestamp("us", tz="UTC")),
        pa.array(b.types, pa.int32()),
    ]
    if len(schema) > len(COLUMNS):
        arrays.append(pa.array(b.headers, schema.field("headers").type))
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def _segment_batches(
    storage: Storage,
    task: ReadTask,
    span: SegmentSpan,
    schema: pa.Schema,
    with_headers: bool,
    refs: Mapping[str, ObjectRef],
) -> Iterator[pa.RecordBatch]:
    ref = refs.get(span.key)
    if ref is not None and ref.ranges:
        runs = [(lo, hi) for lo, hi, _ in ref.ranges]
        for rel, length, base in span.batches:
            at = span.pos + rel
            if not covered(at, at + length, runs):
                raise OSError(
                    f"{span.key}: the plan grants no read of the batch at offset {base} "
                    f"(bytes {at}..{at + length})"
                )
    data = storage.read_range(span.key, span.pos, span.length, ref)
    if len(data) != span.length:
        raise OSError(f"{span.key}: read {len(data)} of {span.length} bytes at {span.pos}")
    lo, hi = task.start, task.end
    b = _Builder()
    for rel, length, base in span.batches:
        buf = bytearray(data[rel : rel + length])
        patch_base_offset(buf, 0, base)
        view = RecordBatchView(buf)
        if view.attributes & ATTR_CONTROL:
            continue
        if task.aborted and view.is_transactional and _aborted(task.aborted, view.producer_id, base):
            continue
        ttype = view.timestamp_type
        for r in view.records():
            off = r.offset
            if off < lo or off >= hi:
                continue
            b.keys.append(r.key)
            b.values.append(r.value)
            b.offsets.append(off)
            b.stamps.append(r.timestamp * 1000)
            b.types.append(ttype)
            if with_headers:
                b.headers.append([{"key": k, "value": v} for k, v in r.headers])
            b.nbytes += (len(r.value) if r.value else 0) + (len(r.key) if r.key else 0)
            if len(b.offsets) >= BATCH_ROWS or b.nbytes >= BATCH_BYTES:
                yield _to_batch(b, task, schema)
                b = _Builder()
    if b.offsets:
        yield _to_batch(b, task, schema)


def _aborted(aborted: tuple[tuple[int, int, int], ...], producer_id: int, offset: int) -> bool:
    """Is the batch of ``producer_id`` at ``offset`` in one of the aborted transactions?"""
    return any(pid == producer_id and first <= offset < marker for pid, first, marker in aborted)


def _parquet_batches(
    storage: Storage,
    task: ReadTask,
    span: ParquetSpan,
    schema: pa.Schema,
    refs: Mapping[str, ObjectRef],
) -> Iterator[pa.RecordBatch]:
    import pyarrow as pa
    import pyarrow.compute as pc

    first = max(span.first, task.start)
    last = min(span.last, task.end - 1)
    if last < first:
        return
    f = storage.open_parquet(span.key, refs.get(span.key))
    md = f.metadata
    names = f.schema_arrow.names
    off_col = names.index("offset")
    part_col = names.index("partition")
    wanted: list[int] = []
    for i in range(md.num_row_groups):
        rg = md.row_group(i)
        st = rg.column(off_col).statistics
        if st is not None and st.has_min_max and (st.max < first or st.min > last):
            continue
        ps = rg.column(part_col).statistics
        if ps is not None and ps.has_min_max and not ps.min <= task.partition <= ps.max:
            continue
        wanted.append(i)
    for i in wanted:
        t = f.read_row_group(i, columns=list(schema.names))
        mask = pc.and_(
            pc.and_(pc.greater_equal(t["offset"], first), pc.less_equal(t["offset"], last)),
            pc.equal(t["partition"], task.partition),
        )
        t = t.filter(mask)
        if t.num_rows == 0:
            continue
        t = t.select(list(schema.names)).cast(schema)
        for batch in t.to_batches(max_chunksize=BATCH_ROWS):
            yield pa.RecordBatch.from_arrays(batch.columns, schema=schema)


def _apply_filter(batch: pa.RecordBatch, flt: RowFilter | None) -> pa.RecordBatch:
    if flt is None or flt.empty():
        return batch
    import pyarrow as pa
    import pyarrow.compute as pc

    ts = batch.column("timestamp").cast(pa.int64())
    mask = None
    if flt.ts_min_us is not None:
        mask = pc.greater_equal(ts, flt.ts_min_us)
    if flt.ts_max_us is not None:
        m2 = pc.less_equal(ts, flt.ts_max_us)
        mask = m2 if mask is None else pc.and_(mask, m2)
    return batch.filter(mask) if mask is not None else batch


def read_task(
    task: ReadTask,
    storage: Storage,
    *,
    include_headers: bool = False,
    row_filter: RowFilter | None = None,
    refs: Mapping[str, ObjectRef] | None = None,
) -> Iterator[pa.RecordBatch]:
    """Arrow batches of the records ``task.start <= offset < task.end``, in offset order."""
    schema = output_schema(include_headers)
    refs = refs or {}
    for span in task.spans:
        if isinstance(span, SegmentSpan):
            it = _segment_batches(storage, task, span, schema, include_headers, refs)
        else:
            it = _parquet_batches(storage, task, span, schema, refs)
        for batch in it:
            batch = _apply_filter(batch, row_filter)
            if batch.num_rows:
                yield batch


def read_tasks(
    tasks: Sequence[ReadTask],
    objects_url: str,
    *,
    include_headers: bool = False,
    row_filter: RowFilter | None = None,
    refs: Mapping[str, ObjectRef] | None = None,
    timeout_ms: int = 120_000,
    journal: Sequence[str] = (),
) -> Iterator[pa.RecordBatch]:
    storage = Storage(objects_url, timeout_ms=timeout_ms, journal=journal)
    for task in tasks:
        yield from read_task(
            task, storage, include_headers=include_headers, row_filter=row_filter, refs=refs
        )
