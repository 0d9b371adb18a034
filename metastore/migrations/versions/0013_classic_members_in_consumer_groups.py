"""Online migration between the classic and the consumer group protocol (issue 16):
a consumer group may hold members that joined with the classic protocol
(JoinGroup); ``consumer_group_members.classic`` keeps their session timeout and
supported protocols (JSON), NULL for consumer-protocol members.

Revision ID: 0013
Revises: 0012
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("consumer_group_members") as batch:
        batch.add_column(sa.Column("classic", sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("consumer_group_members") as batch:
        batch.drop_column("classic")
