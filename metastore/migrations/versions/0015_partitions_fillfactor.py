"""Postgres only: room on the partition rows' pages for HOT updates (issue 18).

Every group commit updates each partition row it touches (high watermark,
bytes), so at width - a 10,000-partition topic written evenly, where nearly
every group touches nearly every partition - the partition rows are updated
about as often as batch rows are inserted. Postgres can update a row in place
on its page, without a new entry in the primary key ("HOT"), only when the page
has room for the new version; at the default fill factor of 100 the rows of a
topic created in one insert fill their pages, so most updates were not HOT and
each inserted a primary-key entry at a scattered position: measured with
``python -m loadtest.reqcost --backend postgres-s3 --partitions 10000``,
23-25% of the updates were HOT at fill factor 100, 99.7-99.8% at 50. The
table is small (a row per partition), so leaving half of each page free costs
next to nothing.

``ALTER TABLE ... SET (fillfactor)`` takes effect for pages written from now
on (new topics and partitions, and pages filled again after VACUUM); existing
pages are not rewritten, which would lock the table.

Revision ID: 0015
Revises: 0014
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None

FILLFACTOR = 50


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(sa.text(f"ALTER TABLE partitions SET (fillfactor = {FILLFACTOR})"))


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(sa.text("ALTER TABLE partitions RESET (fillfactor)"))
