"""SQLAlchemy Core schema of the metastore, shared by SQLite and PostgreSQL.

This module is the reference the migrations in ``metastore/migrations`` must
reproduce (a test compares them). All times are epoch milliseconds from the
injected clock (BIGINT), so both databases store the same values and tests need
no sleeps. ``partitions`` is the only hot, row-locked table: a commit locks the
partition rows it touches, in sorted ``(topic_id, partition)`` order.
"""

from __future__ import annotations

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    Column,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    SmallInteger,
    String,
    Table,
    Text,
    UniqueConstraint,
    Uuid,
    text,
)

# SQLite only auto-increments an INTEGER PRIMARY KEY (the rowid alias).
BigId = BigInteger().with_variant(Integer(), "sqlite")

NAMING = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "fk": "fk_%(table_name)s_%(column_0_N_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

metadata = MetaData(naming_convention=NAMING)

topics = Table(
    "topics",
    metadata,
    Column("id", Uuid(), primary_key=True),
    Column("name", String(249), nullable=False),
    Column("partitions", Integer, nullable=False),
    Column("config", JSON, nullable=False),
    Column("created_at", BigInteger, nullable=False),
    Column("deleted_at", BigInteger, nullable=True),
)
# A deleted topic keeps its row (its id stays unique) but frees its name.
Index(
    "ix_topics_live_name",
    topics.c.name,
    unique=True,
    sqlite_where=text("deleted_at IS NULL"),
    postgresql_where=text("deleted_at IS NULL"),
)

partitions = Table(
    "partitions",
    metadata,
    Column("topic_id", Uuid(), ForeignKey("topics.id"), primary_key=True),
    Column("partition", Integer, primary_key=True),
    Column("log_start_offset", BigInteger, nullable=False),
    Column("high_watermark", BigInteger, nullable=False),
    Column("bytes", BigInteger, nullable=False),
    Column("created_at", BigInteger, nullable=False),
)

objects = Table(
    "objects",
    metadata,
    Column("id", BigId, primary_key=True, autoincrement=True),
    Column("key", String(1024), nullable=False, unique=True),
    Column("agent_id", String(255), nullable=False),
    Column("size", BigInteger, nullable=False),
    Column("state", String(16), nullable=False),  # live | deleting
    Column("created_at", BigInteger, nullable=False),
    Column("deleting_since", BigInteger, nullable=True),
    # LSM level (0: an agent's segment, 1-2: merged by the compactor) and format
    # ("segment" | "parquet"); migration 0003.
    Column("level", SmallInteger, nullable=False, server_default=text("0")),
    Column("format", String(16), nullable=False, server_default="segment"),
    # The head object of the run rows this object's batches are packed in
    # (metastore.runs); NULL when every batch of it has a row of its own.
    Column("run_head", BigInteger, nullable=True),
)
Index("ix_objects_state_deleting_since", objects.c.state, objects.c.deleting_since)
Index("ix_objects_state_level", objects.c.state, objects.c.level)
Index("ix_objects_run_head", objects.c.run_head)

batches = Table(
    "batches",
    metadata,
    Column("topic_id", Uuid(), primary_key=True),
    Column("partition", Integer, primary_key=True),
    # The primary key doubles as the (topic_id, partition, last_offset) lookup index.
    Column("last_offset", BigInteger, primary_key=True),
    Column("base_offset", BigInteger, nullable=False),
    # No foreign key to objects on purpose: Postgres checks it with one trigger query
    # per inserted row, which tripled the cost of a 1,000-batch commit. The commit
    # inserts the object row itself, and the GC only deletes unreferenced objects.
    Column("object_id", BigInteger, nullable=False),
    Column("byte_pos", BigInteger, nullable=False),
    Column("byte_len", BigInteger, nullable=False),
    Column("record_count", Integer, nullable=False),
    Column("base_timestamp", BigInteger, nullable=False),
    Column("max_timestamp", BigInteger, nullable=False),
    Column("append_time", BigInteger, nullable=False),
    Column("producer_id", BigInteger, nullable=False),
    Column("producer_epoch", SmallInteger, nullable=False),
    Column("base_sequence", Integer, nullable=False),
    Column("is_transactional", Boolean, nullable=False),
    # NULL: the row is one batch. Else a run of batches packed by metastore.runs,
    # and the columns above describe the whole run.
    Column("entries", LargeBinary, nullable=True),
)
Index("ix_batches_object_id", batches.c.object_id)

