"""KIP-848 consumer groups: the group's epochs and its members' assignments.

Where it sits: the agent's consumer-group coordinator
(:mod:`agent.groups.consumer`) keeps a group in memory while it owns it and
writes the whole group here after every change; a new owner (ring change, agent
failure) loads it and continues at the same group, assignment and member
epochs. ``save_consumer_group`` replaces the members in the same transaction as
the group row, so a reader never sees one epoch's row with another's members.
Committed offsets stay in ``group_offsets`` (:mod:`metastore.groups`); the group
id names one group, either classic (``groups``) or consumer (this table).

Online migration (issue 16): a consumer group may hold classic-protocol members
(their session timeout and protocols in ``classic``), and
``switch_group_protocol`` moves a group from one table to the other in one
transaction (the classic row stays, emptied, while offsets hang off it).
"""

from __future__ import annotations

import base64
import json
import uuid
from typing import Any

from sqlalchemy import delete, select
from sqlalchemy.ext.asyncio import AsyncConnection

from metastore import schema as s
from metastore.groups import GroupsMixin
from metastore.types import ConsumerGroupRecord, ConsumerMemberRecord, GroupRecord


def _dump(assignment: dict[uuid.UUID, list[int]]) -> str:
    return json.dumps({str(t): sorted(ps) for t, ps in sorted(assignment.items(), key=lambda kv: str(kv[0]))})


def _load(text: str) -> dict[uuid.UUID, list[int]]:
    return {uuid.UUID(t): [int(p) for p in ps] for t, ps in json.loads(text).items()}


def _dump_classic(mem: ConsumerMemberRecord) -> str | None:
    if mem.classic_session_timeout_ms is None:
        return None
    protocols = [[name, base64.b64encode(meta).decode()] for name, meta in mem.classic_protocols or []]
    return json.dumps({"session_timeout_ms": mem.classic_session_timeout_ms, "protocols": protocols})


def _member(r: Any) -> ConsumerMemberRecord:
    classic = json.loads(r.classic) if r.classic else None
    return ConsumerMemberRecord(
        member_id=r.member_id,
        instance_id=r.instance_id,
        rack_id=r.rack_id,
        client_id=r.client_id,
        client_host=r.client_host,
        member_epoch=r.member_epoch,
        previous_member_epoch=r.previous_member_epoch,
        state=r.state,
        rebalance_timeout_ms=r.rebalance_timeout_ms,
        server_assignor=r.server_assignor,
        subscribed_topic_names=list(json.loads(r.subscribed_topic_names)),
        subscribed_topic_regex=r.subscribed_topic_regex,
        assigned=_load(r.assigned),
        pending_revocation=_load(r.pending_revocation),
        target=_load(r.target),
        classic_session_timeout_ms=None if classic is None else int(classic["session_timeout_ms"]),
        classic_protocols=None
        if classic is None
        else [(str(name), base64.b64decode(meta)) for name, meta in classic["protocols"]],
    )


