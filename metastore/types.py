"""Value types of the metastore API: error codes, inputs and results.

The agent, compactor and Spark source talk to the metastore only through these
types. Business outcomes (unknown partition, fenced producer, offset out of
range) are values carrying a Kafka error code, so the agent maps them to the wire
without translation; infrastructure failures are exceptions (``MetastoreError``).

The commit input and result are NamedTuples rather than dataclasses: they are on
the hot path and ``zip(*batches)`` turns a list of them into column arrays at C
speed for the one-round-trip Postgres call.
"""

from __future__ import annotations

import enum
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import NamedTuple


class ErrorCode(enum.IntEnum):
    """The subset of Kafka's error codes the metastore can return (same numbers)."""

    NONE = 0
    OFFSET_OUT_OF_RANGE = 1
    UNKNOWN_TOPIC_OR_PARTITION = 3
    INVALID_TOPIC_EXCEPTION = 17
    TOPIC_ALREADY_EXISTS = 36
    INVALID_PARTITIONS = 37
    INVALID_REPLICATION_FACTOR = 38
    INVALID_CONFIG = 40
    POLICY_VIOLATION = 44
    OUT_OF_ORDER_SEQUENCE_NUMBER = 45
    DUPLICATE_SEQUENCE_NUMBER = 46
    INVALID_PRODUCER_EPOCH = 47
    INVALID_TXN_STATE = 48
    INVALID_PRODUCER_ID_MAPPING = 49
    CONCURRENT_TRANSACTIONS = 51
    UNKNOWN_PRODUCER_ID = 59
    PRODUCER_FENCED = 90


class MetastoreError(Exception):
    """An infrastructure failure (database unreachable, constraint broken, ...)."""


class ObjectAlreadyCommittedError(MetastoreError):
    """``commit_object`` was called twice for the same object key."""


NO_PRODUCER_ID = -1
EARLIEST_TIMESTAMP = -2
LATEST_TIMESTAMP = -1
MAX_TIMESTAMP = -3


class BatchToCommit(NamedTuple):
    """One record batch of an uploaded object, as the agent's produce handler saw it."""

    topic_id: uuid.UUID
    partition: int
    byte_pos: int
    byte_len: int
    record_count: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = -1
    base_sequence: int = -1
    is_transactional: bool = False


class CommitResult(NamedTuple):
    """Per-batch outcome. ``base_offset`` is -1 on error; for a duplicate it is the
    offset the original batch got."""

    error: ErrorCode
    base_offset: int
    log_append_time_ms: int
    log_start_offset: int


class ObjectToCommit(NamedTuple):
    """One uploaded object and its batches, as one member of a group commit."""

    key: str
    size: int
    agent_id: str
    batches: Sequence[BatchToCommit]


@dataclass(frozen=True, slots=True)
class ObjectCommitResult:
    """Outcome of one object of a group commit: one ``CommitResult`` per batch, or
    ``already_committed`` (its key was registered before, or earlier in the same
    group: nothing of it was sequenced). A dataclass, so that later outcomes
    (transactions) can add fields without breaking the wire."""

    results: list[CommitResult]
    already_committed: bool = False


@dataclass(frozen=True, slots=True)
class TopicInfo:
    id: uuid.UUID
    name: str
    partitions: int
    config: dict[str, str]  # explicit overrides only; see metastore.topic_config
    created_at_ms: int


@dataclass(frozen=True, slots=True)
class TopicResult:
    """Outcome of create/delete/add_partitions/alter_config on one topic."""

    error: ErrorCode
    message: str | None = None
    topic: TopicInfo | None = None


@dataclass(frozen=True, slots=True)
class ConfigEntry:
    name: str
    value: str
    is_default: bool


@dataclass(frozen=True, slots=True)
class DescribeConfigResult:
    error: ErrorCode
    entries: list[ConfigEntry] = field(default_factory=list)
    message: str | None = None


@dataclass(frozen=True, slots=True)
class BatchLocation:
    object_key: str
    byte_pos: int
    byte_len: int
    base_offset: int
    last_offset: int
    record_count: int
    max_timestamp: int
    append_time: int


@dataclass(frozen=True, slots=True)
class FindResult:
    error: ErrorCode
    log_start_offset: int
    high_watermark: int
    batches: list[BatchLocation] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class ListOffsetsResult:
    error: ErrorCode
    offset: int = -1
    timestamp: int = -1


@dataclass(frozen=True, slots=True)
class DeleteRecordsResult:
    error: ErrorCode
    low_watermark: int = -1


