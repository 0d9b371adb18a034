"""KIP-848 consumer groups: group epochs and member assignments.

``consumer_groups`` holds a group's epoch, target-assignment epoch, assignor and
the subscribed-topic snapshot; ``consumer_group_members`` each member's epochs,
subscription, reconciliation state and current/target assignments (JSON
``{topic id: [partitions]}``). Offsets stay in ``group_offsets``.

Revision ID: 0010
Revises: 0009
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "consumer_groups",
        sa.Column("group_id", sa.String(length=255), primary_key=True),
        sa.Column("group_epoch", sa.Integer(), nullable=False),
        sa.Column("assignment_epoch", sa.Integer(), nullable=False),
        sa.Column("assignor", sa.String(length=64), nullable=True),
        sa.Column("subscribed", sa.Text(), nullable=False),
        sa.Column("coordinator_agent", sa.String(length=255), nullable=True),
        sa.Column("updated_at", sa.BigInteger(), nullable=False),
    )
    op.create_table(
        "consumer_group_members",
        sa.Column(
            "group_id", sa.String(length=255), sa.ForeignKey("consumer_groups.group_id"), primary_key=True
        ),
        sa.Column("member_id", sa.String(length=255), primary_key=True),
        sa.Column("instance_id", sa.String(length=255), nullable=True),
        sa.Column("rack_id", sa.String(length=255), nullable=True),
        sa.Column("client_id", sa.String(length=255), nullable=False),
        sa.Column("client_host", sa.String(length=255), nullable=False),
        sa.Column("member_epoch", sa.Integer(), nullable=False),
        sa.Column("previous_member_epoch", sa.Integer(), nullable=False),
        sa.Column("state", sa.String(length=32), nullable=False),
        sa.Column("rebalance_timeout_ms", sa.Integer(), nullable=False),
        sa.Column("server_assignor", sa.String(length=64), nullable=True),
        sa.Column("subscribed_topic_names", sa.Text(), nullable=False),
        sa.Column("subscribed_topic_regex", sa.Text(), nullable=True),
        sa.Column("assigned", sa.Text(), nullable=False),
        sa.Column("pending_revocation", sa.Text(), nullable=False),
        sa.Column("target", sa.Text(), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("consumer_group_members")
    op.drop_table("consumer_groups")
