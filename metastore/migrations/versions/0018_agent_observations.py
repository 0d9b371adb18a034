"""Slow-agent isolation (issue 43): ``agents.observations``.

Each agent writes, with its heartbeat, a small JSON document: its recent probe
latency of every peer and the isolations it currently applies
(``agent.cluster.isolation``). Every agent computes the isolated set from the
rows of all agents, so they agree on partition leaders and coordinators.
Nullable: an agent of an older version publishes nothing and is never judged
from its own silence.

Revision ID: 0018
Revises: 0017
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("agents") as batch:
        batch.add_column(sa.Column("observations", sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("agents") as batch:
        batch.drop_column("observations")
