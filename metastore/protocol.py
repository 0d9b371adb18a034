"""The ``Metastore`` protocol: what the agent, compactor and Spark source may call.

Implementations: ``SqlMetastore`` (SQLAlchemy; SQLite) and ``PostgresMetastore``
(SQLAlchemy for cold operations, raw asyncpg for commit and batch lookup). Pick
one with ``open_metastore(url)``.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from typing import Protocol, runtime_checkable

from metastore.types import (
    AgentInfo,
    BatchToCommit,
    CommitResult,
    DeleteRecordsResult,
    DescribeConfigResult,
    FindResult,
    ListOffsetsResult,
    ObjectInfo,
    ProducerIdResult,
    TopicInfo,
    TopicResult,
)


@runtime_checkable
class Metastore(Protocol):
    # topics
    async def create_topic(
        self,
        name: str,
        partitions: int,
        config: Mapping[str, str] | None = None,
        *,
        replication_factor: int = -1,
        validate_only: bool = False,
    ) -> TopicResult: ...
    async def delete_topic(self, name_or_id: str | uuid.UUID) -> TopicResult: ...
    async def get_topic(self, name_or_id: str | uuid.UUID) -> TopicInfo | None: ...
    async def list_topics(self) -> list[TopicInfo]: ...
    async def add_partitions(
        self, name: str, new_total: int, *, validate_only: bool = False
    ) -> TopicResult: ...
    async def alter_topic_config(
        self,
        name: str,
        updates: Mapping[str, str | None],
        *,
        incremental: bool = True,
        validate_only: bool = False,
    ) -> TopicResult: ...
    async def describe_topic_config(self, name_or_id: str | uuid.UUID) -> DescribeConfigResult: ...

    # the log
    async def commit_object(
        self, key: str, size: int, agent_id: str, batches: Sequence[BatchToCommit]
    ) -> list[CommitResult]: ...
    async def find_batches(
        self,
        topic_id: uuid.UUID,
        partition: int,
        offset: int,
        max_bytes: int,
        max_batches: int = 1000,
    ) -> FindResult: ...
    async def list_offsets(
        self, topic_id: uuid.UUID, partition: int, timestamp: int
    ) -> ListOffsetsResult: ...
    async def delete_records(
        self, topic_id: uuid.UUID, partition: int, before_offset: int
    ) -> DeleteRecordsResult: ...

    # producers
    async def init_producer_id(
        self, transactional_id: str | None = None, transaction_timeout_ms: int = 60_000
    ) -> ProducerIdResult: ...

    # objects (GC)
    async def object_key_registered(self, key: str) -> bool: ...
    async def get_object(self, key: str) -> ObjectInfo | None: ...
    async def mark_objects_deleting(
        self, *, keys: Sequence[str] | None = None, created_before_ms: int | None = None
    ) -> list[str]: ...
    async def objects_to_delete(
        self, older_than_ms: int, limit: int = 1000
    ) -> list[ObjectInfo]: ...
    async def delete_object_rows(self, keys: Sequence[str]) -> int: ...

    # agents
    async def register_agent(
        self, agent_id: str, host: str, port: int, zone: str | None = None
    ) -> None: ...
    async def heartbeat(self, agent_id: str) -> bool: ...
    async def deregister_agent(self, agent_id: str) -> None: ...
    async def live_agents(self, since_ms: int) -> list[AgentInfo]: ...

    async def close(self) -> None: ...