@dataclass(frozen=True, slots=True)
class ProducerIdResult:
    error: ErrorCode
    producer_id: int = -1
    producer_epoch: int = -1


@dataclass(frozen=True, slots=True)
class ObjectInfo:
    id: int
    key: str
    agent_id: str
    size: int
    state: str  # "live" | "deleting" | "purging" (claimed by the GC, being deleted)
    created_at_ms: int
    deleting_since_ms: int | None


@dataclass(frozen=True, slots=True)
class AgentInfo:
    id: str
    host: str
    port: int
    zone: str | None
    heartbeat_at_ms: int
    peer_host: str | None = None
    peer_port: int | None = None
    instance: str | None = None
    endpoints: str | None = None  # "NAME://host:port,..." of every listener (None: one)
    # JSON of its peer probes and isolations (agent.cluster.isolation); None: none published
    observations: str | None = None


@dataclass(frozen=True, slots=True)
class ScramCredential:
    """RFC 5802 salted credential of one user for one mechanism (no password)."""

    user: str
    mechanism: str  # SCRAM-SHA-256 | SCRAM-SHA-512
    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int


# -- consumer groups ------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class GroupMemberRecord:
    """One member of a classic group as persisted. ``metadata`` is the member's
    metadata for the group's chosen protocol (what Kafka's group log keeps too)."""

    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    metadata: bytes | None
    assignment: bytes | None


@dataclass(frozen=True, slots=True)
class GroupRecord:
    """A classic group's persisted state: enough for another agent to take it over."""

    group_id: str
    state: str  # Empty | PreparingRebalance | CompletingRebalance | Stable
    generation: int
    protocol_type: str | None
    protocol: str | None
    leader_id: str | None
    members: list[GroupMemberRecord] = field(default_factory=list)
    coordinator_agent: str | None = None
    updated_at_ms: int = 0


@dataclass(frozen=True, slots=True)
class ConsumerMemberRecord:
    """A KIP-848 consumer-group member as persisted: its epochs, subscription,
    reconciliation state, current assignment (``assigned`` plus the partitions it
    still has to revoke) and target assignment, partitions by topic id."""

    member_id: str
    instance_id: str | None
    rack_id: str | None
    client_id: str
    client_host: str
    member_epoch: int
    previous_member_epoch: int
    state: str  # stable | unrevoked_partitions | unreleased_partitions
    rebalance_timeout_ms: int
    server_assignor: str | None
    subscribed_topic_names: list[str]
    subscribed_topic_regex: str | None
    assigned: dict[uuid.UUID, list[int]]
    pending_revocation: dict[uuid.UUID, list[int]]
    target: dict[uuid.UUID, list[int]]
    # A member that joined with the classic protocol (JoinGroup) into a consumer
    # group (online migration): its session timeout and its (name, metadata)
    # protocols; None for a consumer-protocol member.
    classic_session_timeout_ms: int | None = None
    classic_protocols: list[tuple[str, bytes]] | None = None


@dataclass(frozen=True, slots=True)
class ConsumerGroupRecord:
    """A KIP-848 consumer group as persisted: a new coordinator continues from
    these epochs and assignments (``subscribed`` is the topic-name -> partition
    count snapshot the target assignment was computed from)."""

    group_id: str
    group_epoch: int
    assignment_epoch: int
    assignor: str | None
    subscribed: dict[str, int] = field(default_factory=dict)
    members: list[ConsumerMemberRecord] = field(default_factory=list)
    coordinator_agent: str | None = None
    updated_at_ms: int = 0


@dataclass(frozen=True, slots=True)
class GroupListing:
    group_id: str
    protocol_type: str | None
    state: str


@dataclass(frozen=True, slots=True)
class GroupOffset:
    """A committed offset of a group on one partition. ``commit_time_ms`` -1 means
    "now" on the metastore's clock when committing."""

    topic_id: uuid.UUID
    partition: int
    offset: int
    leader_epoch: int = -1
    metadata: str | None = None
    commit_time_ms: int = -1
    expire_time_ms: int | None = None


# -- compaction (compactor, retention, GC) --------------------------------------------


@dataclass(frozen=True, slots=True)
class StoredBatch:
    """A full batch row, with its object's key. As a replacement in ``swap_batches``
    ``object_key`` names the new object and ``object_id`` is ignored."""

    topic_id: uuid.UUID
    partition: int
    base_offset: int
    last_offset: int
    object_id: int
    object_key: str
    byte_pos: int
    byte_len: int
    record_count: int
    base_timestamp: int
    max_timestamp: int
    append_time: int
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = -1
    base_sequence: int = -1
    is_transactional: bool = False


