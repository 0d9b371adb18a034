"""The cluster's identity, stored once in the metastore.

The first agent started with a cluster id stores it; later agents must be
configured with the same id or none (then they take the stored one), so an agent
of another deployment pointed at this metastore is refused at start.

Revision ID: 0008
Revises: 0007
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "cluster",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=False),
        sa.Column("cluster_id", sa.String(length=255), nullable=False),
        sa.Column("created_at", sa.BigInteger(), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("cluster")
