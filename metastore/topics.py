"""Topic administration: create, delete, list, add partitions, configs (cold path).

Validation happens before any database work and comes back as a ``TopicResult``
with Kafka's error code and message, as CreateTopics / DeleteTopics /
CreatePartitions / (Incremental)AlterConfigs answer them. A deleted topic keeps
its row (``deleted_at`` set, so its id is never reused) but loses its partitions,
batches, producer state and committed offsets; its objects become unreferenced
and the GC collects them. The name is free again at once.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Any

from sqlalchemy import delete, func, insert, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection

from metastore import schema as s
from metastore.base import SqlBase
from metastore.sqlite_log import sqlite_topic_offsets
from metastore.topic_config import (
    MAX_PARTITIONS,
    TOPIC_CONFIG_KEYS,
    effective_config,
    validate_config,
    validate_topic_name,
)
from metastore.types import (
    ConfigEntry,
    DescribeConfigResult,
    ErrorCode,
    MetastoreError,
    PartitionOffsets,
    TopicInfo,
    TopicOffsets,
    TopicResult,
)

_TOPIC_COLUMNS = (
    s.topics.c.id,
    s.topics.c.name,
    s.topics.c.partitions,
    s.topics.c.config,
    s.topics.c.created_at,
)


def _topic_info(row: Any) -> TopicInfo:
    return TopicInfo(
        id=row.id,
        name=row.name,
        partitions=row.partitions,
        config=dict(row.config or {}),
        created_at_ms=row.created_at,
    )


def _where(name_or_id: str | uuid.UUID) -> Any:
    live = s.topics.c.deleted_at.is_(None)
    if isinstance(name_or_id, uuid.UUID):
        return (s.topics.c.id == name_or_id) & live
    return (s.topics.c.name == name_or_id) & live


class TopicsMixin(SqlBase):
    async def _get_topic(
        self, conn: AsyncConnection, name_or_id: str | uuid.UUID, lock: bool = False
    ) -> TopicInfo | None:
        query = select(*_TOPIC_COLUMNS).where(_where(name_or_id))
        if lock:
            query = query.with_for_update()
        row = (await conn.execute(query)).first()
        return _topic_info(row) if row is not None else None

    async def _colliding_topic(self, conn: AsyncConnection, name: str) -> str | None:
        """A live topic whose name differs from ``name`` only by '.' versus '_' (Kafka
        refuses such a pair: their metric names collide), or None."""
        if "." not in name and "_" not in name:
            return None
        t = s.topics.c
        row = (
            await conn.execute(
                select(t.name).where(
                    (func.replace(t.name, ".", "_") == name.replace(".", "_"))
                    & (t.name != name)
                    & t.deleted_at.is_(None)
                )
            )
        ).first()
        return str(row[0]) if row is not None else None

    async def get_topic(self, name_or_id: str | uuid.UUID) -> TopicInfo | None:
        async with self._read() as conn:
            return await self._get_topic(conn, name_or_id)

    async def list_topics(self) -> list[TopicInfo]:
        async with self._read() as conn:
            rows = await conn.execute(
                select(*_TOPIC_COLUMNS)
                .where(s.topics.c.deleted_at.is_(None))
                .order_by(s.topics.c.name)
            )
            return [_topic_info(row) for row in rows]

    async def partition_offsets(self, topic_id: uuid.UUID) -> list[PartitionOffsets]:
        """Log start offset and high watermark of every partition of a topic, in
        partition order, in one query (ListOffsets earliest/latest at width);
        empty for an unknown or deleted topic. This is SQLite's (raw statements,
        :func:`metastore.sqlite_log.sqlite_topic_offsets`); Postgres has its own
        (``metastore.pg_reads``)."""
        return (await sqlite_topic_offsets(self._read_raw, topic_id, False))[0]

    async def topic_offsets(self, topic_id: uuid.UUID) -> TopicOffsets:
        """:meth:`partition_offsets` and whether the topic holds no transaction
        state (an open transaction's partition or an aborted range). The state is
        read after the watermarks: a transaction ending in between is seen ended
        (aborted: its range is there), one starting in between is seen started.
        SQLite's, as :meth:`partition_offsets`."""
        return TopicOffsets(*await sqlite_topic_offsets(self._read_raw, topic_id, True))

    async def create_topic(
        self,
        name: str,
        partitions: int,
        config: Mapping[str, str] | None = None,
        *,
        replication_factor: int = -1,
        validate_only: bool = False,
    ) -> TopicResult:
        """``partitions`` -1 means the default (1); ``replication_factor`` is accepted
        (-1 or >= 1) and ignored: durability comes from object storage."""
        config = dict(config or {})
        message = validate_topic_name(name)
        if message is not None:
            return TopicResult(ErrorCode.INVALID_TOPIC_EXCEPTION, message)
        if partitions == -1:
            partitions = 1
        if not 1 <= partitions <= MAX_PARTITIONS:
            return TopicResult(
                ErrorCode.INVALID_PARTITIONS,
                f"Number of partitions must be in [1, {MAX_PARTITIONS}]",
            )
        if replication_factor != -1 and replication_factor < 1:
            return TopicResult(
                ErrorCode.INVALID_REPLICATION_FACTOR, "Replication factor must be larger than 0"
            )
        message = validate_config(config)
        if message is not None:
            return TopicResult(ErrorCode.INVALID_CONFIG, message)
        exists = TopicResult(ErrorCode.TOPIC_ALREADY_EXISTS, f"Topic '{name}' already exists.")
        now = self.now_ms()
        topic = TopicInfo(uuid.uuid4(), name, partitions, config, now)
        try:
            async with self._write() as conn:
                if await self._get_topic(conn, name) is not None:
                    return exists
                clash = await self._colliding_topic(conn, name)
                if clash is not None:
                    return TopicResult(
                        ErrorCode.INVALID_TOPIC_EXCEPTION,
                        f"Topic '{name}' collides with existing topic: {clash}",
                    )
                if validate_only:
                    return TopicResult(ErrorCode.NONE, topic=topic)
                await conn.execute(
                    insert(s.topics).values(
                        id=topic.id, name=name, partitions=partitions, config=config, created_at=now
                    )
                )
                await self._insert_partitions(conn, topic.id, 0, partitions, now)
        except MetastoreError as e:
            if isinstance(e.__cause__, IntegrityError):  # lost a race on the name
                return exists
            raise
        return TopicResult(ErrorCode.NONE, topic=topic)

    async def _insert_partitions(
        self, conn: AsyncConnection, topic_id: uuid.UUID, start: int, end: int, now: int
    ) -> None:
        rows = [
            {
                "topic_id": topic_id,
                "partition": p,
                "log_start_offset": 0,
                "high_watermark": 0,
                "bytes": 0,
                "created_at": now,
            }
            for p in range(start, end)
        ]
        await conn.execute(insert(s.partitions), rows)

    async def delete_topic(self, name_or_id: str | uuid.UUID) -> TopicResult:
        now = self.now_ms()
        async with self._write() as conn:
            topic = await self._get_topic(conn, name_or_id, lock=True)
            if topic is None:
                return TopicResult(
                    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "This server does not host this topic."
                )
            # Take the partition locks in the committers' order before deleting rows.
            await conn.execute(
                select(s.partitions.c.partition)
                .where(s.partitions.c.topic_id == topic.id)
                .order_by(s.partitions.c.topic_id, s.partitions.c.partition)
                .with_for_update()
            )
            for table in (s.batches, s.producer_batches, s.group_offsets, s.partitions):
                await conn.execute(delete(table).where(table.c.topic_id == topic.id))
            await conn.execute(
                update(s.topics).where(s.topics.c.id == topic.id).values(deleted_at=now)
            )
        return TopicResult(ErrorCode.NONE, topic=topic)

    async def add_partitions(
        self, name: str, new_total: int, *, validate_only: bool = False
    ) -> TopicResult:
        now = self.now_ms()
        async with self._write() as conn:
            topic = await self._get_topic(conn, name, lock=True)
            if topic is None:
                return TopicResult(
                    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "This server does not host this topic."
                )
            if new_total <= topic.partitions:
                return TopicResult(
                    ErrorCode.INVALID_PARTITIONS,
                    f"Topic currently has {topic.partitions} partitions, {new_total} would not be an increase.",
                    topic,
                )
            if new_total > MAX_PARTITIONS:
                return TopicResult(
                    ErrorCode.INVALID_PARTITIONS, f"At most {MAX_PARTITIONS} partitions", topic
                )
            grown = TopicInfo(topic.id, topic.name, new_total, topic.config, topic.created_at_ms)
            if validate_only:
                return TopicResult(ErrorCode.NONE, topic=grown)
            await self._insert_partitions(conn, topic.id, topic.partitions, new_total, now)
            await conn.execute(
                update(s.topics).where(s.topics.c.id == topic.id).values(partitions=new_total)
            )
        return TopicResult(ErrorCode.NONE, topic=grown)

    async def alter_topic_config(
        self,
        name: str,
        updates: Mapping[str, str | None],
        *,
        incremental: bool = True,
        validate_only: bool = False,
    ) -> TopicResult:
        """Incremental (IncrementalAlterConfigs): set keys, ``None`` reverts a key to
        its default. Not incremental (AlterConfigs): the overrides become exactly
        ``updates`` without the ``None`` entries."""
        unknown = [key for key in updates if key not in TOPIC_CONFIG_KEYS]
        if unknown:
            return TopicResult(ErrorCode.INVALID_CONFIG, f"Unknown topic config name: {unknown[0]}")
        message = validate_config({k: v for k, v in updates.items() if v is not None})
        if message is not None:
            return TopicResult(ErrorCode.INVALID_CONFIG, message)
        async with self._write() as conn:
            topic = await self._get_topic(conn, name, lock=True)
            if topic is None:
                return TopicResult(
                    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "This server does not host this topic."
                )
            config = dict(topic.config) if incremental else {}
            for key, value in updates.items():
                if value is None:
                    config.pop(key, None)
                else:
                    config[key] = value
            altered = TopicInfo(topic.id, topic.name, topic.partitions, config, topic.created_at_ms)
            if not validate_only:
                await conn.execute(
                    update(s.topics).where(s.topics.c.id == topic.id).values(config=config)
                )
        return TopicResult(ErrorCode.NONE, topic=altered)

    async def describe_topic_config(self, name_or_id: str | uuid.UUID) -> DescribeConfigResult:
        topic = await self.get_topic(name_or_id)
        if topic is None:
            return DescribeConfigResult(
                ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                message="This server does not host this topic.",
            )
        entries = [
            ConfigEntry(key, value, is_default)
            for key, (value, is_default) in sorted(effective_config(topic.config).items())
        ]
        return DescribeConfigResult(ErrorCode.NONE, entries)
