"""Classic-protocol members of a consumer group, and the online migrations.

Where it sits: a base of :class:`.coordinator.ConsumerGroupCoordinator`. The
JoinGroup / SyncGroup / Heartbeat / LeaveGroup handlers ask it first; for a
group that is a (non-empty) consumer group it answers them as Kafka 4.x's
group coordinator does (``classicGroupJoinToConsumerGroup`` and friends), else
it returns None and the classic coordinator answers.

A classic member is reconciled only when it joins: its JoinGroup carries its
subscription and the partitions it owns (ConsumerProtocolSubscription), the
coordinator moves it one step towards its target (:func:`.model.next_assignment`)
and answers at once with its member epoch as generation, no leader; SyncGroup
hands it its current assignment. Its Heartbeat answers REBALANCE_IN_PROGRESS
while it must rejoin (the group epoch moved past its epoch, it has partitions to
revoke, or partitions it waited for are free), and a member that does not rejoin
(or sync after joining) within its rebalance timeout is fenced, as is one silent
for its own session timeout. :mod:`.migration` has the conversions.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

from agent.groups.consumer.migration import (
    encode_assignment,
    from_classic,
    owned_partitions,
    parse_subscription,
    to_classic,
)
from agent.groups.consumer.model import ConsumerGroup, Member, MemberState, next_assignment
from agent.groups.state import CONSUMER_PROTOCOL, GroupState, JoinResult, SyncResult
from kafka_protocol.errors import ErrorCode
from metastore import MetastoreError
from metastore.types import GroupRecord

if TYPE_CHECKING:
    from agent.groups.consumer.assignors import TopicMeta
    from agent.groups.consumer.config import ConsumerGroupConfig
    from agent.groups.coordinator import GroupCoordinator, JoinRequest
    from agent.groups.state import Group
    from agent.groups.timers import Timers
    from metastore import Metastore

log = logging.getLogger(__name__)


def _supported(g: ConsumerGroup, names: list[str]) -> bool:
    """Kafka's supportsClassicProtocols: one of ``names`` every classic member supports."""
    common = set(names)
    for m in g.members.values():
        if m.classic_protocols is not None:
            common &= {n for n, _ in m.classic_protocols}
    return bool(common)


def waiting_on_unreleased(g: ConsumerGroup, m: Member) -> bool:
    """A member in ``unreleased_partitions`` some of whose target partitions another member still holds."""
    if m.state is not MemberState.UNRELEASED:
        return False
    holders = g.owner_of()
    return any(
        p not in m.assigned.get(t, set()) and holders.get((t, p), m.member_id) != m.member_id
        for t, ps in m.target.items()
        for p in ps
    )


class _Coordinator(Protocol):
    """What :class:`ClassicMembers` uses of the coordinator it is a base of."""

    config: ConsumerGroupConfig
    meta: Metastore
    timers: Timers
    classic: GroupCoordinator | None
    _groups: dict[str, ConsumerGroup]
    _switching: dict[str, GroupRecord]
    _downgrades: dict[str, asyncio.Task[None]]
    _tasks: set[asyncio.Task[None]]
    _topics: tuple[float, dict[str, TopicMeta]] | None

    def owns(self, group_id: str) -> bool: ...
    async def group(self, group_id: str) -> ConsumerGroup | None: ...
    async def _save(self, g: ConsumerGroup) -> None: ...
    async def _topic_map(self) -> dict[str, TopicMeta]: ...
    def _lock(self, group_id: str) -> asyncio.Lock: ...
    def _touch(self, g: ConsumerGroup, m: Member) -> None: ...
    def _expire(self, g: ConsumerGroup, member_id: str, why: str) -> None: ...
    def _remove(self, g: ConsumerGroup, member_id: str) -> None: ...
    def _cancel_timers(self, g: ConsumerGroup, member_id: str) -> None: ...
    def _check_metadata(self, g: ConsumerGroup, topics: dict[str, TopicMeta]) -> bool: ...
    def _assign(self, g: ConsumerGroup, topics: dict[str, TopicMeta]) -> None: ...
    def release(self, group_id: str) -> None: ...
    def _find(
        self, g: ConsumerGroup, member_id: str, instance: str | None
    ) -> tuple[Member | None, int]: ...
    async def _consumer_group_for_classic(self, group_id: str) -> ConsumerGroup | None: ...
    def _classic_join(
        self, g: ConsumerGroup, req: JoinRequest, topics: dict[str, TopicMeta]
    ) -> JoinResult: ...
    def _ask_rejoin(self, g: ConsumerGroup, m: Member) -> None: ...
    def _should_downgrade(self, g: ConsumerGroup, leaving: str) -> bool: ...
    def _downgrade(self, g: ConsumerGroup, leaving: str, *, rebalance: bool = True) -> None: ...
    async def _persist_downgrade(self, cg: Group) -> None: ...