class ConsumerGroupsMixin(GroupsMixin):
    async def load_consumer_group(self, group_id: str) -> ConsumerGroupRecord | None:
        """The persisted consumer group ``group_id`` with its members, or None."""
        g, m = s.consumer_groups.c, s.consumer_group_members.c
        async with self._read() as conn:
            row = (await conn.execute(select(s.consumer_groups).where(g.group_id == group_id))).first()
            if row is None:
                return None
            rows = await conn.execute(
                select(s.consumer_group_members).where(m.group_id == group_id).order_by(m.member_id)
            )
            return ConsumerGroupRecord(
                group_id=row.group_id,
                group_epoch=row.group_epoch,
                assignment_epoch=row.assignment_epoch,
                assignor=row.assignor,
                subscribed={str(k): int(v) for k, v in json.loads(row.subscribed).items()},
                members=[_member(r) for r in rows],
                coordinator_agent=row.coordinator_agent,
                updated_at_ms=row.updated_at,
            )

    async def save_consumer_group(self, group: ConsumerGroupRecord) -> None:
        """Insert or replace ``group`` and all of its members in one transaction."""
        async with self._write() as conn:
            await self._save_consumer_group(conn, group)

    async def switch_group_protocol(self, classic: GroupRecord, consumer: ConsumerGroupRecord | None) -> None:
        """One transaction for an online migration of ``classic.group_id``: the
        classic group row becomes ``classic`` and the consumer group becomes
        ``consumer`` (None: removed). An upgrade passes the emptied classic row
        and the new consumer group; a downgrade the classic group and None."""
        if consumer is not None and consumer.group_id != classic.group_id:
            raise ValueError("switch_group_protocol: two different group ids")
        async with self._write() as conn:
            await self._save_group(conn, classic)
            if consumer is None:
                await self._delete_consumer_group(conn, classic.group_id)
            else:
                await self._save_consumer_group(conn, consumer)

    async def _save_consumer_group(self, conn: AsyncConnection, group: ConsumerGroupRecord) -> None:
        values = {
            "group_id": group.group_id,
            "group_epoch": group.group_epoch,
            "assignment_epoch": group.assignment_epoch,
            "assignor": group.assignor,
            "subscribed": json.dumps(dict(sorted(group.subscribed.items()))),
            "coordinator_agent": group.coordinator_agent,
            "updated_at": self.now_ms(),
        }
        stmt = self._insert(s.consumer_groups).values(**values)
        stmt = stmt.on_conflict_do_update(
            index_elements=[s.consumer_groups.c.group_id],
            set_={k: v for k, v in values.items() if k != "group_id"},
        )
        members = s.consumer_group_members
        await conn.execute(stmt)
        await conn.execute(delete(members).where(members.c.group_id == group.group_id))
        if group.members:
            await conn.execute(
                members.insert(),
                [
                    {
                        "group_id": group.group_id,
                        "member_id": mem.member_id,
                        "instance_id": mem.instance_id,
                        "rack_id": mem.rack_id,
                        "client_id": mem.client_id,
                        "client_host": mem.client_host,
                        "member_epoch": mem.member_epoch,
                        "previous_member_epoch": mem.previous_member_epoch,
                        "state": mem.state,
                        "rebalance_timeout_ms": mem.rebalance_timeout_ms,
                        "server_assignor": mem.server_assignor,
                        "subscribed_topic_names": json.dumps(list(mem.subscribed_topic_names)),
                        "subscribed_topic_regex": mem.subscribed_topic_regex,
                        "assigned": _dump(mem.assigned),
                        "pending_revocation": _dump(mem.pending_revocation),
                        "target": _dump(mem.target),
                        "classic": _dump_classic(mem),
                    }
                    for mem in group.members
                ],
            )

    async def list_consumer_groups(self) -> list[ConsumerGroupRecord]:
        """Every persisted consumer group (without members), by id."""
        g = s.consumer_groups.c
        async with self._read() as conn:
            rows = await conn.execute(select(s.consumer_groups).order_by(g.group_id))
            return [
                ConsumerGroupRecord(
                    r.group_id,
                    r.group_epoch,
                    r.assignment_epoch,
                    r.assignor,
                    {str(k): int(v) for k, v in json.loads(r.subscribed).items()},
                    [],
                    r.coordinator_agent,
                    r.updated_at,
                )
                for r in rows
            ]

    async def delete_consumer_group(self, group_id: str) -> bool:
        """Remove the consumer group (its row and members; offsets stay, see
        ``delete_group``); False when there was none."""
        async with self._write() as conn:
            return await self._delete_consumer_group(conn, group_id)

    async def _delete_consumer_group(self, conn: AsyncConnection, group_id: str) -> bool:
        members = s.consumer_group_members
        await conn.execute(delete(members).where(members.c.group_id == group_id))
        res = await conn.execute(delete(s.consumer_groups).where(s.consumer_groups.c.group_id == group_id))
        return bool(res.rowcount)