@dataclass(frozen=True, slots=True)
class CompactionObject:
    """A live object as the compaction planner sees it."""

    id: int
    key: str
    size: int
    level: int
    format: str  # "segment" | "parquet"
    created_at_ms: int


@dataclass(frozen=True, slots=True)
class NewObject:
    """An object the compactor wrote, to register in ``swap_batches``."""

    key: str
    size: int
    level: int
    format: str = "segment"


@dataclass(frozen=True, slots=True)
class ParquetFileInfo:
    """One partition's offset range inside a Parquet object."""

    object_key: str
    topic_id: uuid.UUID
    partition: int
    base_offset: int
    last_offset: int
    row_count: int
    min_timestamp: int
    max_timestamp: int


@dataclass(frozen=True, slots=True)
class SwapResult:
    """Outcome of ``swap_batches``: ``ok`` False means a compare-and-swap conflict
    (nothing changed; the new objects were registered as ``deleting``)."""

    ok: bool
    message: str | None = None
    objects_deleting: list[str] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class PartitionSummary:
    topic_id: uuid.UUID
    partition: int
    log_start_offset: int
    high_watermark: int
    bytes: int


class PartitionOffsets(NamedTuple):
    """One partition's log start offset and high watermark (ListOffsets at width)."""

    partition: int
    log_start_offset: int
    high_watermark: int


@dataclass(frozen=True, slots=True)
class TopicOffsets:
    """Every partition's offsets (:class:`PartitionOffsets`, in partition order) and
    whether the topic was free of transaction state when they were read: no
    partition in an open transaction and none with an aborted range. Then every
    batch below each high watermark is stable and none is aborted, so a
    read_committed Fetch needs no ``stable_offsets`` for them."""

    partitions: list[PartitionOffsets]
    txn_free: bool


@dataclass(frozen=True, slots=True)
class RetentionResult:
    error: ErrorCode
    log_start_offset: int = -1
    removed_batches: int = 0
    removed_bytes: int = 0
    objects_deleting: list[str] = field(default_factory=list)


# -- read leases ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ReadLeaseGrant:
    """Outcome of ``acquire_read_lease``: the lease's deadline, the sizes of the
    objects now under it, and the keys that could not be leased because the GC
    already claimed or removed them (the reader must plan again)."""

    lease_id: str
    expires_at_ms: int
    sizes: dict[str, int] = field(default_factory=dict)
    missing: list[str] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class ReadLeaseInfo:
    lease_id: str
    owner: str
    created_at_ms: int
    expires_at_ms: int
    objects: int


# -- transactions (metastore/txn.py) --------------------------------------------------

TXN_EMPTY = "Empty"
TXN_ONGOING = "Ongoing"
TXN_PREPARE_COMMIT = "PrepareCommit"
TXN_PREPARE_ABORT = "PrepareAbort"
TXN_COMPLETE_COMMIT = "CompleteCommit"
TXN_COMPLETE_ABORT = "CompleteAbort"
TXN_STATES = (
    TXN_EMPTY,
    TXN_ONGOING,
    TXN_PREPARE_COMMIT,
    TXN_PREPARE_ABORT,
    TXN_COMPLETE_COMMIT,
    TXN_COMPLETE_ABORT,
)


@dataclass(frozen=True, slots=True)
class TxnPartition:
    """A partition in an open transaction: every batch of the transaction there lies
    at or after ``first_offset`` (the high watermark when it joined)."""

    topic_id: uuid.UUID
    partition: int
    first_offset: int


