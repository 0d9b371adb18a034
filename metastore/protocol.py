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
    AclBinding,
    AclBindingFilter,
    AgentInfo,
    BatchToCommit,
    CommitResult,
    CompactionObject,
    ConsumerGroupRecord,
    DeleteRecordsResult,
    DescribeConfigResult,
    ErrorCode,
    FindResult,
    GroupListing,
    GroupOffset,
    GroupRecord,
    ListOffsetsResult,
    NewObject,
    ObjectCommitResult,
    ObjectInfo,
    ObjectToCommit,
    ParquetFileInfo,
    PartitionOffsets,
    PartitionSummary,
    ProducerIdResult,
    ProducerState,
    ReadLeaseGrant,
    ReadLeaseInfo,
    RetentionResult,
    ScramCredential,
    ShareGroupRecord,
    SharePartitionState,
    StableOffsets,
    StoredBatch,
    SwapResult,
    TopicInfo,
    TopicOffsets,
    TopicResult,
    TxnRecord,
    TxnResult,
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
    async def partition_offsets(self, topic_id: uuid.UUID) -> list[PartitionOffsets]: ...
    async def topic_offsets(self, topic_id: uuid.UUID) -> TopicOffsets: ...
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
    async def commit_objects(
        self, objects: Sequence[ObjectToCommit]
    ) -> list[ObjectCommitResult]: ...
    async def find_batches(
        self,
        topic_id: uuid.UUID,
        partition: int,
        offset: int,
        max_bytes: int,
        max_batches: int = 1000,
    ) -> FindResult: ...
    async def find_batches_many(
        self, wants: Sequence[tuple[uuid.UUID, int, int, int]], max_batches: int = 1000
    ) -> list[FindResult]: ...
    async def list_offsets(
        self, topic_id: uuid.UUID, partition: int, timestamp: int, *, from_offset: int = 0
    ) -> ListOffsetsResult: ...
    async def delete_records(
        self, topic_id: uuid.UUID, partition: int, before_offset: int
    ) -> DeleteRecordsResult: ...

    # producers
    async def init_producer_id(
        self, transactional_id: str | None = None, transaction_timeout_ms: int = 60_000
    ) -> ProducerIdResult: ...

    # transactions (metastore/txn.py): the coordinator's state machine, the last
    # stable offsets and aborted ranges for read_committed, produce verification
    async def txn_get(self, transactional_id: str) -> TxnRecord | None: ...
    async def txn_list(
        self, states: Sequence[str] = (), producer_ids: Sequence[int] = ()
    ) -> list[TxnRecord]: ...
    async def txn_init(
        self,
        transactional_id: str,
        timeout_ms: int,
        producer_id: int = -1,
        producer_epoch: int = -1,
    ) -> TxnResult: ...
    async def txn_add_partitions(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partitions: Sequence[tuple[uuid.UUID, int]],
    ) -> TxnResult: ...
    async def txn_add_group(
        self, transactional_id: str, producer_id: int, producer_epoch: int, group_id: str
    ) -> TxnResult: ...
    async def txn_commit_offsets(
        self,
        transactional_id: str,
        group_id: str,
        producer_id: int,
        producer_epoch: int,
        offsets: Sequence[GroupOffset],
    ) -> TxnResult: ...
    async def txn_pending_offsets(self, group_id: str) -> list[tuple[uuid.UUID, int]]: ...
    async def txn_prepare_end(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        commit: bool,
        *,
        bump_epoch: bool = False,
    ) -> TxnResult: ...
    async def txn_complete(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        markers: Sequence[tuple[uuid.UUID, int, int]],
    ) -> TxnResult: ...
    async def stable_offsets(
        self, partitions: Sequence[tuple[uuid.UUID, int, int]]
    ) -> list[StableOffsets]: ...
    async def txn_verify(
        self, producer_id: int, producer_epoch: int, partitions: Sequence[tuple[uuid.UUID, int]]
    ) -> list[ErrorCode]: ...
    async def describe_producers(
        self, topic_id: uuid.UUID, partition: int
    ) -> list[ProducerState]: ...

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
        self,
        agent_id: str,
        host: str,
        port: int,
        zone: str | None = None,
        *,
        peer_host: str | None = None,
        peer_port: int | None = None,
        instance: str | None = None,
        live_since_ms: int | None = None,
        endpoints: str | None = None,
    ) -> AgentInfo | None: ...
    async def heartbeat(
        self, agent_id: str, instance: str | None = None, observations: str | None = None
    ) -> bool: ...
    async def deregister_agent(self, agent_id: str, instance: str | None = None) -> None: ...
    async def live_agents(self, since_ms: int) -> list[AgentInfo]: ...
    async def claim_cluster_id(self, cluster_id: str | None) -> str | None: ...

    # SCRAM credentials (issue 15)
    async def get_scram_credential(self, user: str, mechanism: str) -> ScramCredential | None: ...
    async def put_scram_credential(self, credential: ScramCredential) -> None: ...
    async def delete_scram_credential(self, user: str, mechanism: str) -> bool: ...
    async def list_scram_credentials(
        self, users: Sequence[str] | None = None
    ) -> list[ScramCredential]: ...

    # consumer groups
    async def load_group(self, group_id: str) -> GroupRecord | None: ...
    async def save_group(self, group: GroupRecord, expected_generation: int | None = None) -> bool:
        """Write ``group`` (with ``expected_generation``: only if the stored one is that, no row = 0)."""
        ...

    async def list_groups(self) -> list[GroupListing]: ...
    async def delete_group(self, group_id: str) -> bool: ...
    async def commit_offsets(self, group_id: str, offsets: Sequence[GroupOffset]) -> None: ...
    async def fetch_offsets(
        self, group_id: str, topic_ids: Sequence[uuid.UUID] | None = None
    ) -> list[GroupOffset]: ...
    async def delete_offsets(
        self, group_id: str, partitions: Sequence[tuple[uuid.UUID, int]]
    ) -> int: ...
    # KIP-848 consumer groups (metastore/consumer_groups.py)
    async def load_consumer_group(self, group_id: str) -> ConsumerGroupRecord | None: ...
    async def save_consumer_group(self, group: ConsumerGroupRecord) -> None: ...
    async def list_consumer_groups(self) -> list[ConsumerGroupRecord]: ...
    async def delete_consumer_group(self, group_id: str) -> bool: ...
    async def switch_group_protocol(
        self, classic: GroupRecord, consumer: ConsumerGroupRecord | None
    ) -> None: ...

    # compaction (compactor, retention, GC; metastore/compaction.py)
    async def list_compaction_objects(
        self, level: int, *, fmt: str = "segment", limit: int = 10_000
    ) -> list[CompactionObject]: ...
    async def batches_in_objects(self, object_ids: Sequence[int]) -> list[StoredBatch]: ...
    async def batches_in_object_keys(self, keys: Sequence[str]) -> list[StoredBatch]: ...
    async def partition_batches(
        self,
        topic_id: uuid.UUID,
        partition: int,
        *,
        min_level: int = 0,
        max_level: int = 1 << 14,
        formats: Sequence[str] = ("segment",),
        limit: int = 100_000,
    ) -> list[StoredBatch]: ...
    async def first_batch_offset(self, topic_id: uuid.UUID, partition: int) -> int | None: ...
    async def partition_summaries(self) -> list[PartitionSummary]: ...
    async def registered_keys(self, keys: Sequence[str]) -> set[str]: ...
    async def list_parquet_files(
        self, topic_id: uuid.UUID, partition: int
    ) -> list[ParquetFileInfo]: ...
    async def swap_batches(
        self,
        expected: Sequence[StoredBatch],
        replacements: Sequence[StoredBatch],
        new_objects: Sequence[NewObject],
        parquet_files: Sequence[ParquetFileInfo] = (),
    ) -> SwapResult: ...
    async def enforce_retention(
        self,
        topic_id: uuid.UUID,
        partition: int,
        *,
        delete_before_ms: int | None = None,
        use_append_time: bool = False,
        max_bytes: int | None = None,
        max_batches: int = 10_000,
    ) -> RetentionResult: ...

    # read leases (metastore/leases.py): objects a running reader needs
    async def acquire_read_lease(
        self, lease_id: str, object_keys: Sequence[str], ttl_ms: int, *, owner: str = ""
    ) -> ReadLeaseGrant: ...
    async def release_read_lease(self, lease_id: str) -> bool: ...
    async def list_read_leases(self) -> list[ReadLeaseInfo]: ...
    async def claim_objects_to_delete(
        self, older_than_ms: int, limit: int = 1000
    ) -> list[ObjectInfo]: ...
    async def leased_object_count(self) -> int: ...

    # -- share groups (KIP-932; metastore/share.py) --
    async def share_partitions_load(
        self, group_id: str, keys: Sequence[tuple[uuid.UUID, int]] | None = None
    ) -> list[SharePartitionState]: ...
    async def share_partition_cas(
        self, state: SharePartitionState, expected_version: int
    ) -> bool: ...
    async def share_partitions_delete(
        self, group_id: str, keys: Sequence[tuple[uuid.UUID, int]] | None = None
    ) -> int: ...
    async def share_group_save(self, group_id: str, group_epoch: int) -> None: ...
    async def share_groups_list(self) -> list[ShareGroupRecord]: ...
    async def share_group_delete(self, group_id: str) -> bool: ...
    async def group_config_get(self, group_id: str) -> dict[str, str]: ...
    async def group_config_alter(
        self, group_id: str, set_values: Mapping[str, str], delete_names: Sequence[str] = ()
    ) -> None: ...

    # ACLs (issue 15)
    async def create_acls(self, bindings: Sequence[AclBinding]) -> int: ...
    async def delete_acls(self, filters: Sequence[AclBindingFilter]) -> list[list[AclBinding]]: ...
    async def list_acls(
        self, flt: AclBindingFilter | None = None
    ) -> tuple[int, list[AclBinding]]: ...
    async def acl_version(self) -> int: ...

    async def close(self) -> None: ...
