"""Run rows (issue 18): ``batches.entries`` and ``objects.run_head``.

A group commit of several objects writes one ``batches`` row per partition it
touched, the batches' fields packed in ``entries`` (``metastore.runs``), not
one row per batch: at 1,000 partitions per object that insert was the floor of
the commit rate. ``entries`` NULL keeps today's meaning (one batch), so every
existing row stays valid. ``objects.run_head`` names the object a group's run
rows carry in ``object_id``, so the GC can tell when an object of the group is
no longer referenced. Both columns are nullable: no table is rewritten.

Revision ID: 0016
Revises: 0015
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("batches", sa.Column("entries", sa.LargeBinary(), nullable=True))
    op.add_column("objects", sa.Column("run_head", sa.BigInteger(), nullable=True))
    op.create_index("ix_objects_run_head", "objects", ["run_head"], unique=False)


def downgrade() -> None:
    # Run rows cannot be read by the older code: refuse rather than lose batches.
    found = op.get_bind().execute(
        sa.text("SELECT 1 FROM batches WHERE entries IS NOT NULL LIMIT 1")
    )
    if found.first() is not None:
        raise RuntimeError("batches holds run rows; downgrading past 0016 would hide their batches")
    op.drop_index("ix_objects_run_head", table_name="objects")
    with op.batch_alter_table("objects") as b:
        b.drop_column("run_head")
    with op.batch_alter_table("batches") as b:
        b.drop_column("entries")