@dataclass(frozen=True, slots=True)
class TxnRecord:
    """A transactional id's state: its producer, the transaction's state and what
    is in it. ``last_producer_*`` are the id and epoch before the last bump."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    last_producer_id: int
    last_producer_epoch: int
    timeout_ms: int
    state: str
    started_at_ms: int
    updated_at_ms: int
    partitions: list[TxnPartition] = field(default_factory=list)
    groups: list[str] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class TxnResult:
    """Outcome of a transaction state change: the error (NONE when it applied, or
    when it is a retry of what already happened) and the record after it.
    ``unknown`` lists partitions AddPartitionsToTxn could not find."""

    error: ErrorCode
    txn: TxnRecord | None = None
    unknown: list[tuple[uuid.UUID, int]] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class StableOffsets:
    """What a read_committed reader of one partition may see: the last stable
    offset and, from a fetch offset on, the aborted transactions below it as
    (producer id, first offset, offset of the ABORT marker), by first offset."""

    error: ErrorCode
    last_stable_offset: int = -1
    high_watermark: int = -1
    aborted: list[tuple[int, int, int]] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class ProducerState:
    """An active producer on a partition (DescribeProducers)."""

    producer_id: int
    producer_epoch: int
    last_sequence: int
    last_timestamp_ms: int
    current_txn_start_offset: int = -1


# -- share groups (KIP-932) --------------------------------------------------------------


class InflightRange(NamedTuple):
    """A run of in-flight records of a share partition with one state.

    ``state`` is Kafka's RecordState: 0 AVAILABLE, 1 ACQUIRED, 2 ACKNOWLEDGED,
    4 ARCHIVED. ``lock_until_ms`` and ``member_id`` only mean something while
    ACQUIRED."""

    first: int
    last: int
    state: int
    delivery_count: int
    lock_until_ms: int = 0
    member_id: str = ""


@dataclass(frozen=True, slots=True)
class SharePartitionState:
    """One share partition (group, topic, partition) in compact form.

    ``start_offset`` is the share-partition start offset (SPSO): every record
    below it is acknowledged or archived. ``end_offset`` is one past the last
    record ever acquired (the SPEO + 1); ``ranges`` cover ``[start_offset,
    end_offset)`` without gaps or overlaps. ``version`` counts successful writes
    (compare-and-swap)."""

    group_id: str
    topic_id: uuid.UUID
    partition: int
    start_offset: int
    end_offset: int
    ranges: list[InflightRange] = field(default_factory=list)
    state_epoch: int = 0
    version: int = 0
    updated_at_ms: int = 0


@dataclass(frozen=True, slots=True)
class ShareGroupRecord:
    group_id: str
    group_epoch: int
    updated_at_ms: int = 0


# -- ACLs (issue 15) ---------------------------------------------------------------------
# Kafka's codes, stored and sent as they are on the wire (the agent's
# agent.security.acl names them): resource type TOPIC 2, GROUP 3, CLUSTER 4,
# TRANSACTIONAL_ID 5; pattern type ANY 1, MATCH 2, LITERAL 3, PREFIXED 4;
# operation ANY 1, ALL 2, READ 3, ...; permission ANY 1, DENY 2, ALLOW 3.
ACL_ANY = 1
ACL_MATCH = 2
ACL_LITERAL = 3
ACL_PREFIXED = 4
ACL_WILDCARD = "*"


class AclBinding(NamedTuple):
    """One ACL: "principal is allowed/denied operation from host on resources matching the pattern"."""

    resource_type: int
    resource_name: str
    pattern_type: int  # LITERAL or PREFIXED
    principal: str  # "User:alice", "User:*"
    host: str  # an address or "*"
    operation: int
    permission: int  # DENY or ALLOW


class AclBindingFilter(NamedTuple):
    """A filter of Describe/DeleteAcls: None (names, principal, host) and ANY (codes) match
    everything; pattern type MATCH matches the literal, wildcard and prefixed patterns
    that would apply to the named resource (Kafka's ResourcePatternFilter/AccessControlEntryFilter)."""

    resource_type: int
    resource_name: str | None
    pattern_type: int
    principal: str | None
    host: str | None
    operation: int
    permission: int

    def matches(self, b: AclBinding) -> bool:
        if self.resource_type != ACL_ANY and self.resource_type != b.resource_type:
            return False
        if self.pattern_type not in (ACL_ANY, ACL_MATCH) and self.pattern_type != b.pattern_type:
            return False
        if self.resource_name is not None:
            if self.pattern_type != ACL_MATCH or b.pattern_type == self.pattern_type:
                if self.resource_name != b.resource_name:
                    return False
            elif b.pattern_type == ACL_LITERAL:
                if b.resource_name not in (self.resource_name, ACL_WILDCARD):
                    return False
            elif b.pattern_type == ACL_PREFIXED:
                if not self.resource_name.startswith(b.resource_name):
                    return False
            else:
                return False
        if self.principal is not None and self.principal != b.principal:
            return False
        if self.host is not None and self.host != b.host:
            return False
        if self.operation != ACL_ANY and self.operation != b.operation:
            return False
        return self.permission == ACL_ANY or self.permission == b.permission
