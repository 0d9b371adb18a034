"""Transactions (KIP-98): the state machine on ``producers``, the partitions and
groups of open transactions, pending transactional offsets, aborted ranges.

Revision ID: 0006
Revises: 0005
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("producers") as batch:
        batch.add_column(
            sa.Column("state", sa.String(length=16), nullable=False, server_default="Empty")
        )
        batch.add_column(
            sa.Column(
                "last_producer_id", sa.BigInteger(), nullable=False, server_default=sa.text("-1")
            )
        )
        batch.add_column(
            sa.Column(
                "last_producer_epoch",
                sa.SmallInteger(),
                nullable=False,
                server_default=sa.text("-1"),
            )
        )
        batch.add_column(
            sa.Column(
                "txn_started_at", sa.BigInteger(), nullable=False, server_default=sa.text("-1")
            )
        )
    op.create_index("ix_producers_producer_id", "producers", ["producer_id"], unique=False)
    op.create_table(
        "txn_partitions",
        sa.Column("transactional_id", sa.String(length=255), nullable=False),
        sa.Column("topic_id", sa.Uuid(), nullable=False),
        sa.Column("partition", sa.Integer(), nullable=False),
        sa.Column("producer_id", sa.BigInteger(), nullable=False),
        sa.Column("first_offset", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint(
            "transactional_id", "topic_id", "partition", name=op.f("pk_txn_partitions")
        ),
    )
    op.create_index(
        "ix_txn_partitions_topic_id_partition",
        "txn_partitions",
        ["topic_id", "partition"],
        unique=False,
    )
    op.create_table(
        "txn_groups",
        sa.Column("transactional_id", sa.String(length=255), nullable=False),
        sa.Column("group_id", sa.String(length=255), nullable=False),
        sa.PrimaryKeyConstraint("transactional_id", "group_id", name=op.f("pk_txn_groups")),
    )
    op.create_table(
        "txn_offsets",
        sa.Column("transactional_id", sa.String(length=255), nullable=False),
        sa.Column("group_id", sa.String(length=255), nullable=False),
        sa.Column("topic_id", sa.Uuid(), nullable=False),
        sa.Column("partition", sa.Integer(), nullable=False),
        sa.Column("committed_offset", sa.BigInteger(), nullable=False),
        sa.Column("leader_epoch", sa.Integer(), nullable=False),
        sa.Column("metadata", sa.Text(), nullable=True),
        sa.Column("commit_time", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint(
            "transactional_id", "group_id", "topic_id", "partition", name=op.f("pk_txn_offsets")
        ),
    )
    op.create_table(
        "aborted_txns",
        sa.Column("topic_id", sa.Uuid(), nullable=False),
        sa.Column("partition", sa.Integer(), nullable=False),
        sa.Column("last_offset", sa.BigInteger(), nullable=False),
        sa.Column("producer_id", sa.BigInteger(), nullable=False),
        sa.Column("first_offset", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint(
            "topic_id", "partition", "last_offset", "producer_id", name=op.f("pk_aborted_txns")
        ),
    )


def downgrade() -> None:
    op.drop_table("aborted_txns")
    op.drop_table("txn_offsets")
    op.drop_table("txn_groups")
    op.drop_index("ix_txn_partitions_topic_id_partition", table_name="txn_partitions")
    op.drop_table("txn_partitions")
    op.drop_index("ix_producers_producer_id", table_name="producers")
    with op.batch_alter_table("producers") as batch:
        batch.drop_column("txn_started_at")
        batch.drop_column("last_producer_epoch")
        batch.drop_column("last_producer_id")
        batch.drop_column("state")
