"""Share-group membership (KIP-932): heartbeats, epochs and the simple assignment.

Where it sits: ShareGroupHeartbeat and ShareGroupDescribe call
:class:`ShareGroupCoordinator` (one per broker, :func:`coordinator_for`) on the
group's coordinator agent (the ring owner, found with FindCoordinator as for
classic groups). Membership is in memory; the group row with its epoch is in the
metastore (``share_group_save``), so a new coordinator after a failure continues
from a higher epoch and lists the group. Members it does not know are answered
UNKNOWN_MEMBER_ID and rejoin with epoch 0, as the Java client does.

Assignment: every member is assigned every partition of every topic it
subscribes to (records, not partitions, are what share consumers split; each
record is acquired by one member at a time). The group epoch grows with every
membership, subscription or partition-count change; a member's epoch catches up
(and its new assignment is sent) on its next heartbeat. Members silent for
``share.session.timeout.ms`` are removed; their records come back when the
acquisition locks expire.
"""

from __future__ import annotations

import uuid
import weakref
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from agent.groups.share.manager import manager_for
from kafka_protocol.errors import ErrorCode

if TYPE_CHECKING:
    from agent.broker import Broker

Assignment = dict[uuid.UUID, list[int]]


@dataclass(slots=True)
class ShareMember:
    member_id: str
    client_id: str
    client_host: str
    rack_id: str | None
    subscribed: list[str]
    epoch: int = 0
    assignment: Assignment = field(default_factory=dict)
    last_seen_ms: int = 0


@dataclass(slots=True)
class ShareGroup:
    group_id: str
    epoch: int = 0
    assignment_epoch: int = 0
    members: dict[str, ShareMember] = field(default_factory=dict)

    @property
    def state(self) -> str:
        return "Stable" if self.members else "Empty"


@dataclass(slots=True)
class HeartbeatResult:
    error: int
    member_id: str | None = None
    member_epoch: int = -1
    interval_ms: int = 5000
    assignment: Assignment | None = None
    message: str | None = None


class ShareGroupCoordinator:
    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.groups: dict[str, ShareGroup] = {}

    async def _group(self, group_id: str) -> ShareGroup:
        g = self.groups.get(group_id)
        if g is None:
            stored = {r.group_id: r for r in await self.broker.meta.share_groups_list()}
            g = self.groups.setdefault(group_id, ShareGroup(group_id))
            if group_id in stored:
                g.epoch = max(g.epoch, stored[group_id].group_epoch)
        return g

    async def _assignment(self, topics: list[str]) -> Assignment:
        out: Assignment = {}
        for name in sorted(set(topics)):
            info = await self.broker.topic(name)
            if info is not None:
                out[info.id] = list(range(info.partitions))
        return out

    def _expire(self, g: ShareGroup, now: int, timeout_ms: int) -> bool:
        dead = [m for m in g.members.values() if now - m.last_seen_ms > timeout_ms]
        for m in dead:
            del g.members[m.member_id]
        return bool(dead)

    async def heartbeat(
        self,
        group_id: str,
        member_id: str,
        member_epoch: int,
        rack_id: str | None,
        subscribed: list[str] | None,
        client_id: str,
        client_host: str,
    ) -> HeartbeatResult:
        cfg = await manager_for(self.broker).configs(group_id)
        interval = int(cfg["share.heartbeat.interval.ms"])
        timeout = int(cfg["share.session.timeout.ms"])
        now = self.broker.clock.now_ms()
        g = await self._group(group_id)
        bumped = self._expire(g, now, timeout)
        if member_epoch == 0:
            if not subscribed:
                return HeartbeatResult(int(ErrorCode.INVALID_REQUEST), message="SubscribedTopicNames must be set on join")
            mid = member_id or str(uuid.uuid4())
            m = g.members.get(mid)
            if m is None:
                m = g.members[mid] = ShareMember(mid, client_id, client_host, rack_id, list(subscribed))
                bumped = True
            elif m.subscribed != list(subscribed):
                m.subscribed = list(subscribed)
                bumped = True
            m.epoch = 0
        elif member_epoch == -1:
            if g.members.pop(member_id, None) is not None:
                g.epoch += 1
                await self.broker.meta.share_group_save(group_id, g.epoch)
            return HeartbeatResult(0, member_id, -1, interval)
        else:
            got = g.members.get(member_id)
            if got is None:
                return HeartbeatResult(int(ErrorCode.UNKNOWN_MEMBER_ID), message="unknown member, rejoin")
            m = got
            if member_epoch != m.epoch:
                return HeartbeatResult(int(ErrorCode.FENCED_MEMBER_EPOCH), message="stale member epoch, rejoin")
            if subscribed is not None and list(subscribed) != m.subscribed:
                m.subscribed = list(subscribed)
                bumped = True
        if rack_id is not None:
            m.rack_id = rack_id
        m.last_seen_ms = now
        new_assignment = await self._assignment(m.subscribed)
        if new_assignment != m.assignment:
            bumped = True
        if bumped:
            g.epoch += 1
            await self.broker.meta.share_group_save(group_id, g.epoch)
        send = None
        if m.epoch != g.epoch or new_assignment != m.assignment:
            m.assignment = new_assignment
            m.epoch = g.epoch
            g.assignment_epoch = g.epoch
            send = new_assignment
        return HeartbeatResult(0, m.member_id, m.epoch, interval, send)

    async def describe(self, group_id: str) -> ShareGroup | None:
        if group_id not in self.groups:
            stored = {r.group_id for r in await self.broker.meta.share_groups_list()}
            if group_id not in stored:
                return None
        g = await self._group(group_id)
        cfg = await manager_for(self.broker).configs(group_id)
        if self._expire(g, self.broker.clock.now_ms(), int(cfg["share.session.timeout.ms"])):
            g.epoch += 1
        return g

    async def delete(self, group_id: str) -> int | None:
        """DeleteGroups of a share group: None if ``group_id`` is no share group,
        NON_EMPTY_GROUP while it has members, else 0 once its row, share
        partitions and configs are gone."""
        g = await self.describe(group_id)
        if g is None:
            return None
        if g.members:
            return int(ErrorCode.NON_EMPTY_GROUP)
        await self.broker.meta.share_group_delete(group_id)
        self.groups.pop(group_id, None)
        mgr = manager_for(self.broker)
        mgr.forget(group_id)
        mgr.forget_configs(group_id)
        return 0

    async def is_empty(self, group_id: str) -> bool:
        g = await self.describe(group_id)
        return g is None or not g.members


_COORDINATORS: weakref.WeakKeyDictionary[Any, ShareGroupCoordinator] = weakref.WeakKeyDictionary()


def coordinator_for(broker: Broker) -> ShareGroupCoordinator:
    c = _COORDINATORS.get(broker)
    if c is None:
        c = _COORDINATORS[broker] = ShareGroupCoordinator(broker)
    return c


SHARE_TYPE = "share"


async def list_share_groups(broker: Broker) -> list[tuple[str, str]]:
    """(group id, state) of every share group, as this agent's coordinator knows it."""
    coord = coordinator_for(broker)
    out = []
    for rec in await broker.meta.share_groups_list():
        g = coord.groups.get(rec.group_id)
        out.append((rec.group_id, g.state if g is not None else "Empty"))
    return out
