"""Initial schema: topics, partitions, objects, batches, producers, agents, groups.

Revision ID: 0001
Revises:
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "agents",
        sa.Column("id", sa.String(length=255), nullable=False),
        sa.Column("host", sa.String(length=255), nullable=False),
        sa.Column("port", sa.Integer(), nullable=False),
        sa.Column("zone", sa.String(length=255), nullable=True),
        sa.Column("registered_at", sa.BigInteger(), nullable=False),
        sa.Column("heartbeat_at", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_agents")),
    )
    op.create_index("ix_agents_heartbeat_at", "agents", ["heartbeat_at"], unique=False)

    op.create_table(
        "group_offsets",
        sa.Column("group_id", sa.String(length=255), nullable=False),
        sa.Column("topic_id", sa.Uuid(), nullable=False),
        sa.Column("partition", sa.Integer(), nullable=False),
        sa.Column("committed_offset", sa.BigInteger(), nullable=False),
        sa.Column("leader_epoch", sa.Integer(), nullable=False),
        sa.Column("metadata", sa.Text(), nullable=True),
        sa.Column("commit_time", sa.BigInteger(), nullable=False),
        sa.Column("expire_time", sa.BigInteger(), nullable=True),
        sa.PrimaryKeyConstraint("group_id", "topic_id", "partition", name=op.f("pk_group_offsets")),
    )
    op.create_table(
        "groups",
        sa.Column("group_id", sa.String(length=255), nullable=False),
        sa.Column("protocol_type", sa.String(length=255), nullable=True),
        sa.Column("protocol", sa.String(length=255), nullable=True),
        sa.Column("state", sa.String(length=32), nullable=False),
        sa.Column("generation", sa.Integer(), nullable=False),
        sa.Column("leader_id", sa.String(length=255), nullable=True),
        sa.Column("coordinator_agent", sa.String(length=255), nullable=True),
        sa.Column("updated_at", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("group_id", name=op.f("pk_groups")),
    )
    op.create_table(
        "objects",
        sa.Column(
            "id",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            autoincrement=True,
            nullable=False,
        ),
        sa.Column("key", sa.String(length=1024), nullable=False),
        sa.Column("agent_id", sa.String(length=255), nullable=False),
        sa.Column("size", sa.BigInteger(), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("created_at", sa.BigInteger(), nullable=False),
        sa.Column("deleting_since", sa.BigInteger(), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_objects")),
        sa.UniqueConstraint("key", name=op.f("uq_objects_key")),
    )
    op.create_index(
        "ix_objects_state_deleting_since", "objects", ["state", "deleting_since"], unique=False
    )

    op.create_table(
        "producer_batches",
        sa.Column("topic_id", sa.Uuid(), nullable=False),
        sa.Column("partition", sa.Integer(), nullable=False),
        sa.Column("producer_id", sa.BigInteger(), nullable=False),
        sa.Column("base_offset", sa.BigInteger(), nullable=False),
        sa.Column("producer_epoch", sa.SmallInteger(), nullable=False),
        sa.Column("base_sequence", sa.Integer(), nullable=False),
        sa.Column("last_sequence", sa.Integer(), nullable=False),
        sa.Column("last_offset", sa.BigInteger(), nullable=False),
        sa.Column("append_time", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint(
            "topic_id", "partition", "producer_id", "base_offset", name=op.f("pk_producer_batches")
        ),
    )
    op.create_table(
        "producer_id_allocator",
        sa.Column("id", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("next_producer_id", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_producer_id_allocator")),
    )
    op.execute("INSERT INTO producer_id_allocator (id, next_producer_id) VALUES (1, 0)")
    op.create_table(
        "producers",
        sa.Column("transactional_id", sa.String(length=255), nullable=False),
        sa.Column("producer_id", sa.BigInteger(), nullable=False),
        sa.Column("producer_epoch", sa.SmallInteger(), nullable=False),
        sa.Column("transaction_timeout_ms", sa.Integer(), nullable=False),
        sa.Column("updated_at", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("transactional_id", name=op.f("pk_producers")),
    )
    op.create_table(
        "topics",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("name", sa.String(length=249), nullable=False),
        sa.Column("partitions", sa.Integer(), nullable=False),
        sa.Column("config", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.BigInteger(), nullable=False),
        sa.Column("deleted_at", sa.BigInteger(), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_topics")),
    )
    op.create_index(
        "ix_topics_live_name",
        "topics",
        ["name"],
        unique=True,
        sqlite_where=sa.text("deleted_at IS NULL"),
        postgresql_where=sa.text("deleted_at IS NULL"),
    )

    op.create_table(
        "batches",
        sa.Column("topic_id", sa.Uuid(), nullable=False),
        sa.Column("partition", sa.Integer(), nullable=False),
        sa.Column("last_offset", sa.BigInteger(), nullable=False),
        sa.Column("base_offset", sa.BigInteger(), nullable=False),
        sa.Column("object_id", sa.BigInteger(), nullable=False),
        sa.Column("byte_pos", sa.BigInteger(), nullable=False),
        sa.Column("byte_len", sa.BigInteger(), nullable=False),
        sa.Column("record_count", sa.Integer(), nullable=False),
        sa.Column("base_timestamp", sa.BigInteger(), nullable=False),
        sa.Column("max_timestamp", sa.BigInteger(), nullable=False),
        sa.Column("append_time", sa.BigInteger(), nullable=False),
        sa.Column("producer_id", sa.BigInteger(), nullable=False),
        sa.Column("producer_epoch", sa.SmallInteger(), nullable=False),
        sa.Column("base_sequence", sa.Integer(), nullable=False),
        sa.Column("is_transactional", sa.Boolean(), nullable=False),
        sa.PrimaryKeyConstraint("topic_id", "partition", "last_offset", name=op.f("pk_batches")),
    )
    op.create_index("ix_batches_object_id", "batches", ["object_id"], unique=False)

    op.create_table(
        "group_members",
        sa.Column("group_id", sa.String(length=255), nullable=False),
        sa.Column("member_id", sa.String(length=255), nullable=False),
        sa.Column("group_instance_id", sa.String(length=255), nullable=True),
        sa.Column("client_id", sa.String(length=255), nullable=False),
        sa.Column("client_host", sa.String(length=255), nullable=False),
        sa.Column("session_timeout_ms", sa.Integer(), nullable=False),
        sa.Column("rebalance_timeout_ms", sa.Integer(), nullable=False),
        sa.Column("metadata", sa.LargeBinary(), nullable=True),
        sa.Column("assignment", sa.LargeBinary(), nullable=True),
        sa.ForeignKeyConstraint(
            ["group_id"], ["groups.group_id"], name=op.f("fk_group_members_group_id_groups")
        ),
        sa.PrimaryKeyConstraint("group_id", "member_id", name=op.f("pk_group_members")),
    )
    op.create_table(
        "partitions",
        sa.Column("topic_id", sa.Uuid(), nullable=False),
        sa.Column("partition", sa.Integer(), nullable=False),
        sa.Column("log_start_offset", sa.BigInteger(), nullable=False),
        sa.Column("high_watermark", sa.BigInteger(), nullable=False),
        sa.Column("bytes", sa.BigInteger(), nullable=False),
        sa.Column("created_at", sa.BigInteger(), nullable=False),
        sa.ForeignKeyConstraint(
            ["topic_id"], ["topics.id"], name=op.f("fk_partitions_topic_id_topics")
        ),
        sa.PrimaryKeyConstraint("topic_id", "partition", name=op.f("pk_partitions")),
    )


def downgrade() -> None:
    op.drop_table("partitions")
    op.drop_table("group_members")
    op.drop_index("ix_batches_object_id", table_name="batches")

    op.drop_table("batches")
    op.drop_index("ix_topics_live_name", table_name="topics")

    op.drop_table("topics")
    op.drop_table("producers")
    op.drop_table("producer_id_allocator")
    op.drop_table("producer_batches")
    op.drop_index("ix_objects_state_deleting_since", table_name="objects")

    op.drop_table("objects")
    op.drop_table("groups")
    op.drop_table("group_offsets")
    op.drop_index("ix_agents_heartbeat_at", table_name="agents")

    op.drop_table("agents")
