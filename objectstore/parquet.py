"""The Parquet layout of a topic: Spark's Kafka-source schema, records <-> Arrow.

Where it sits: the compactor turns a partition's record batches into one
Parquet object (:func:`batches_to_table` + :func:`write_table`); the agent's
fetch path turns rows back into Kafka record batches when data only exists as
Parquet (:mod:`objectstore.parquet_batches`, vectorised); the Spark source
reads the same files with the same schema. Shared here so neither imports the
other.

Columns are those of Spark's Kafka source (``includeHeaders=true``)::

    key binary, value binary, topic string, partition int32, offset int64,
    timestamp timestamp[us, UTC], timestampType int32,
    headers list<struct<key string, value binary>>

Rows are sorted by ``(partition, offset)`` and cut into row groups of
``row_group_rows`` rows, so the ``offset`` column's statistics let a reader
skip row groups outside the offset range it wants. Files carry their range in
key-value metadata (``floe.*``). Object keys end in :data:`PARQUET_SUFFIX`;
that suffix is how the fetch path recognises a Parquet-backed batch row.

pyarrow is imported lazily, so importing this module (for
:func:`is_parquet_key`) costs nothing on an agent that never meets Parquet.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import google_crc32c

from kafka_protocol.records import (
    ATTR_CONTROL,
    CRC_OFFSET,
    CRC_START,
    LAST_OFFSET_DELTA_OFFSET,
    Record,
    RecordBatchView,
    patch_base_offset,
)

if TYPE_CHECKING:
    import pyarrow as pa

PARQUET_SUFFIX = ".parquet"
DEFAULT_ROW_GROUP_ROWS = 16_384

COLUMNS = ("key", "value", "topic", "partition", "offset", "timestamp", "timestampType", "headers")


def set_last_offset_delta(batch: bytes, delta: int) -> bytes:
    """``batch`` with ``lastOffsetDelta`` set to ``delta`` and its CRC32C recomputed.

    Kafka's log cleaner keeps a batch's original last offset when it drops its
    tail records, so that the batch still ends where the producer's did.
    """
    buf = bytearray(batch)
    struct.pack_into(">i", buf, LAST_OFFSET_DELTA_OFFSET, delta)
    struct.pack_into(">I", buf, CRC_OFFSET, google_crc32c.value(bytes(buf[CRC_START:])))
    return bytes(buf)


def is_parquet_key(key: str) -> bool:
    return key.endswith(PARQUET_SUFFIX)


def kafka_schema() -> pa.Schema:
    """Spark's Kafka source schema, exactly (``string``, not ``large_string``)."""
    import pyarrow as pa

    return pa.schema(
        [
            pa.field("key", pa.binary()),
            pa.field("value", pa.binary()),
            pa.field("topic", pa.string()),
            pa.field("partition", pa.int32()),
            pa.field("offset", pa.int64()),
            pa.field("timestamp", pa.timestamp("us", tz="UTC")),
            pa.field("timestampType", pa.int32()),
            pa.field(
                "headers",
                pa.list_(pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())])),
            ),
        ]
    )


@dataclass(frozen=True, slots=True)
class DecodedBatch:
    """The data records of one stored batch, with absolute offsets."""

    base_offset: int
    last_offset: int
    timestamp_type: int
    records: list[Record]
    # The producer's header fields, kept in the file's footer (:data:`BATCHES_KEY`)
    # so rebuilt batches carry them and the original codec.
    header: BatchInfo | None = None


@dataclass(frozen=True, slots=True)
class BatchInfo:
    """What a rebuilt batch needs beyond the rows: the original header fields."""

    base_offset: int
    attributes: int  # codec | timestampType | transactional (control batches have no rows)
    producer_id: int = -1
    producer_epoch: int = -1
    base_sequence: int = -1
    partition_leader_epoch: int = 0
    base_timestamp: int = -1
    max_timestamp: int = -1


BATCHES_KEY = "floe.batches"
_INFO_DTYPE = [
    ("base_offset", "<i8"),
    ("attributes", "<i2"),
    ("producer_id", "<i8"),
    ("producer_epoch", "<i2"),
    ("base_sequence", "<i4"),
    ("partition_leader_epoch", "<i4"),
    ("base_timestamp", "<i8"),
    ("max_timestamp", "<i8"),
]


def encode_batch_infos(infos: Sequence[BatchInfo]) -> str:
    """The footer value of ``infos``: a little-endian record array, zstd, base64."""
    import base64

    import cramjam
    import numpy as np

    arr = np.array(
        [
            (
                i.base_offset,
                i.attributes,
                i.producer_id,
                i.producer_epoch,
                i.base_sequence,
                i.partition_leader_epoch,
                i.base_timestamp,
                i.max_timestamp,
            )
            for i in infos
        ],
        dtype=_INFO_DTYPE,
    )
    return "1:" + base64.b64encode(bytes(cramjam.zstd.compress(arr.tobytes()))).decode()


def decode_batch_infos(text: str | bytes | None) -> dict[int, BatchInfo]:
    """``base_offset -> BatchInfo`` from a footer value (empty when absent or unknown)."""
    import base64

    import cramjam
    import numpy as np

    if not text:
        return {}
    if isinstance(text, bytes):
        text = text.decode()
    version, _, body = text.partition(":")
    if version != "1":
        return {}
    try:
        raw = bytes(cramjam.zstd.decompress(base64.b64decode(body, validate=True)))
        arr = np.frombuffer(raw, dtype=_INFO_DTYPE)
    except Exception:  # a damaged footer: batches are rebuilt without the producer fields
        return {}
    return {int(r[0]): BatchInfo(*(int(x) for x in r)) for r in arr.tolist()}


