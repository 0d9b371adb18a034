"""Consumer groups: classic group state and committed offsets.

The agent's group coordinator keeps the join/sync barrier in memory and writes
here what another agent needs to take a group over: the group row (generation,
protocol, leader, state) with its members (metadata for the chosen protocol and
assignment), and every committed offset. ``save_group`` replaces the members of
a group in the same transaction as its row, so a reader never sees a generation
with the previous generation's members; given ``expected_generation`` it is a
compare-and-set on the stored generation (a missing row counts as generation 0),
so two agents that both think they coordinate a group (a ring move) can never
both write the same new generation: the loser learns it is stale and reloads. ``commit_offsets`` creates an ``Empty``
group row when none exists (a "simple" group that only stores offsets), so every
group with offsets can be listed and deleted.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

from sqlalchemy import and_, delete, or_, select, update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.ext.asyncio import AsyncConnection

from metastore import schema as s
from metastore.base import SqlBase
from metastore.types import GroupListing, GroupMemberRecord, GroupOffset, GroupRecord

EMPTY = "Empty"


class GroupsMixin(SqlBase):
    def _insert(self, table: Any) -> Any:
        return (pg_insert if self.dialect == "postgresql" else sqlite_insert)(table)

    # -- group state ------------------------------------------------------------------

    async def load_group(self, group_id: str) -> GroupRecord | None:
        """The persisted state of ``group_id`` with its members, or None."""
        g, m = s.groups.c, s.group_members.c
        async with self._read() as conn:
            row = (await conn.execute(select(s.groups).where(g.group_id == group_id))).first()
            if row is None:
                return None
            members = await conn.execute(
                select(s.group_members).where(m.group_id == group_id).order_by(m.member_id)
            )
            return GroupRecord(
                group_id=row.group_id,
                state=row.state,
                generation=row.generation,
                protocol_type=row.protocol_type,
                protocol=row.protocol,
                leader_id=row.leader_id,
                members=[
                    GroupMemberRecord(
                        r.member_id,
                        r.group_instance_id,
                        r.client_id,
                        r.client_host,
                        r.session_timeout_ms,
                        r.rebalance_timeout_ms,
                        None if r.metadata is None else bytes(r.metadata),
                        None if r.assignment is None else bytes(r.assignment),
                    )
                    for r in members
                ],
                coordinator_agent=row.coordinator_agent,
                updated_at_ms=row.updated_at,
            )

    async def save_group(self, group: GroupRecord, expected_generation: int | None = None) -> bool:
        """Insert or replace ``group`` and all of its members in one transaction.

        With ``expected_generation`` the write happens only if the stored row is
        at that generation (no row counts as 0); False when it did not happen."""
        async with self._write() as conn:
            return await self._save_group(conn, group, expected_generation)

    async def _save_group(
        self, conn: AsyncConnection, group: GroupRecord, expected_generation: int | None = None
    ) -> bool:
        values = {
            "group_id": group.group_id,
            "protocol_type": group.protocol_type,
            "protocol": group.protocol,
            "state": group.state,
            "generation": group.generation,
            "leader_id": group.leader_id,
            "coordinator_agent": group.coordinator_agent,
            "updated_at": self.now_ms(),
        }
        g = s.groups.c
        changes = {k: v for k, v in values.items() if k != "group_id"}
        if expected_generation is None or expected_generation == 0:
            # An upsert; conditional on the row still being at generation 0 when asked.
            stmt = self._insert(s.groups).values(**values)
            stmt = stmt.on_conflict_do_update(
                index_elements=[g.group_id],
                set_=changes,
                where=None if expected_generation is None else g.generation == 0,
            )
        else:
            stmt = update(s.groups).where(g.group_id == group.group_id, g.generation == expected_generation)
            stmt = stmt.values(**changes)
        if (await conn.execute(stmt)).rowcount == 0:
            return False
        await conn.execute(delete(s.group_members).where(s.group_members.c.group_id == group.group_id))
        if group.members:
            await conn.execute(
                s.group_members.insert(),
                [
                    {
                        "group_id": group.group_id,
                        "member_id": mem.member_id,
                        "group_instance_id": mem.group_instance_id,
                        "client_id": mem.client_id,
                        "client_host": mem.client_host,
                        "session_timeout_ms": mem.session_timeout_ms,
                        "rebalance_timeout_ms": mem.rebalance_timeout_ms,
                        "metadata": mem.metadata,
                        "assignment": mem.assignment,
                    }
                    for mem in group.members
                ],
            )
        return True

    async def list_groups(self) -> list[GroupListing]:
        """Every persisted group (state and protocol type only), by id."""
        g = s.groups.c
        async with self._read() as conn:
            rows = await conn.execute(
                select(g.group_id, g.protocol_type, g.state).order_by(g.group_id)
            )
            return [GroupListing(r.group_id, r.protocol_type, r.state) for r in rows]

    async def delete_group(self, group_id: str) -> bool:
        """Remove a group, its members and its offsets; False when nothing existed."""
        async with self._write() as conn:
            await conn.execute(
                delete(s.group_members).where(s.group_members.c.group_id == group_id)
            )
            offsets = await conn.execute(
                delete(s.group_offsets).where(s.group_offsets.c.group_id == group_id)
            )
            groups = await conn.execute(delete(s.groups).where(s.groups.c.group_id == group_id))
            return bool(groups.rowcount or offsets.rowcount)

    # -- offsets ----------------------------------------------------------------------

    async def _ensure_group_row(self, conn: AsyncConnection, group_id: str, now: int) -> None:
        stmt = self._insert(s.groups).values(
            group_id=group_id,
            protocol_type=None,
            protocol=None,
            state=EMPTY,
            generation=0,
            leader_id=None,
            coordinator_agent=None,
            updated_at=now,
        )
        await conn.execute(stmt.on_conflict_do_nothing(index_elements=[s.groups.c.group_id]))

    async def commit_offsets(self, group_id: str, offsets: Sequence[GroupOffset]) -> None:
        """Store ``offsets`` (replacing earlier commits of the same partitions)."""
        if not offsets:
            return
        now = self.now_ms()
        rows = {
            (o.topic_id, o.partition): {
                "group_id": group_id,
                "topic_id": o.topic_id,
                "partition": o.partition,
                "committed_offset": o.offset,
                "leader_epoch": o.leader_epoch,
                "metadata": o.metadata,
                "commit_time": now if o.commit_time_ms < 0 else o.commit_time_ms,
                "expire_time": o.expire_time_ms,
            }
            for o in offsets  # the last commit of a partition in one request wins
        }
        # Sorted: concurrent commits of overlapping partitions lock rows in one order.
        ordered = [rows[k] for k in sorted(rows, key=lambda k: (str(k[0]), k[1]))]
        async with self._write() as conn:
            await self._ensure_group_row(conn, group_id, now)
            await self._upsert_group_offsets(conn, ordered)

    async def _upsert_group_offsets(self, conn: AsyncConnection, rows: list[dict[str, Any]]) -> None:
        """Insert or overwrite committed offsets (``group_offsets`` rows), in the order given:
        callers pass rows sorted by (topic, partition) so concurrent commits lock in one order."""
        stmt = self._insert(s.group_offsets).values(rows)
        stmt = stmt.on_conflict_do_update(
            index_elements=[
                s.group_offsets.c.group_id,
                s.group_offsets.c.topic_id,
                s.group_offsets.c.partition,
            ],
            set_={
                c: stmt.excluded[c]
                for c in ("committed_offset", "leader_epoch", "metadata", "commit_time", "expire_time")
            },
        )
        await conn.execute(stmt)

    async def fetch_offsets(
        self, group_id: str, topic_ids: Sequence[uuid.UUID] | None = None
    ) -> list[GroupOffset]:
        """Committed offsets of ``group_id`` (of ``topic_ids`` only, when given),
        ordered by topic id and partition."""
        o = s.group_offsets.c
        query = select(s.group_offsets).where(o.group_id == group_id)
        if topic_ids is not None:
            if not topic_ids:
                return []
            query = query.where(o.topic_id.in_(list(set(topic_ids))))
        async with self._read() as conn:
            rows = await conn.execute(query.order_by(o.topic_id, o.partition))
            return [
                GroupOffset(
                    r.topic_id,
                    r.partition,
                    r.committed_offset,
                    r.leader_epoch,
                    r.metadata,
                    r.commit_time,
                    r.expire_time,
                )
                for r in rows
            ]

    async def delete_offsets(
        self, group_id: str, partitions: Sequence[tuple[uuid.UUID, int]]
    ) -> int:
        """Forget the committed offsets of ``partitions``; returns how many went."""
        if not partitions:
            return 0
        o = s.group_offsets.c
        wanted = sorted(set(partitions), key=lambda p: (str(p[0]), p[1]))
        # OR of pairs rather than a row-value IN: portable to both dialects' drivers.
        match = or_(*(and_(o.topic_id == t, o.partition == p) for t, p in wanted))
        async with self._write() as conn:
            result = await conn.execute(
                delete(s.group_offsets).where(o.group_id == group_id, match)
            )
            return int(result.rowcount)

