"""Read leases: objects a running reader still needs, kept from the GC until a deadline.

``read_leases`` holds one row per lease (a Spark batch or micro-batch, an
agent's fetches) with its deadline; ``read_lease_objects`` the objects under
it. Objects gain the state ``purging`` (claimed by the GC; no lease is granted
on them any more), which needs no schema change.

Revision ID: 0004
Revises: 0003
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "read_leases",
        sa.Column("id", sa.String(length=128), nullable=False),
        sa.Column("owner", sa.String(length=255), nullable=False),
        sa.Column("created_at", sa.BigInteger(), nullable=False),
        sa.Column("expires_at", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_read_leases")),
    )
    op.create_index("ix_read_leases_expires_at", "read_leases", ["expires_at"], unique=False)
    op.create_table(
        "read_lease_objects",
        sa.Column("lease_id", sa.String(length=128), nullable=False),
        sa.Column("object_id", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("lease_id", "object_id", name=op.f("pk_read_lease_objects")),
    )
    op.create_index(
        "ix_read_lease_objects_object_id", "read_lease_objects", ["object_id"], unique=False
    )


def downgrade() -> None:
    op.drop_index("ix_read_lease_objects_object_id", table_name="read_lease_objects")
    op.drop_table("read_lease_objects")
    op.drop_index("ix_read_leases_expires_at", table_name="read_leases")
    op.drop_table("read_leases")
