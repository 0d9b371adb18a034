"""Compaction tasks and their results: plain, picklable values.

The planner (driver side) turns metastore rows into tasks; an executor (the
in-process runner or a PySpark job) turns each task into new objects plus the
batch rows that should replace the planned ones; the driver commits each result
with ``Metastore.swap_batches``. Tasks carry everything an executor needs (rows
with object keys and byte ranges), so executors never talk to the metastore.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

from metastore.types import NewObject, ParquetFileInfo, StoredBatch


@dataclass(frozen=True, slots=True)
class CompactSpec:
    """Key compaction of one partition (cleanup.policy=compact) inside a task."""

    topic_id: uuid.UUID
    partition: int
    # Tombstones whose batch was appended before this may be dropped...
    tombstone_cutoff_ms: int
    # ...but only when the task holds the partition's oldest batch, so no older
    # value of the key can survive elsewhere.
    prefix_complete: bool
    # Transactions: batches at or past the last stable offset (an open transaction)
    # are left as they are and shadow nothing (-1: no limit); batches of aborted
    # transactions, ``(producer id, first offset, last offset)``, are dropped and
    # shadow nothing either, so an aborted value never hides a committed one.
    stable_offset: int = -1
    aborted: tuple[tuple[int, int, int], ...] = ()


@dataclass(frozen=True, slots=True)
class MergeTask:
    """Rewrite the batches of some objects into partition-ordered objects of ``out_level``."""

    task_id: str
    level: int
    out_level: int
    rows: list[StoredBatch]
    target_bytes: int
    key_prefix: str
    compact: list[CompactSpec] = field(default_factory=list)
    read_concurrency: int = 8

    @property
    def kind(self) -> str:
        return f"merge L{self.level}->L{self.out_level}"


@dataclass(frozen=True, slots=True)
class ParquetTask:
    """Rewrite one partition's segment batches into one Parquet object."""

    task_id: str
    topic_id: uuid.UUID
    topic: str
    partition: int
    rows: list[StoredBatch]
    row_group_rows: int
    key_prefix: str
    compact: CompactSpec | None = None
    read_concurrency: int = 8
    # Iceberg topics: one file per UTC day of the records' timestamps (the table is
    # partitioned by day(timestamp)); typed value columns for ``value_format=json``.
    split_days: bool = False
    value_format: str = ""
    value_schema: str | None = None

    @property
    def kind(self) -> str:
        return "parquet"


@dataclass(frozen=True, slots=True)
class ParquetMergeTask:
    """Merge groups of one partition's small, offset-adjacent Parquet objects: each
    group (object keys in offset order) becomes one Parquet object; ``rows`` are the
    batch rows stored in all of them."""

    task_id: str
    topic_id: uuid.UUID
    topic: str
    partition: int
    rows: list[StoredBatch]
    groups: list[list[str]]
    row_group_rows: int
    key_prefix: str
    read_concurrency: int = 8

    @property
    def kind(self) -> str:
        return "parquet merge"


Task = MergeTask | ParquetTask | ParquetMergeTask


@dataclass(frozen=True, slots=True)
class PoisonedBatch:
    """A batch the task could not decode; it was carried over byte-for-byte."""

    topic_id: uuid.UUID
    partition: int
    base_offset: int
    last_offset: int
    reason: str


@dataclass(frozen=True, slots=True)
class TaskResult:
    """What an executor produced; ``replacements`` keep every planned row's offsets."""

    task_id: str
    new_objects: list[NewObject]
    replacements: list[StoredBatch]
    parquet_files: list[ParquetFileInfo] = field(default_factory=list)
    bytes_read: int = 0
    bytes_written: int = 0
    records_dropped: int = 0
    poisoned: list[PoisonedBatch] = field(default_factory=list)


def new_task_id() -> str:
    return uuid.uuid4().hex[:16]
