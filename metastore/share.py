"""Share groups (KIP-932): group rows, group configs and share-partition state.

The agent's share-partition logic (``agent.groups.share``) decides every state
change; the metastore only stores the result. A share partition is one row whose
in-flight records are JSON ranges (``[first, last, state, delivery count, lock
until ms, member]``), so a fetch of 500 records is one small row update, not 500.
``share_partition_cas`` writes only when the stored ``version`` is still the one
the caller read (compare-and-swap), so two agents acquiring from one share
partition never hand out the same record twice: the loser re-reads and retries.

Group configs (``share.record.lock.duration.ms`` and friends) are name/value
rows per group, set through IncrementalAlterConfigs on the GROUP resource.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import and_, delete, or_, select, update

from metastore import schema as s
from metastore.base import SqlBase
from metastore.types import InflightRange, ShareGroupRecord, SharePartitionState


def _ranges_json(ranges: Sequence[InflightRange]) -> str:
    return json.dumps([list(r) for r in ranges], separators=(",", ":"))


def _row_state(row: Any) -> SharePartitionState:
    return SharePartitionState(
        group_id=row.group_id,
        topic_id=row.topic_id,
        partition=row.partition,
        start_offset=row.start_offset,
        end_offset=row.end_offset,
        ranges=[InflightRange(*r) for r in json.loads(row.ranges)],
        state_epoch=row.state_epoch,
        version=row.version,
        updated_at_ms=row.updated_at,
    )


class ShareMixin(SqlBase):
    # -- share-partition state ---------------------------------------------------------

    async def share_partitions_load(
        self, group_id: str, keys: Sequence[tuple[uuid.UUID, int]] | None = None
    ) -> list[SharePartitionState]:
        """The stored share partitions of ``group_id`` (all, or those of ``keys``)."""
        c = s.share_partitions.c
        q = select(s.share_partitions).where(c.group_id == group_id)
        if keys is not None:
            if not keys:
                return []
            q = q.where(or_(*(and_(c.topic_id == t, c.partition == p) for t, p in keys)))
        async with self._read() as conn:
            rows = (await conn.execute(q.order_by(c.topic_id, c.partition))).all()
        return [_row_state(r) for r in rows]

    async def share_partition_cas(self, state: SharePartitionState, expected_version: int) -> bool:
        """Store ``state`` if the stored version is ``expected_version`` (0: no row yet).

        The stored version becomes ``expected_version + 1``. False when another
        writer got there first (the caller re-reads and decides again)."""
        c = s.share_partitions.c
        values = {
            "start_offset": state.start_offset,
            "end_offset": state.end_offset,
            "state_epoch": state.state_epoch,
            "version": expected_version + 1,
            "ranges": _ranges_json(state.ranges),
            "updated_at": self.now_ms(),
        }
        key = (state.group_id, state.topic_id, state.partition)
        async with self._write() as conn:
            if expected_version == 0:
                exists = (
                    await conn.execute(
                        select(c.version).where(
                            c.group_id == key[0], c.topic_id == key[1], c.partition == key[2]
                        )
                    )
                ).first()
                if exists is not None:
                    return False
                await conn.execute(
                    s.share_partitions.insert().values(
                        group_id=key[0], topic_id=key[1], partition=key[2], **values
                    )
                )
                return True
            res = await conn.execute(
                update(s.share_partitions)
                .where(
                    c.group_id == key[0],
                    c.topic_id == key[1],
                    c.partition == key[2],
                    c.version == expected_version,
                )
                .values(**values)
            )
            return bool(res.rowcount == 1)

    async def share_partitions_delete(
        self, group_id: str, keys: Sequence[tuple[uuid.UUID, int]] | None = None
    ) -> int:
        """Forget share partitions of ``group_id`` (all, or those of ``keys``)."""
        c = s.share_partitions.c
        q = delete(s.share_partitions).where(c.group_id == group_id)
        if keys is not None:
            if not keys:
                return 0
            q = q.where(or_(*(and_(c.topic_id == t, c.partition == p) for t, p in keys)))
        async with self._write() as conn:
            return int((await conn.execute(q)).rowcount or 0)

    # -- share groups -------------------------------------------------------------------

    async def share_group_save(self, group_id: str, group_epoch: int) -> None:
        """Insert or update the share group's row (its epoch only grows)."""
        c = s.share_groups.c
        now = self.now_ms()
        async with self._write() as conn:
            row = (await conn.execute(select(c.group_epoch).where(c.group_id == group_id))).first()
            if row is None:
                await conn.execute(
                    s.share_groups.insert().values(group_id=group_id, group_epoch=group_epoch, updated_at=now)
                )
            elif group_epoch > row.group_epoch:
                await conn.execute(
                    update(s.share_groups)
                    .where(c.group_id == group_id)
                    .values(group_epoch=group_epoch, updated_at=now)
                )

    async def share_groups_list(self) -> list[ShareGroupRecord]:
        async with self._read() as conn:
            rows = (await conn.execute(select(s.share_groups).order_by(s.share_groups.c.group_id))).all()
        return [ShareGroupRecord(r.group_id, r.group_epoch, r.updated_at) for r in rows]

    async def share_group_delete(self, group_id: str) -> bool:
        """Delete the group's row, its share partitions and its configs."""
        async with self._write() as conn:
            res = await conn.execute(delete(s.share_groups).where(s.share_groups.c.group_id == group_id))
            await conn.execute(delete(s.share_partitions).where(s.share_partitions.c.group_id == group_id))
            await conn.execute(delete(s.group_configs).where(s.group_configs.c.group_id == group_id))
            return bool(res.rowcount)

    # -- group configs ------------------------------------------------------------------

    async def group_config_get(self, group_id: str) -> dict[str, str]:
        c = s.group_configs.c
        async with self._read() as conn:
            rows = (await conn.execute(select(c.name, c.value).where(c.group_id == group_id))).all()
        return {r.name: r.value for r in rows}

    async def group_config_alter(
        self, group_id: str, set_values: Mapping[str, str], delete_names: Sequence[str] = ()
    ) -> None:
        """Set and delete configs of ``group_id`` in one transaction."""
        c = s.group_configs.c
        names = list(set_values) + list(delete_names)
        async with self._write() as conn:
            if names:
                await conn.execute(
                    delete(s.group_configs).where(c.group_id == group_id, c.name.in_(names))
                )
            for name, value in set_values.items():
                await conn.execute(
                    s.group_configs.insert().values(group_id=group_id, name=name, value=value)
                )
