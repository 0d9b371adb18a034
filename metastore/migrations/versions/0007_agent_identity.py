"""Agent identity apart from address: peer address and process instance.

``agents.host``/``port`` stay what clients are told (several agents may share a
load balancer's address); ``peer_host``/``peer_port`` are the private address
peers reach an agent's HTTP (block cache) on; ``instance`` is random per
process so that a second live process claiming an agent id is refused while a
restart of the same agent (after its old row went stale) is not.

Revision ID: 0007
Revises: 0006
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("agents") as b:
        b.add_column(sa.Column("peer_host", sa.String(length=255), nullable=True))
        b.add_column(sa.Column("peer_port", sa.Integer(), nullable=True))
        b.add_column(sa.Column("instance", sa.String(length=64), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("agents") as b:
        b.drop_column("instance")
        b.drop_column("peer_port")
        b.drop_column("peer_host")
