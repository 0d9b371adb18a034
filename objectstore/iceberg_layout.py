"""The Iceberg layout of a topic: table schema, partition spec, sort order, data files.

Where it sits: the compactor (:mod:`compactor.iceberg`) commits the Parquet
objects it writes (:mod:`objectstore.parquet`) to an Iceberg table per topic;
this module says what that table looks like and turns one of those Parquet
objects into an Iceberg ``DataFile`` from its footer, so the very file the agent
serves Kafka fetches from is the table's data file (zero copy: no second write).

Table layout::

    key binary, value binary, topic string, partition int, offset long,
    timestamp timestamptz, timestampType int,
    headers list<struct<key string, value binary>>
    [value_json struct<...>, value_error string]      (floe.value.format=json)

partitioned by ``identity(partition)`` and ``day(timestamp)``, sorted by
``(partition, offset)``. The compactor's Parquet files carry no Iceberg field
ids: the table's name mapping (``schema.name-mapping.default``) resolves their
columns by name, so schema evolution (a new optional JSON field becomes a new
nested column) needs no rewrite of older files.

Kafka topic names may hold ``.``, which catalogs take for a namespace
separator: the table is named with ``_`` instead (Floe refuses two live topics
differing only by ``.`` vs ``_``, so the mapping is one-to-one).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlsplit, urlunsplit

if TYPE_CHECKING:
    import pyarrow as pa
    from pyiceberg.manifest import DataFile
    from pyiceberg.partitioning import PartitionSpec
    from pyiceberg.schema import Schema
    from pyiceberg.table.metadata import TableMetadata
    from pyiceberg.table.sorting import SortOrder

DEFAULT_NAMESPACE = "floe"
VALUE_JSON = "value_json"
VALUE_ERROR = "value_error"
# Field ids of the Kafka columns; typed value fields get ids above these.
_KAFKA_IDS = {
    "key": 1,
    "value": 2,
    "topic": 3,
    "partition": 4,
    "offset": 5,
    "timestamp": 6,
    "timestampType": 7,
    "headers": 8,
}


def table_name(topic: str) -> str:
    return topic.replace(".", "_")


def kafka_iceberg_schema() -> Schema:
    """The Kafka columns as an Iceberg schema (ids 1-8, nested header fields 9-11)."""
    from pyiceberg.schema import Schema
    from pyiceberg.types import (
        BinaryType,
        IntegerType,
        ListType,
        LongType,
        NestedField,
        StringType,
        StructType,
        TimestamptzType,
    )

    header = StructType(
        NestedField(10, "key", StringType(), required=False),
        NestedField(11, "value", BinaryType(), required=False),
    )
    return Schema(
        NestedField(1, "key", BinaryType(), required=False),
        NestedField(2, "value", BinaryType(), required=False),
        NestedField(3, "topic", StringType(), required=False),
        NestedField(4, "partition", IntegerType(), required=False),
        NestedField(5, "offset", LongType(), required=False),
        NestedField(6, "timestamp", TimestamptzType(), required=False),
        NestedField(7, "timestampType", IntegerType(), required=False),
        NestedField(8, "headers", ListType(9, header, element_required=False), required=False),
    )


def partition_spec() -> PartitionSpec:
    """``identity(partition)``, ``day(timestamp)``."""
    from pyiceberg.partitioning import PartitionField, PartitionSpec
    from pyiceberg.transforms import DayTransform, IdentityTransform

    return PartitionSpec(
        PartitionField(source_id=4, field_id=1000, transform=IdentityTransform(), name="partition"),
        PartitionField(source_id=6, field_id=1001, transform=DayTransform(), name="timestamp_day"),
    )


def sort_order() -> SortOrder:
    """``(partition, offset)``: the order the compactor writes rows in."""
    from pyiceberg.table.sorting import SortField, SortOrder
    from pyiceberg.transforms import IdentityTransform

    return SortOrder(
        SortField(source_id=4, transform=IdentityTransform()),
        SortField(source_id=5, transform=IdentityTransform()),
    )


def _parts(objects_url: str) -> tuple[str, str, str]:
    parts = urlsplit(objects_url)
    scheme = parts.scheme.lower()
    if scheme not in ("file", "s3"):
        raise ValueError(f"Iceberg tables need a file:// or s3:// object store, not {scheme}://")
    path = unquote(parts.path).rstrip("/")
    if scheme == "file" and parts.netloc and parts.netloc != "localhost":
        path = str(Path(parts.netloc + path).absolute())  # file://relative/dir, as tolerated
    return scheme, parts.netloc, path


def object_location(objects_url: str, key: str) -> str:
    """Where engines read object ``key`` of the store at ``objects_url``: the local
    store's file path (its keys are escaped into file names), ``s3://bucket/prefix/key``
    (no query, so no credentials)."""
    scheme, netloc, path = _parts(objects_url)
    if scheme == "file":
        from objectstore.local import key_path

        return str(key_path(path, key))
    return urlunsplit((scheme, netloc, f"{path}/{key}", "", ""))


def warehouse_location(objects_url: str, prefix: str) -> str:
    """The Iceberg warehouse (metadata files, written by pyiceberg) under the store."""
    scheme, netloc, path = _parts(objects_url)
    if scheme == "file":
        return f"file://{path}/{prefix}"
    return urlunsplit((scheme, netloc, f"{path}/{prefix}", "", ""))


def data_file(metadata: TableMetadata, location: str, size: int, footer: Any) -> DataFile:
    """The ``DataFile`` of a compactor Parquet object from its footer
    (``pyarrow.parquet.FileMetaData``): column stats, bounds, and the partition
    values (every row of the file has one Kafka partition and one day)."""
    from pyiceberg.io.pyarrow import (
        compute_statistics_plan,
        data_file_statistics_from_parquet_metadata,
        parquet_path_to_id_mapping,
    )
    from pyiceberg.manifest import DataFile, DataFileContent, FileFormat

    schema = metadata.schema()
    stats = data_file_statistics_from_parquet_metadata(
        parquet_metadata=footer,
        stats_columns=compute_statistics_plan(schema, metadata.properties),
        parquet_column_mapping=parquet_path_to_id_mapping(schema),
    )
    return DataFile.from_args(
        content=DataFileContent.DATA,
        file_path=location,
        file_format=FileFormat.PARQUET,
        partition=stats.partition(metadata.spec(), schema),
        file_size_in_bytes=size,
        sort_order_id=None,
        spec_id=metadata.default_spec_id,
        equality_ids=None,
        key_metadata=None,
        **stats.to_serialized_dict(),
    )


def arrow_to_iceberg_type(t: pa.DataType, next_id: Any) -> Any:
    """An Iceberg type for an Arrow type of a typed value column; ``next_id()``
    hands out field ids (the table's ``update_schema`` reassigns them anyway)."""
    import pyarrow as pa
    from pyiceberg.types import (
        BooleanType,
        DoubleType,
        ListType,
        LongType,
        NestedField,
        StringType,
        StructType,
    )

    if pa.types.is_boolean(t):
        return BooleanType()
    if pa.types.is_integer(t):
        return LongType()
    if pa.types.is_floating(t):
        return DoubleType()
    if pa.types.is_struct(t):
        return StructType(
            *(
                NestedField(
                    next_id(), f.name, arrow_to_iceberg_type(f.type, next_id), required=False
                )
                for f in t
            )
        )
    if pa.types.is_list(t):
        return ListType(
            next_id(), arrow_to_iceberg_type(t.value_type, next_id), element_required=False
        )
    return StringType()
