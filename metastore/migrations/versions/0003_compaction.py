"""Compaction bookkeeping: object level and format, and the Parquet file registry.

``objects.level`` is the LSM level of a segment (0: written by an agent, 1 and 2:
merged by the compactor); ``objects.format`` is ``segment`` or ``parquet``.
``parquet_files`` lists each Parquet object with the offset range it holds per
partition, for readers (the Spark source) that want files rather than batches.

Revision ID: 0003
Revises: 0002
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("objects") as batch:
        batch.add_column(
            sa.Column("level", sa.SmallInteger(), nullable=False, server_default=sa.text("0"))
        )
        batch.add_column(
            sa.Column("format", sa.String(length=16), nullable=False, server_default="segment")
        )
    op.create_index("ix_objects_state_level", "objects", ["state", "level"], unique=False)
    op.create_table(
        "parquet_files",
        sa.Column("topic_id", sa.Uuid(), nullable=False),
        sa.Column("partition", sa.Integer(), nullable=False),
        sa.Column("object_id", sa.BigInteger(), nullable=False),
        sa.Column("base_offset", sa.BigInteger(), nullable=False),
        sa.Column("last_offset", sa.BigInteger(), nullable=False),
        sa.Column("row_count", sa.BigInteger(), nullable=False),
        sa.Column("min_timestamp", sa.BigInteger(), nullable=False),
        sa.Column("max_timestamp", sa.BigInteger(), nullable=False),
        sa.Column("created_at", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint(
            "topic_id", "partition", "object_id", name=op.f("pk_parquet_files")
        ),
    )
    op.create_index("ix_parquet_files_object_id", "parquet_files", ["object_id"], unique=False)


def downgrade() -> None:
    op.drop_index("ix_parquet_files_object_id", table_name="parquet_files")
    op.drop_table("parquet_files")
    op.drop_index("ix_objects_state_level", table_name="objects")
    with op.batch_alter_table("objects") as batch:
        batch.drop_column("format")
        batch.drop_column("level")