# Idempotent-producer state: the last 5 batches of each producer on each partition.
producer_batches = Table(
    "producer_batches",
    metadata,
    Column("topic_id", Uuid(), primary_key=True),
    Column("partition", Integer, primary_key=True),
    Column("producer_id", BigInteger, primary_key=True),
    Column("base_offset", BigInteger, primary_key=True),
    Column("producer_epoch", SmallInteger, nullable=False),
    Column("base_sequence", Integer, nullable=False),
    Column("last_sequence", Integer, nullable=False),
    Column("last_offset", BigInteger, nullable=False),
    Column("append_time", BigInteger, nullable=False),
)

# Transactional ids and their current producer id / epoch (InitProducerId), and
# since migration 0006 the transaction state machine (metastore/txn.py): state
# Empty | Ongoing | PrepareCommit | PrepareAbort | CompleteCommit | CompleteAbort,
# the id/epoch before the last bump (KIP-360 recovery) and when the transaction began.
producers = Table(
    "producers",
    metadata,
    Column("transactional_id", String(255), primary_key=True),
    Column("producer_id", BigInteger, nullable=False),
    Column("producer_epoch", SmallInteger, nullable=False),
    Column("transaction_timeout_ms", Integer, nullable=False),
    Column("updated_at", BigInteger, nullable=False),
    Column("state", String(16), nullable=False, server_default="Empty"),
    Column("last_producer_id", BigInteger, nullable=False, server_default=text("-1")),
    Column("last_producer_epoch", SmallInteger, nullable=False, server_default=text("-1")),
    Column("txn_started_at", BigInteger, nullable=False, server_default=text("-1")),
)
Index("ix_producers_producer_id", producers.c.producer_id)

# Partitions in a transaction not yet completed (migration 0006). ``first_offset`` is
# the partition's high watermark when it joined: every batch of the transaction
# there lies at or after it. They hold the last stable offset of the partition
# back (the first batch of ``producer_id`` at or after ``first_offset``).
txn_partitions = Table(
    "txn_partitions",
    metadata,
    Column("transactional_id", String(255), primary_key=True),
    Column("topic_id", Uuid(), primary_key=True),
    Column("partition", Integer, primary_key=True),
    Column("producer_id", BigInteger, nullable=False),
    Column("first_offset", BigInteger, nullable=False),
)
Index("ix_txn_partitions_topic_id_partition", txn_partitions.c.topic_id, txn_partitions.c.partition)

# Groups whose offsets a transaction commits (AddOffsetsToTxn), and those offsets,
# pending until the transaction commits (TxnOffsetCommit).
txn_groups = Table(
    "txn_groups",
    metadata,
    Column("transactional_id", String(255), primary_key=True),
    Column("group_id", String(255), primary_key=True),
)

txn_offsets = Table(
    "txn_offsets",
    metadata,
    Column("transactional_id", String(255), primary_key=True),
    Column("group_id", String(255), primary_key=True),
    Column("topic_id", Uuid(), primary_key=True),
    Column("partition", Integer, primary_key=True),
    Column("committed_offset", BigInteger, nullable=False),
    Column("leader_epoch", Integer, nullable=False),
    Column("metadata", Text, nullable=True),
    Column("commit_time", BigInteger, nullable=False),
)

# Aborted transactions per partition: the producer's first batch of the transaction
# and the offset of its ABORT marker (Fetch's ``aborted_transactions``).
aborted_txns = Table(
    "aborted_txns",
    metadata,
    Column("topic_id", Uuid(), primary_key=True),
    Column("partition", Integer, primary_key=True),
    Column("last_offset", BigInteger, primary_key=True),
    Column("producer_id", BigInteger, primary_key=True),
    Column("first_offset", BigInteger, nullable=False),
)

# One row (id = 1): the next producer id to hand out.
producer_id_allocator = Table(
    "producer_id_allocator",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=False),
    Column("next_producer_id", BigInteger, nullable=False),
)

agents = Table(
    "agents",
    metadata,
    Column("id", String(255), primary_key=True),
    Column("host", String(255), nullable=False),
    Column("port", Integer, nullable=False),
    Column("zone", String(255), nullable=True),
    Column("registered_at", BigInteger, nullable=False),
    Column("heartbeat_at", BigInteger, nullable=False),
    # 0007: identity apart from address. ``host``/``port`` are what clients are
    # told (possibly a load balancer shared by many agents); ``peer_host``/
    # ``peer_port`` the private address peers reach this agent's HTTP on;
    # ``instance`` is random per process, so a second live process claiming the
    # same id is told apart from a restart of the same agent.
    Column("peer_host", String(255), nullable=True),
    Column("peer_port", Integer, nullable=True),
    Column("instance", String(64), nullable=True),
    # 0011: every listener's advertised endpoint "NAME://host:port,..." (NULL: one listener).
    Column("endpoints", Text, nullable=True),
    # 0018: this agent's probes of its peers and the isolations it applies, JSON
    # written with each heartbeat (agent.cluster.isolation; NULL: none published).
    Column("observations", Text, nullable=True),
)
Index("ix_agents_heartbeat_at", agents.c.heartbeat_at)

