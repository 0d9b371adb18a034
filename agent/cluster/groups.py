"""Group coordination spread over the ring: only the ring owner of a group runs it.

Where it sits: the broker's ``groups`` object. FindCoordinator answers with the
ring owner of the group id (over all live agents); this subclass of
:class:`~agent.groups.GroupCoordinator` answers NOT_COORDINATOR to group requests
for groups it does not own (clients then look the coordinator up again), and
drops its in-memory copy of a group when the ring moves the group elsewhere, so
that if the group later comes back it is loaded fresh from the metastore (which
the coordinator persists generation, members, assignments and offsets to) rather
than served from a stale copy. Offset reads and group listings are served by any
agent: they come from the metastore.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Sequence

from agent.groups import GroupCoordinator, JoinRequest, JoinResult, SyncResult
from agent.groups.coordinator import _resolve
from agent.groups.state import Group, GroupDescription
from kafka_protocol.errors import ErrorCode
from metastore.types import GroupOffset

log = logging.getLogger(__name__)

NOT_COORDINATOR = ErrorCode.NOT_COORDINATOR


class ClusteredGroupCoordinator(GroupCoordinator):
    owns: Callable[[str], bool] = staticmethod(lambda _group_id: True)

    def _not_mine(self, group_id: str) -> bool:
        if self.owns(group_id):
            return False
        self.release(group_id)
        return True

    def release(self, group_id: str) -> None:
        """Forget the in-memory group (its owner is elsewhere now): waiting members
        get NOT_COORDINATOR, its timers stop, and no further write of it is made."""
        g = self._groups.pop(group_id, None)
        if g is None:
            return
        log.info("group %r moved to another agent; dropping the local copy", group_id)
        g.dirty = False
        for m in g.members.values():
            _resolve(m.join_future, JoinResult(NOT_COORDINATOR, m.member_id))
            _resolve(m.sync_future, SyncResult(NOT_COORDINATOR))
            m.join_future = m.sync_future = None
        live = getattr(self.timers, "_live", {})
        for key in [k for k in live if isinstance(k, tuple) and len(k) > 1 and k[1] == group_id]:
            self.timers.cancel(key)

    def release_unowned(self) -> None:
        for group_id in [gid for gid in self._groups if not self.owns(gid)]:
            self.release(group_id)

    # -- the group requests -----------------------------------------------------------

    async def join(self, req: JoinRequest) -> JoinResult:
        if req.group_id and self._not_mine(req.group_id):
            return JoinResult(NOT_COORDINATOR, req.member_id)
        return await super().join(req)

    async def sync(
        self,
        group_id: str,
        generation: int,
        member_id: str,
        group_instance_id: str | None,
        assignments: dict[str, bytes],
        protocol_type: str | None = None,
        protocol_name: str | None = None,
    ) -> SyncResult:
        if self._not_mine(group_id):
            return SyncResult(NOT_COORDINATOR)
        return await super().sync(
            group_id,
            generation,
            member_id,
            group_instance_id,
            assignments,
            protocol_type,
            protocol_name,
        )

    async def heartbeat(
        self, group_id: str, generation: int, member_id: str, group_instance_id: str | None
    ) -> int:
        if self._not_mine(group_id):
            return NOT_COORDINATOR
        return await super().heartbeat(group_id, generation, member_id, group_instance_id)

    async def leave(
        self, group_id: str, members: Sequence[tuple[str, str | None]]
    ) -> tuple[int, list[int]]:
        if self._not_mine(group_id):
            return NOT_COORDINATOR, [NOT_COORDINATOR] * len(members)
        return await super().leave(group_id, members)

    async def commit_offsets(
        self,
        group_id: str,
        generation: int,
        member_id: str,
        group_instance_id: str | None,
        offsets: Sequence[GroupOffset],
    ) -> int:
        if self._not_mine(group_id):
            return NOT_COORDINATOR
        return await super().commit_offsets(
            group_id, generation, member_id, group_instance_id, offsets
        )

    async def delete_offsets(
        self, group_id: str, partitions: Sequence[tuple[str, uuid.UUID, int]]
    ) -> tuple[int, list[int]]:
        if self._not_mine(group_id):
            return NOT_COORDINATOR, []
        return await super().delete_offsets(group_id, partitions)

    async def delete_group(self, group_id: str) -> int:
        if self._not_mine(group_id):
            return NOT_COORDINATOR
        return await super().delete_group(group_id)

    async def describe(self, group_id: str) -> GroupDescription | None:
        if self.owns(group_id):
            return await super().describe(group_id)
        self.release(group_id)
        # Not ours: describe what the owner last persisted, without keeping a copy.
        rec = await self.meta.load_group(group_id)
        if rec is None:
            return None
        self._groups[group_id] = Group.from_record(rec)
        try:
            return await super().describe(group_id)  # finds it in memory: no await inside
        finally:
            self._groups.pop(group_id, None)
