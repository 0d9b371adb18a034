"""Share groups (KIP-932): group rows, group configs, share-partition state.

``share_partitions`` keeps each share partition's in-flight records compactly,
as JSON ranges of one state each, written by compare-and-swap on ``version``.

Revision ID: 0009
Revises: 0008
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "share_groups",
        sa.Column("group_id", sa.String(length=255), primary_key=True),
        sa.Column("group_epoch", sa.Integer(), nullable=False),
        sa.Column("updated_at", sa.BigInteger(), nullable=False),
    )
    op.create_table(
        "group_configs",
        sa.Column("group_id", sa.String(length=255), primary_key=True),
        sa.Column("name", sa.String(length=255), primary_key=True),
        sa.Column("value", sa.Text(), nullable=False),
    )
    op.create_table(
        "share_partitions",
        sa.Column("group_id", sa.String(length=255), primary_key=True),
        sa.Column("topic_id", sa.Uuid(), primary_key=True),
        sa.Column("partition", sa.Integer(), primary_key=True),
        sa.Column("start_offset", sa.BigInteger(), nullable=False),
        sa.Column("end_offset", sa.BigInteger(), nullable=False),
        sa.Column("state_epoch", sa.Integer(), nullable=False),
        sa.Column("version", sa.BigInteger(), nullable=False),
        sa.Column("ranges", sa.Text(), nullable=False),
        sa.Column("updated_at", sa.BigInteger(), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("share_partitions")
    op.drop_table("group_configs")
    op.drop_table("share_groups")