# 0008: the cluster's identity, one row. Set by the first agent started with a
# cluster id; every later agent must agree (or take it from here), so agents of
# two deployments cannot be pointed at one metastore by mistake.
cluster = Table(
    "cluster",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=False),
    Column("cluster_id", String(255), nullable=False),
    Column("created_at", BigInteger, nullable=False),
)

# Consumer groups: schema only for now; the coordinator logic comes later.
groups = Table(
    "groups",
    metadata,
    Column("group_id", String(255), primary_key=True),
    Column("protocol_type", String(255), nullable=True),
    Column("protocol", String(255), nullable=True),
    Column("state", String(32), nullable=False),
    Column("generation", Integer, nullable=False),
    Column("leader_id", String(255), nullable=True),
    Column("coordinator_agent", String(255), nullable=True),
    Column("updated_at", BigInteger, nullable=False),
)

group_members = Table(
    "group_members",
    metadata,
    Column("group_id", String(255), ForeignKey("groups.group_id"), primary_key=True),
    Column("member_id", String(255), primary_key=True),
    Column("group_instance_id", String(255), nullable=True),
    Column("client_id", String(255), nullable=False),
    Column("client_host", String(255), nullable=False),
    Column("session_timeout_ms", Integer, nullable=False),
    Column("rebalance_timeout_ms", Integer, nullable=False),
    Column("metadata", LargeBinary, nullable=True),
    Column("assignment", LargeBinary, nullable=True),
)

group_offsets = Table(
    "group_offsets",
    metadata,
    Column("group_id", String(255), primary_key=True),
    Column("topic_id", Uuid(), primary_key=True),
    Column("partition", Integer, primary_key=True),
    Column("committed_offset", BigInteger, nullable=False),
    Column("leader_epoch", Integer, nullable=False),
    Column("metadata", Text, nullable=True),
    Column("commit_time", BigInteger, nullable=False),
    Column("expire_time", BigInteger, nullable=True),
)

# KIP-848 consumer groups (migration 0010): the group's epochs and the members'
# epochs, subscriptions and assignments (JSON {topic id: [partitions]}), written
# whole by the group's coordinator so a new owner continues at the same epochs.
consumer_groups = Table(
    "consumer_groups",
    metadata,
    Column("group_id", String(255), primary_key=True),
    Column("group_epoch", Integer, nullable=False),
    Column("assignment_epoch", Integer, nullable=False),
    Column("assignor", String(64), nullable=True),
    Column("subscribed", Text, nullable=False),
    Column("coordinator_agent", String(255), nullable=True),
    Column("updated_at", BigInteger, nullable=False),
)

consumer_group_members = Table(
    "consumer_group_members",
    metadata,
    Column("group_id", String(255), ForeignKey("consumer_groups.group_id"), primary_key=True),
    Column("member_id", String(255), primary_key=True),
    Column("instance_id", String(255), nullable=True),
    Column("rack_id", String(255), nullable=True),
    Column("client_id", String(255), nullable=False),
    Column("client_host", String(255), nullable=False),
    Column("member_epoch", Integer, nullable=False),
    Column("previous_member_epoch", Integer, nullable=False),
    Column("state", String(32), nullable=False),
    Column("rebalance_timeout_ms", Integer, nullable=False),
    Column("server_assignor", String(64), nullable=True),
    Column("subscribed_topic_names", Text, nullable=False),
    Column("subscribed_topic_regex", Text, nullable=True),
    Column("assigned", Text, nullable=False),
    Column("pending_revocation", Text, nullable=False),
    Column("target", Text, nullable=False),
    # JSON {"session_timeout_ms", "protocols": [[name, base64 metadata]]} of a
    # classic-protocol member of a consumer group (migration 0013), else NULL.
    Column("classic", Text, nullable=True),
)

