"""ACLs (issue 15): one row per binding, Kafka's codes, and a change counter.

Revision ID: 0012
Revises: 0011
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "acls",
        sa.Column(
            "id",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            autoincrement=True,
            nullable=False,
        ),
        sa.Column("resource_type", sa.SmallInteger(), nullable=False),
        sa.Column("resource_name", sa.String(length=1024), nullable=False),
        sa.Column("pattern_type", sa.SmallInteger(), nullable=False),
        sa.Column("principal", sa.String(length=1024), nullable=False),
        sa.Column("host", sa.String(length=255), nullable=False),
        sa.Column("operation", sa.SmallInteger(), nullable=False),
        sa.Column("permission", sa.SmallInteger(), nullable=False),
        sa.Column("created_at", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_acls")),
        sa.UniqueConstraint(
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
    op.create_table(
        "acl_version",
        sa.Column("id", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("version", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_acl_version")),
    )


def downgrade() -> None:
    op.drop_table("acl_version")
    op.drop_table("acls")
