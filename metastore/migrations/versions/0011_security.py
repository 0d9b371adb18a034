"""Security (issue 15): every listener's advertised endpoint, SCRAM credentials.

``agents.endpoints`` holds ``NAME://host:port,...`` for an agent with several
listeners (NULL: one listener, ``host``/``port``), so every agent answers
Metadata with the endpoints of the listener the request arrived on.
``scram_credentials`` holds RFC 5802 salted credentials (salt, StoredKey,
ServerKey, iterations; never the password) per user and mechanism.

Revision ID: 0011
Revises: 0010
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("agents") as batch:
        batch.add_column(sa.Column("endpoints", sa.Text(), nullable=True))
    op.create_table(
        "scram_credentials",
        sa.Column("user_name", sa.String(length=255), primary_key=True),
        sa.Column("mechanism", sa.String(length=32), primary_key=True),
        sa.Column("salt", sa.LargeBinary(), nullable=False),
        sa.Column("stored_key", sa.LargeBinary(), nullable=False),
        sa.Column("server_key", sa.LargeBinary(), nullable=False),
        sa.Column("iterations", sa.Integer(), nullable=False),
        sa.Column("updated_at", sa.BigInteger(), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("scram_credentials")
    with op.batch_alter_table("agents") as batch:
        batch.drop_column("endpoints")