# Parquet objects written by the compactor and the offset range each holds per
# partition (migration 0003). Batch rows point into them too; this table is for
# readers that want files (the Spark source).
parquet_files = Table(
    "parquet_files",
    metadata,
    Column("topic_id", Uuid(), primary_key=True),
    Column("partition", Integer, primary_key=True),
    Column("object_id", BigInteger, primary_key=True),
    Column("base_offset", BigInteger, nullable=False),
    Column("last_offset", BigInteger, nullable=False),
    Column("row_count", BigInteger, nullable=False),
    Column("min_timestamp", BigInteger, nullable=False),
    Column("max_timestamp", BigInteger, nullable=False),
    Column("created_at", BigInteger, nullable=False),
)
Index("ix_parquet_files_object_id", parquet_files.c.object_id)

# Read leases (migration 0004): a reader (a Spark batch or micro-batch, an agent's
# fetches) holds the objects it planned to read until ``expires_at``, renewing it
# while it runs. The GC never claims an object under a live lease, and a lease
# is never granted on an object the GC claimed (state ``purging``).
read_leases = Table(
    "read_leases",
    metadata,
    Column("id", String(128), primary_key=True),
    Column("owner", String(255), nullable=False),
    Column("created_at", BigInteger, nullable=False),
    Column("expires_at", BigInteger, nullable=False),
)
Index("ix_read_leases_expires_at", read_leases.c.expires_at)

read_lease_objects = Table(
    "read_lease_objects",
    metadata,
    Column("lease_id", String(128), primary_key=True),
    Column("object_id", BigInteger, primary_key=True),
)
Index("ix_read_lease_objects_object_id", read_lease_objects.c.object_id)

# 0009: share groups (KIP-932). A share group's row (its epoch survives a new
# coordinator), group configs set through IncrementalAlterConfigs (GROUP
# resource), and one row per share partition holding its in-flight records as
# JSON ranges ([first, last, state, delivery count, lock until, member]), written
# by compare-and-swap on ``version``.
share_groups = Table(
    "share_groups",
    metadata,
    Column("group_id", String(255), primary_key=True),
    Column("group_epoch", Integer, nullable=False),
    Column("updated_at", BigInteger, nullable=False),
)

group_configs = Table(
    "group_configs",
    metadata,
    Column("group_id", String(255), primary_key=True),
    Column("name", String(255), primary_key=True),
    Column("value", Text, nullable=False),
)

share_partitions = Table(
    "share_partitions",
    metadata,
    Column("group_id", String(255), primary_key=True),
    Column("topic_id", Uuid(), primary_key=True),
    Column("partition", Integer, primary_key=True),
    Column("start_offset", BigInteger, nullable=False),
    Column("end_offset", BigInteger, nullable=False),
    Column("state_epoch", Integer, nullable=False),
    Column("version", BigInteger, nullable=False),
    Column("ranges", Text, nullable=False),
    Column("updated_at", BigInteger, nullable=False),
)

# 0011: SCRAM credentials (RFC 5802): salt, StoredKey, ServerKey, iterations per
# user and mechanism (SCRAM-SHA-256 / SCRAM-SHA-512); never the password.
scram_credentials = Table(
    "scram_credentials",
    metadata,
    Column("user_name", String(255), primary_key=True),
    Column("mechanism", String(32), primary_key=True),
    Column("salt", LargeBinary, nullable=False),
    Column("stored_key", LargeBinary, nullable=False),
    Column("server_key", LargeBinary, nullable=False),
    Column("iterations", Integer, nullable=False),
    Column("updated_at", BigInteger, nullable=False),
)

# 0012: ACLs (issue 15), Kafka's codes as they are on the wire; one row per
# binding (creating an existing one is a no-op). ``acl_version`` counts changes,
# so agents refresh their ACL cache when it moves (a cheap poll).
acls = Table(
    "acls",
    metadata,
    Column("id", BigId, primary_key=True, autoincrement=True),
    Column("resource_type", SmallInteger, nullable=False),
    Column("resource_name", String(1024), nullable=False),
    Column("pattern_type", SmallInteger, nullable=False),
    Column("principal", String(1024), nullable=False),
    Column("host", String(255), nullable=False),
    Column("operation", SmallInteger, nullable=False),
    Column("permission", SmallInteger, nullable=False),
    Column("created_at", BigInteger, nullable=False),
    UniqueConstraint(
        "resource_type",
        "resource_name",
        "pattern_type",
        "principal",
        "host",
        "operation",
        "permission",
        name="uq_acls_binding",
    ),
)

acl_version = Table(
    "acl_version",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=False),
    Column("version", BigInteger, nullable=False),
)