def decode_batch(data: bytes | memoryview, base_offset: int) -> DecodedBatch:
    """Decode a stored batch (whose header may hold a placeholder base offset)."""
    buf = bytearray(data)
    patch_base_offset(buf, 0, base_offset)
    view = RecordBatchView(buf)
    if view.attributes & ATTR_CONTROL:
        records: list[Record] = []
    else:
        records = list(view.records())
    info = BatchInfo(
        base_offset,
        view.attributes & 0x17,  # codec (0-2), timestamp type (3), transactional (4)
        view.producer_id,
        view.producer_epoch,
        view.base_sequence,
        view.partition_leader_epoch,
        view.base_timestamp,
        view.max_timestamp,
    )
    return DecodedBatch(base_offset, view.last_offset, view.timestamp_type, records, info)


def batches_to_table(topic: str, partition: int, batches: Iterable[DecodedBatch]) -> pa.Table:
    """Rows of the Kafka schema for ``batches`` (in offset order)."""
    import pyarrow as pa

    keys: list[bytes | None] = []
    values: list[bytes | None] = []
    offsets: list[int] = []
    stamps: list[int] = []
    types: list[int] = []
    headers: list[list[dict[str, Any]]] = []
    for b in batches:
        for r in b.records:
            keys.append(r.key)
            values.append(r.value)
            offsets.append(r.offset)
            stamps.append(r.timestamp * 1000)
            types.append(b.timestamp_type)
            headers.append([{"key": k, "value": v} for k, v in r.headers])
    n = len(offsets)
    schema = kafka_schema()
    return pa.Table.from_arrays(
        [
            pa.array(keys, pa.binary()),
            pa.array(values, pa.binary()),
            pa.array([topic] * n, pa.string()),
            pa.array([partition] * n, pa.int32()),
            pa.array(offsets, pa.int64()),
            pa.array(stamps, pa.int64()).cast(pa.timestamp("us", tz="UTC")),
            pa.array(types, pa.int32()),
            pa.array(headers, schema.field("headers").type),
        ],
        schema=schema,
    )


def write_table(
    table: pa.Table,
    *,
    row_group_rows: int = DEFAULT_ROW_GROUP_ROWS,
    metadata: dict[str, str] | None = None,
    compression: str = "zstd",
) -> bytes:
    """Serialise ``table`` (sorted by partition, offset) as one Parquet file."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    if metadata:
        merged = dict(table.schema.metadata or {})
        merged.update({k.encode(): v.encode() for k, v in metadata.items()})
        table = table.replace_schema_metadata(merged)
    sink = pa.BufferOutputStream()
    pq.write_table(
        table,
        sink,
        row_group_size=max(1, row_group_rows),
        compression=compression,
        # Dictionaries only where values repeat: key/value pages stay PLAIN, which
        # the agent's fetch path and Spark decode much faster.
        use_dictionary=["topic"],
        write_statistics=True,
    )
    return bytes(sink.getvalue().to_pybytes())


def read_offset_range(data: bytes, first: int, last: int) -> pa.Table:
    """Rows with ``first <= offset <= last``, reading only row groups that may hold them."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    f = pq.ParquetFile(pa.BufferReader(data))
    md = f.metadata
    col = f.schema_arrow.get_field_index("offset")
    wanted: list[int] = []
    for i in range(md.num_row_groups):
        stats = md.row_group(i).column(col).statistics
        if stats is not None and stats.has_min_max and (stats.max < first or stats.min > last):
            continue
        wanted.append(i)
    if not wanted:
        return kafka_schema().empty_table()
    table = f.read_row_groups(wanted)
    mask = pc.and_(pc.greater_equal(table["offset"], first), pc.less_equal(table["offset"], last))
    return table.filter(mask)


def rebuild_batches(
    table: pa.Table,
    spans: Sequence[tuple[int, int]],
    infos: dict[int, BatchInfo] | None = None,
) -> list[bytes | None]:
    """One Kafka record batch per ``(base_offset, last_offset)`` span from rows.

    Offsets, timestamps, keys, values and headers are the original ones; with
    ``infos`` (the file footer's :data:`BATCHES_KEY`) so are the codec and the
    producer fields, else the batch is uncompressed and carries no producer id. ``lastOffsetDelta`` is the
    span's, so a batch whose tail was compacted away still ends where it did. A
    span without rows gives None. Vectorised: :mod:`objectstore.parquet_batches`.
    """
    from objectstore.parquet_batches import BatchHeader, batches_for_spans, encode_rows

    if table.num_rows == 0:
        return [None for _ in spans]
    headers = {b: BatchHeader.from_info(i) for b, i in (infos or {}).items()}
    return batches_for_spans(encode_rows(table), list(spans), headers=headers)


def table_stats(table: pa.Table) -> tuple[int, int, int, int]:
    """``(min offset, max offset, min timestamp ms, max timestamp ms)`` of a non-empty table."""
    import pyarrow.compute as pc

    o = pc.min_max(table["offset"])
    t = pc.min_max(table["timestamp"].cast("int64"))
    return (
        int(o["min"].as_py()),
        int(o["max"].as_py()),
        int(t["min"].as_py()) // 1000,
        int(t["max"].as_py()) // 1000,
    )