class ClassicMembers:
    """JoinGroup/SyncGroup/Heartbeat/LeaveGroup against consumer groups."""

    def _find(
        self: _Coordinator, g: ConsumerGroup, member_id: str, instance: str | None
    ) -> tuple[Member | None, int]:
        if instance is not None:
            holder = g.static_members.get(instance)
            if holder is None:
                return None, ErrorCode.UNKNOWN_MEMBER_ID
            if member_id and holder != member_id:
                return None, ErrorCode.FENCED_INSTANCE_ID
            member_id = holder
        m = g.members.get(member_id)
        if m is None or not m.classic:
            return None, ErrorCode.UNKNOWN_MEMBER_ID
        return m, ErrorCode.NONE

    async def _consumer_group_for_classic(
        self: _Coordinator, group_id: str
    ) -> ConsumerGroup | None:
        if not group_id or not self.owns(group_id):
            return None
        held = self.classic.group_state(group_id) if self.classic is not None else None
        if held is not None and held.members:
            return None  # a non-empty classic group in memory: never a consumer group too (no metastore read)
        return await self.group(group_id)

    # -- JoinGroup ------------------------------------------------------------------

    async def classic_join(self: _Coordinator, req: JoinRequest) -> JoinResult | None:
        """A JoinGroup for a consumer group (None: not one; an empty consumer group
        is dropped so the classic coordinator takes the id, as in Kafka)."""
        g = await self._consumer_group_for_classic(req.group_id)
        if g is None:
            return None
        if not g.members:
            g.dead = True
            await self._save(g)
            self._groups.pop(req.group_id, None)
            return None
        try:
            topics = await self._topic_map()
        except MetastoreError:
            return JoinResult(ErrorCode.COORDINATOR_NOT_AVAILABLE, req.member_id)
        if self._groups.get(req.group_id) is not g:
            return JoinResult(
                ErrorCode.REBALANCE_IN_PROGRESS, req.member_id
            )  # converted meanwhile: retry
        before = g.to_record(None)
        holder = g.static_members.get(req.group_instance_id) if req.group_instance_id is not None else None
        replacing = holder if not req.member_id and holder in g.members and not g.members[holder].classic else None
        res = self._classic_join(g, req, topics)
        if (
            res.error == ErrorCode.NONE
            and replacing is not None
            and all(m.classic for m in g.members.values())
            and self.config.migration_policy.downgrade
            and self.classic is not None
            and self._topics is not None
        ):
            # Kafka's validateOnlineDowngradeWithReplacedMemberId: a classic static
            # member replaced the last consumer-protocol one; no rebalance.
            self._downgrade(g, "", rebalance=False)
            await asyncio.wait([self._downgrades[g.group_id]], timeout=5.0)  # written (or retrying)
            return res
        if res.error == ErrorCode.NONE and g.to_record(None) != before:
            try:
                await self._save(g)
            except MetastoreError as e:
                log.warning("consumer group %r: classic join not saved: %s", g.group_id, e)
                return JoinResult(ErrorCode.COORDINATOR_NOT_AVAILABLE, req.member_id)
        return res

    def _classic_join(
        self: _Coordinator, g: ConsumerGroup, req: JoinRequest, topics: dict[str, TopicMeta]
    ) -> JoinResult:
        names = [n for n, _ in req.protocols]
        if req.protocol_type != CONSUMER_PROTOCOL or not _supported(g, names):
            return JoinResult(ErrorCode.INCONSISTENT_GROUP_PROTOCOL, req.member_id)
        sub = parse_subscription(req.protocols[0][1])
        if sub is None:
            return JoinResult(ErrorCode.INCONSISTENT_GROUP_PROTOCOL, req.member_id)
        unknown = not req.member_id
        member_id = req.member_id or str(uuid.uuid4())
        instance = req.group_instance_id
        holder = g.static_members.get(instance) if instance is not None else None
        if member_id not in g.members and holder is None and len(g.members) >= self.config.max_size:
            return JoinResult(ErrorCode.GROUP_MAX_SIZE_REACHED, req.member_id)
        if unknown and instance is None and req.require_known_member_id:
            return JoinResult(
                ErrorCode.MEMBER_ID_REQUIRED, member_id
            )  # KIP-394, as Kafka: no pending list
        epoch = g.group_epoch
        if holder is not None and holder != member_id:
            if not unknown:
                return JoinResult(ErrorCode.FENCED_INSTANCE_ID, req.member_id)
            # A static member restarted: the new member id takes the old one's place.
            old = g.members.pop(holder)
            self._cancel_timers(g, holder)
            old.member_id = member_id
            g.members[member_id] = old
            g.static_members[instance] = member_id  # type: ignore[index]
        m = g.members.get(member_id)
        if m is None:
            m = g.members[member_id] = Member(
                member_id, rebalance_timeout_ms=req.rebalance_timeout_ms
            )
            g.group_epoch += 1
        if instance is not None:
            m.instance_id = instance
            g.static_members[instance] = member_id
        m.rack_id = sub.rack_id
        m.rebalance_timeout_ms = req.rebalance_timeout_ms
        m.client_id, m.client_host = req.client_id, req.client_host
        m.classic_session_timeout_ms, m.classic_protocols = (
            req.session_timeout_ms,
            list(req.protocols),
        )
        changed = g.group_epoch != epoch
        wanted = sorted(set(sub.topics))
        if (
            wanted != m.subscribed_topic_names
            or m.subscribed_topic_regex is not None
            or m.server_assignor is not None
        ):
            m.subscribed_topic_names, m.subscribed_topic_regex, m.server_assignor = (
                wanted,
                None,
                None,
            )
            changed = True
        if self._check_metadata(g, topics) or changed:
            g.group_epoch = epoch + 1
        if g.group_epoch > g.assignment_epoch:
            self._assign(g, topics)
        next_assignment(g, m, owned_partitions(sub, topics))
        self.timers.cancel(("join", g.group_id, member_id))
        self.timers.cancel(("rebalance", g.group_id, member_id))
        self._touch(g, m)
        self.timers.schedule(
            ("sync", g.group_id, member_id), m.rebalance_timeout_ms / 1000,
            lambda: self._expire(g, member_id, "the classic member did not sync in time"),
        )  # fmt: skip
        return JoinResult(
            ErrorCode.NONE,
            member_id,
            m.member_epoch,
            CONSUMER_PROTOCOL,
            req.protocols[0][0],
            "",
            [],
        )

    # -- SyncGroup / Heartbeat / LeaveGroup -------------------------------------------

    async def classic_sync(
        self: _Coordinator, group_id: str, generation: int, member_id: str, instance: str | None,
        protocol_type: str | None, protocol_name: str | None,
    ) -> SyncResult | None:  # fmt: skip
        g = await self._consumer_group_for_classic(group_id)
        if g is None or not g.members:
            return None
        m, error = self._find(g, member_id, instance)
        if m is None:
            return SyncResult(error)
        assert m.classic_protocols is not None
        if generation != m.member_epoch:
            return SyncResult(ErrorCode.ILLEGAL_GENERATION)
        names = [n for n, _ in m.classic_protocols]
        if (protocol_type is not None and protocol_type != CONSUMER_PROTOCOL) or (
            protocol_name is not None and protocol_name not in names
        ):
            return SyncResult(ErrorCode.INCONSISTENT_GROUP_PROTOCOL)
        if g.group_epoch > m.member_epoch and m.state is not MemberState.UNREVOKED:
            self._ask_rejoin(g, m)
            return SyncResult(ErrorCode.REBALANCE_IN_PROGRESS)
        try:
            topics = await self._topic_map()
        except MetastoreError:
            return SyncResult(ErrorCode.COORDINATOR_NOT_AVAILABLE)
        self.timers.cancel(("sync", g.group_id, m.member_id))
        self._touch(g, m)
        by_id = {tm.id: name for name, tm in topics.items()}
        data = encode_assignment(m.assigned, by_id, m.classic_protocols[0][1])
        return SyncResult(ErrorCode.NONE, data, CONSUMER_PROTOCOL, protocol_name or names[0])

    async def classic_heartbeat(
        self: _Coordinator,
        group_id: str,
        generation: int,
        member_id: str,
        instance: str | None,
    ) -> int | None:
        g = await self._consumer_group_for_classic(group_id)
        if g is None or not g.members:
            return None
        m, error = self._find(g, member_id, instance)
        if m is None:
            return error
        if generation != m.member_epoch:
            return ErrorCode.ILLEGAL_GENERATION
        self._touch(g, m)
        if (
            m.member_epoch < g.group_epoch
            or m.state is MemberState.UNREVOKED
            or (m.state is MemberState.UNRELEASED and not waiting_on_unreleased(g, m))
        ):
            self._ask_rejoin(g, m)
            return ErrorCode.REBALANCE_IN_PROGRESS
        return ErrorCode.NONE

    def _ask_rejoin(self: _Coordinator, g: ConsumerGroup, m: Member) -> None:
        key = ("join", g.group_id, m.member_id)
        if not self.timers.is_scheduled(key):
            mid = m.member_id
            self.timers.schedule(key, m.rebalance_timeout_ms / 1000,
                                 lambda: self._expire(g, mid, "the classic member did not rejoin in time"))  # fmt: skip

    async def classic_leave(
        self: _Coordinator, group_id: str, members: Sequence[tuple[str, str | None]]
    ) -> tuple[int, list[int]] | None:
        g = await self._consumer_group_for_classic(group_id)
        if g is None or not g.members:
            return None
        errors: list[int] = []
        left = False
        for member_id, instance in members:
            m, error = self._find(g, member_id, instance)
            if m is None:
                errors.append(error)
                continue
            log.info("consumer group %r: classic member %s left", g.group_id, m.member_id)
            self._remove(g, m.member_id)
            errors.append(ErrorCode.NONE)
            left = True
        if left:
            try:
                await self._save(g)
            except MetastoreError as e:
                log.warning("consumer group %r: leave not saved: %s", g.group_id, e)
                return ErrorCode.COORDINATOR_NOT_AVAILABLE, [
                    ErrorCode.COORDINATOR_NOT_AVAILABLE
                ] * len(members)
        return ErrorCode.NONE, errors

    # -- upgrade and downgrade ------------------------------------------------------

    async def _upgrade(
        self: _Coordinator, group_id: str, topics: dict[str, TopicMeta]
    ) -> ConsumerGroup | int | None:
        """A ConsumerGroupHeartbeat joins group ``group_id`` that is no consumer
        group: None when there is no non-empty classic group of that id (a new
        consumer group), the converted group, or GROUP_ID_NOT_FOUND (refused)."""
        if self.classic is None:
            return None
        cg = await self.classic.group_for_migration(group_id)
        if cg is None:
            return None
        if (
            not self.config.migration_policy.upgrade
            or cg.protocol_type != CONSUMER_PROTOCOL
            or len(cg.members) > self.config.max_size
        ):
            log.info("consumer group %r: classic group not upgraded (policy %s, protocol type %r, %d members)",
                     group_id, self.config.migration_policy.value, cg.protocol_type, len(cg.members))  # fmt: skip
            return ErrorCode.GROUP_ID_NOT_FOUND
        if group_id in self._groups:
            return self._groups[group_id]
        g = from_classic(cg, topics)
        if g is None:
            log.info(
                "consumer group %r: classic group not upgraded (malformed embedded protocol)",
                group_id,
            )
            return ErrorCode.GROUP_ID_NOT_FOUND
        log.info(
            "group %r: upgraded from classic (generation %d, %d members) to consumer",
            group_id,
            cg.generation,
            len(g.members),
        )
        self.classic.hand_over(group_id)
        self._groups[group_id] = g
        for m in g.members.values():
            self._touch(g, m)
        self._switching[group_id] = GroupRecord(
            group_id,
            GroupState.EMPTY.value,
            cg.generation,
            CONSUMER_PROTOCOL,
            None,
            None,
            [],
            self.config.agent_id,
        )
        return g

    def _should_downgrade(self: _Coordinator, g: ConsumerGroup, leaving: str) -> bool:
        m = g.members.get(leaving)
        others = [x for x in g.members.values() if x.member_id != leaving]
        return (
            m is not None
            and not m.classic
            and bool(others)
            and all(x.classic for x in others)
            and self.config.migration_policy.downgrade
            and self.classic is not None
            and self._topics is not None
        )

    def _downgrade(self: _Coordinator, g: ConsumerGroup, leaving: str, *, rebalance: bool = True) -> None:
        """The last consumer-protocol member leaves: the classic members become a
        classic group (in memory now; persisted by :meth:`_persist_downgrade`).
        Without ``rebalance`` (a classic static member replaced the last
        consumer-protocol one, taking its assignment) the group stays Stable."""
        assert self.classic is not None and self._topics is not None
        names = {tm.id: name for name, tm in self._topics[1].items()}
        cg = to_classic(g, leaving, names)
        log.info("group %r: downgraded from consumer (epoch %d) to classic with %d members",
                 g.group_id, g.group_epoch, len(cg.members))  # fmt: skip
        self.release(g.group_id)
        self.classic.adopt(cg, rebalance=rebalance)
        task = asyncio.get_running_loop().create_task(self._persist_downgrade(cg))
        self._downgrades[g.group_id] = task
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _persist_downgrade(self: _Coordinator, cg: Group) -> None:
        """Write the downgrade (retried while the metastore is unreachable and this
        agent still runs the classic group: until it is written, a successor would
        find the consumer group)."""
        assert self.classic is not None
        delay = 0.5
        try:
            while True:
                try:
                    async with self._lock(cg.group_id):
                        await self.meta.switch_group_protocol(cg.to_record(self.config.agent_id), None)
                    self.classic.persist(cg)  # whatever changed meanwhile, on top
                    return
                except MetastoreError as e:
                    if self.classic.group_state(cg.group_id) is not cg:
                        log.warning("group %r: downgrade not persisted (the group moved on): %s", cg.group_id, e)
                        return
                    log.warning("group %r: downgrade not persisted yet (retrying in %.1f s): %s", cg.group_id, delay, e)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 10.0)
        finally:
            if self._downgrades.get(cg.group_id) is asyncio.current_task():
                del self._downgrades[cg.group_id]
