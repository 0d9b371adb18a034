"""The KIP-848 consumer-group coordinator: ConsumerGroupHeartbeat and friends.

Where it sits: the ConsumerGroupHeartbeat / ConsumerGroupDescribe handlers and
the offset, list, describe and delete handlers (for groups of this type) call
this object (``broker.consumer_groups``). Like the classic coordinator beside it
(:mod:`agent.groups.coordinator`), it answers only for the groups this agent
owns on the ring (else NOT_COORDINATOR), keeps them in memory and writes every
change to the metastore before answering, so a new owner continues at the same
group, assignment and member epochs. There is no barrier: each heartbeat
(1) validates the member and its epoch, (2) applies subscription changes and
bumps the group epoch, (3) recomputes the target assignment when the group
epoch passed the assignment epoch (:mod:`.assignors`), (4) moves the member one
step towards its target (:func:`.model.next_assignment`).

Classic-protocol members (online migration, issue 16) are served by the base
class :class:`.classic.ClassicMembers`: the first ConsumerGroupHeartbeat to a
non-empty classic group upgrades it, and when the last consumer-protocol member
leaves a group of classic members it is downgraded back (:mod:`.migration`).

Deadlines on the injectable clock (:class:`agent.groups.timers.Timers`): a
member not heard from for the session timeout is removed (a static member that
left with epoch -2 keeps its partitions until then); a member that has not
revoked its partitions within its rebalance timeout is removed. Both bump the
group epoch so the others get its partitions.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from agent.clock import Clock
from agent.groups.consumer.assignors import ASSIGNORS, DEFAULT_ASSIGNOR, Assignment, TopicMeta
from agent.groups.consumer.classic import ClassicMembers
from agent.groups.consumer.config import ConsumerGroupConfig
from agent.groups.consumer.metrics import refresh
from agent.groups.consumer.model import (
    LEAVE_EPOCH,
    STATIC_LEAVE_EPOCH,
    ConsumerGroup,
    GroupState,
    Member,
    MemberState,
    copy_assignment,
    next_assignment,
    same,
)
from agent.groups.consumer.subscriptions import check_regex, resolve
from agent.groups.timers import Timers
from kafka_protocol.errors import ErrorCode
from metastore import Metastore, MetastoreError
from metastore.types import GroupRecord, TopicInfo

if TYPE_CHECKING:
    from agent.groups.coordinator import GroupCoordinator

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Heartbeat:
    group_id: str
    member_id: str
    member_epoch: int
    instance_id: str | None = None
    rack_id: str | None = None
    rebalance_timeout_ms: int = -1
    subscribed_topic_names: list[str] | None = None
    subscribed_topic_regex: str | None = None
    server_assignor: str | None = None
    owned: Assignment | None = None
    client_id: str = ""
    client_host: str = ""
    version: int = 1


@dataclass(frozen=True, slots=True)
class HeartbeatResult:
    error: int
    message: str | None = None
    member_id: str | None = None
    member_epoch: int = 0
    heartbeat_interval_ms: int = 0
    assignment: Assignment | None = None


def _err(code: int, message: str | None = None) -> HeartbeatResult:
    return HeartbeatResult(int(code), message)


def validate(hb: Heartbeat) -> HeartbeatResult | None:
    """Kafka's request checks (INVALID_REQUEST and friends), before any state."""
    if not hb.group_id:
        return _err(ErrorCode.INVALID_REQUEST, "GroupId can't be empty.")
    if hb.instance_id == "":
        return _err(ErrorCode.INVALID_REQUEST, "InstanceId can't be empty.")
    if hb.rack_id == "":
        return _err(ErrorCode.INVALID_REQUEST, "RackId can't be empty.")
    if hb.member_epoch < STATIC_LEAVE_EPOCH:
        return _err(ErrorCode.INVALID_REQUEST, f"MemberEpoch {hb.member_epoch} is invalid.")
    if hb.member_epoch != 0 or hb.version >= 1:
        if not hb.member_id.strip():
            return _err(ErrorCode.INVALID_REQUEST, "MemberId can't be empty.")
    if len(hb.member_id) > 255 or len(hb.group_id) > 255 or len(hb.instance_id or "") > 255:
        return _err(ErrorCode.INVALID_REQUEST, "Id too long.")
    if hb.member_epoch == 0:
        if hb.rebalance_timeout_ms <= 0:
            return _err(ErrorCode.INVALID_REQUEST, "RebalanceTimeoutMs must be provided in first request.")
        if hb.owned:
            return _err(ErrorCode.INVALID_REQUEST, "TopicPartitions must be empty when (re-)joining.")
        if hb.subscribed_topic_names is None and hb.subscribed_topic_regex is None:
            return _err(ErrorCode.INVALID_REQUEST, "SubscribedTopicNames or SubscribedTopicRegex must be set in first request.")
    if hb.member_epoch == STATIC_LEAVE_EPOCH and hb.instance_id is None:
        return _err(ErrorCode.INVALID_REQUEST, "InstanceId can't be null.")
    if hb.server_assignor is not None and hb.server_assignor not in ASSIGNORS:
        return _err(ErrorCode.UNSUPPORTED_ASSIGNOR, f"ServerAssignor {hb.server_assignor} is not supported.")
    if hb.subscribed_topic_regex:
        why = check_regex(hb.subscribed_topic_regex)
        if why is not None:
            return _err(ErrorCode.INVALID_REGULAR_EXPRESSION, why[:200])
    return None


class ConsumerGroupCoordinator(ClassicMembers):
    def __init__(
        self,
        meta: Metastore,
        clock: Clock,
        topics: Callable[[], Awaitable[list[TopicInfo]]],
        config: ConsumerGroupConfig | None = None,
        owns: Callable[[str], bool] = lambda _g: True,
        classic: GroupCoordinator | None = None,
    ) -> None:
        self.meta = meta
        self.clock = clock
        self.config = config or ConsumerGroupConfig()
        self.owns = owns
        self._topics_source = topics
        self._topics: tuple[float, dict[str, TopicMeta]] | None = None
        self.classic = classic  # the classic coordinator, for online upgrades and downgrades
        self._switching: dict[str, GroupRecord] = {}  # upgraded, classic row not yet emptied
        self._downgrades: dict[str, asyncio.Task[None]] = {}
        self.timers = Timers(clock)
        self._groups: dict[str, ConsumerGroup] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        self._tasks: set[asyncio.Task[None]] = set()

    def start(self) -> None:
        self.timers.start()
        if self.config.metrics_interval_s > 0:
            self._metrics_task: asyncio.Task[None] | None = asyncio.get_running_loop().create_task(self._metrics_loop())

    def reported_groups(self) -> list[ConsumerGroup]:
        """The live groups this agent owns (what /metrics reports)."""
        return [g for gid, g in self._groups.items() if not g.dead and self.owns(gid)]

    async def _metrics_loop(self) -> None:
        while True:
            await asyncio.sleep(self.config.metrics_interval_s)
            try:
                await refresh(self)
            except MetastoreError as e:
                log.debug("consumer group metrics: %s", e)

    async def close(self) -> None:
        await self.timers.stop()
        task = getattr(self, "_metrics_task", None)
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        for t in self._downgrades.values():
            t.cancel()  # a downgrade write still retrying against an unreachable metastore
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)

    # -- loading, persisting, ownership ---------------------------------------------------

    def _lock(self, group_id: str) -> asyncio.Lock:
        return self._locks.setdefault(group_id, asyncio.Lock())

    async def _load(self, group_id: str) -> ConsumerGroup | None:
        g = self._groups.get(group_id)
        if g is None and group_id in self._downgrades:
            return None  # a classic group now; its consumer row is being removed
        if g is None:
            rec = await self.meta.load_consumer_group(group_id)
            g = self._groups.get(group_id)
            if g is None and rec is not None and group_id not in self._downgrades:
                g = self._groups[group_id] = ConsumerGroup.from_record(rec)
                for m in g.members.values():  # a takeover: the clocks start now
                    self._touch(g, m)
                    if m.state is MemberState.UNREVOKED and not m.classic:
                        self._arm_rebalance(g, m)
        return g

    def release(self, group_id: str) -> None:
        """Forget the in-memory group (another agent owns it now)."""
        g = self._groups.pop(group_id, None)
        if self._switching.pop(group_id, None) is not None and self.classic is not None:
            self.classic.migration_done(group_id)
        if g is not None:
            for m in g.members.values():
                self._cancel_timers(g, m.member_id)

    def _cancel_timers(self, g: ConsumerGroup, member_id: str) -> None:
        for kind in ("session", "rebalance", "join", "sync"):
            self.timers.cancel((kind, g.group_id, member_id))

    def release_unowned(self) -> None:
        """The ring changed: forget the groups another agent owns now (a later
        takeover reloads them from the metastore)."""
        for group_id in [gid for gid in self._groups if not self.owns(gid)]:
            self.release(group_id)

    async def _save(self, g: ConsumerGroup) -> None:
        async with self._lock(g.group_id):
            if self._groups.get(g.group_id) is not g:
                return
            switching = self._switching.get(g.group_id)
            if switching is not None:  # an upgrade: the classic row is emptied in the same transaction
                await self.meta.switch_group_protocol(switching, None if g.dead else g.to_record(self.config.agent_id))
                self._switching.pop(g.group_id, None)
                if self.classic is not None:
                    self.classic.migration_done(g.group_id)
            elif g.dead:
                await self.meta.delete_consumer_group(g.group_id)
            else:
                await self.meta.save_consumer_group(g.to_record(self.config.agent_id))

    def _save_later(self, g: ConsumerGroup) -> None:
        task = asyncio.get_running_loop().create_task(self._save_logged(g))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _save_logged(self, g: ConsumerGroup) -> None:
        try:
            await self._save(g)
        except MetastoreError as e:
            log.warning("saving consumer group %r failed: %s", g.group_id, e)

    async def _topic_map(self) -> dict[str, TopicMeta]:
        now = self.clock.monotonic()
        if self._topics is None or now - self._topics[0] >= 1.0:
            infos = await self._topics_source()
            self._topics = (now, {t.name: TopicMeta(t.id, t.name, t.partitions) for t in infos})
        return self._topics[1]

    # -- timers -------------------------------------------------------------------------

    def _touch(self, g: ConsumerGroup, m: Member) -> None:
        key = ("session", g.group_id, m.member_id)
        timeout_ms = m.classic_session_timeout_ms or self.config.session_timeout_ms
        self.timers.schedule(key, timeout_ms / 1000, lambda: self._expire(g, m.member_id, "session timeout"))

    def _arm_rebalance(self, g: ConsumerGroup, m: Member) -> None:
        key = ("rebalance", g.group_id, m.member_id)
        if not self.timers.is_scheduled(key):
            self.timers.schedule(key, m.rebalance_timeout_ms / 1000, lambda: self._revocation_late(g, m.member_id))

    def _revocation_late(self, g: ConsumerGroup, member_id: str) -> None:
        m = g.members.get(member_id)
        if m is not None and m.state is MemberState.UNREVOKED:
            self._expire(g, member_id, "rebalance timeout")

    def _expire(self, g: ConsumerGroup, member_id: str, why: str) -> None:
        if self._groups.get(g.group_id) is not g or member_id not in g.members:
            return
        if not self.owns(g.group_id):
            self.release(g.group_id)
            return
        log.info("consumer group %r: member %s removed (%s)", g.group_id, member_id, why)
        if self._should_downgrade(g, member_id):
            self._downgrade(g, member_id)
            return
        self._remove(g, member_id)
        self._save_later(g)

    def _remove(self, g: ConsumerGroup, member_id: str) -> None:
        m = g.members.pop(member_id)
        if m.instance_id is not None and g.static_members.get(m.instance_id) == member_id:
            del g.static_members[m.instance_id]
        self._cancel_timers(g, member_id)
        g.group_epoch += 1

    # -- the heartbeat ------------------------------------------------------------------

    async def heartbeat(self, hb: Heartbeat) -> HeartbeatResult:
        bad = validate(hb)
        if bad is not None:
            return bad
        if not self.owns(hb.group_id):
            self.release(hb.group_id)
            return _err(ErrorCode.NOT_COORDINATOR)
        try:
            topics = await self._topic_map()
            g = await self._load(hb.group_id)
            if g is None:
                if hb.member_epoch != 0:
                    return _err(ErrorCode.UNKNOWN_MEMBER_ID, f"Group {hb.group_id} has no member {hb.member_id}.")
                upgraded = await self._upgrade(hb.group_id, topics)  # a non-empty classic group of this id?
                if isinstance(upgraded, int):
                    return _err(upgraded, f"Group {hb.group_id} is not a consumer group.")
                g = upgraded or self._groups.setdefault(hb.group_id, ConsumerGroup(hb.group_id))
            before = g.to_record(None)
            result = self._heartbeat(g, hb, topics)
            downgrade = self._downgrades.get(hb.group_id)
            if downgrade is not None:  # this member's leave made it a classic group
                await asyncio.wait([downgrade], timeout=5.0)  # written (or retrying in the background)
            elif g.to_record(None) != before or hb.group_id in self._switching:
                await self._save(g)
            return result
        except MetastoreError as e:
            log.warning("consumer group %r heartbeat failed: %s", hb.group_id, e)
            return _err(ErrorCode.COORDINATOR_NOT_AVAILABLE)

    def _heartbeat(self, g: ConsumerGroup, hb: Heartbeat, topics: dict[str, TopicMeta]) -> HeartbeatResult:
        m = g.members.get(hb.member_id) if hb.member_id else None
        if m is not None and m.classic and hb.member_epoch != 0:
            return _err(ErrorCode.UNKNOWN_MEMBER_ID, f"Member {hb.member_id} uses the classic protocol.")
        if hb.member_epoch in (LEAVE_EPOCH, STATIC_LEAVE_EPOCH):
            return self._leave(g, hb, m)
        joined = hb.member_epoch == 0
        if not joined:
            if m is None:
                return _err(ErrorCode.UNKNOWN_MEMBER_ID, f"Member {hb.member_id} is not a member of group {g.group_id}.")
            if hb.member_epoch != m.member_epoch:
                ok_previous = hb.member_epoch == m.previous_member_epoch and (
                    hb.owned is None
                    or all(ps <= m.assigned.get(t, set()) for t, ps in hb.owned.items())
                )
                if not ok_previous:
                    return _err(ErrorCode.FENCED_MEMBER_EPOCH, f"Member epoch {hb.member_epoch} is fenced (current {m.member_epoch}).")
        else:
            epoch = g.group_epoch
            m, bad = self._join(g, hb, m)
            if bad is not None:
                return bad
        assert m is not None
        changed = self._update(g, m, hb, topics) or (joined and g.group_epoch != epoch)
        if self._check_metadata(g, topics) or changed:
            g.group_epoch = (epoch if joined else g.group_epoch) + 1  # one bump per heartbeat
        if g.group_epoch > g.assignment_epoch:
            self._assign(g, topics)
        before_epoch, before_assigned = m.member_epoch, copy_assignment(m.assigned)
        next_assignment(g, m, hb.owned)
        if m.state is MemberState.UNREVOKED:
            self._arm_rebalance(g, m)
        else:
            self.timers.cancel(("rebalance", g.group_id, m.member_id))
        self._touch(g, m)
        send = (
            joined
            or m.member_epoch != before_epoch
            or not same(m.assigned, before_assigned)
            or (hb.owned is not None and not same(hb.owned, m.assigned))
        )
        return HeartbeatResult(
            ErrorCode.NONE, None, m.member_id, m.member_epoch, self.config.heartbeat_interval_ms,
            copy_assignment(m.assigned) if send else None,
        )  # fmt: skip

    def _join(self, g: ConsumerGroup, hb: Heartbeat, m: Member | None) -> tuple[Member | None, HeartbeatResult | None]:
        member_id = hb.member_id or str(uuid.uuid4())  # v0: the coordinator may name the member
        if hb.instance_id is not None:
            holder = g.static_members.get(hb.instance_id)
            old = g.members.get(holder) if holder is not None else None
            if old is not None and old.member_id != member_id:
                if old.member_epoch != STATIC_LEAVE_EPOCH:
                    return None, _err(ErrorCode.UNRELEASED_INSTANCE_ID, f"Static member {hb.instance_id} is still in use.")
                # The static member comes back: the new member id takes its place and
                # its assignment (the old process is gone, so nothing is being revoked).
                del g.members[old.member_id]
                self.timers.cancel(("session", g.group_id, old.member_id))
                self.timers.cancel(("rebalance", g.group_id, old.member_id))
                old.member_id = member_id
                old.member_epoch, old.previous_member_epoch = old.previous_member_epoch, old.previous_member_epoch
                old.pending_revocation = {}
                old.state = MemberState.STABLE
                g.members[member_id] = old
                g.static_members[hb.instance_id] = member_id
                return old, None
        if m is None:
            if len(g.members) >= self.config.max_size:
                return None, _err(ErrorCode.GROUP_MAX_SIZE_REACHED, f"The group {g.group_id} is full.")
            m = g.members[member_id] = Member(member_id, rebalance_timeout_ms=hb.rebalance_timeout_ms)
            g.group_epoch += 1
        else:
            # A known member rejoining (after being fenced): it holds nothing now
            # (a classic member switching to the consumer protocol too).
            m.assigned, m.pending_revocation, m.state = {}, {}, MemberState.STABLE
            m.classic_session_timeout_ms = m.classic_protocols = None
            self.timers.cancel(("join", g.group_id, m.member_id))
            self.timers.cancel(("sync", g.group_id, m.member_id))
            m.previous_member_epoch, m.member_epoch = m.member_epoch, 0
        if hb.instance_id is not None:
            g.static_members[hb.instance_id] = member_id
        return m, None

    def _update(self, g: ConsumerGroup, m: Member, hb: Heartbeat, topics: dict[str, TopicMeta]) -> bool:
        """Apply what the heartbeat changed; True when the subscription or the
        assignor changed (the group epoch must move)."""
        if hb.instance_id is not None:
            m.instance_id = hb.instance_id
        if hb.rack_id is not None:
            m.rack_id = hb.rack_id
        if hb.rebalance_timeout_ms > 0:
            m.rebalance_timeout_ms = hb.rebalance_timeout_ms
        m.client_id, m.client_host = hb.client_id, hb.client_host
        bump = False
        if hb.subscribed_topic_names is not None and sorted(set(hb.subscribed_topic_names)) != sorted(m.subscribed_topic_names):
            m.subscribed_topic_names = sorted(set(hb.subscribed_topic_names))
            bump = True
        if hb.subscribed_topic_regex is not None:
            regex = hb.subscribed_topic_regex or None
            if regex != m.subscribed_topic_regex:
                m.subscribed_topic_regex = regex
                bump = True
        if hb.server_assignor is not None and hb.server_assignor != m.server_assignor:
            m.server_assignor = hb.server_assignor
            bump = True
        return bump

    def _subscriptions(self, g: ConsumerGroup, topics: dict[str, TopicMeta]) -> dict[str, set[str]]:
        return {
            mid: resolve(m.subscribed_topic_names, m.subscribed_topic_regex, topics)
            for mid, m in g.members.items()
        }

    def _check_metadata(self, g: ConsumerGroup, topics: dict[str, TopicMeta]) -> bool:
        """Whether a subscribed topic appeared, vanished or grew (the group epoch must move)."""
        names = set().union(*self._subscriptions(g, topics).values()) if g.members else set()
        snapshot = {n: topics[n].partitions for n in sorted(names) if n in topics}
        if snapshot == g.subscribed:
            return False
        g.subscribed = snapshot
        return True

    def _assign(self, g: ConsumerGroup, topics: dict[str, TopicMeta]) -> None:
        wanted = Counter(m.server_assignor for m in g.members.values() if m.server_assignor)
        name = wanted.most_common(1)[0][0] if wanted else DEFAULT_ASSIGNOR
        g.assignor = name
        previous = {mid: m.target for mid, m in g.members.items()}
        targets = ASSIGNORS[name](self._subscriptions(g, topics), topics, previous)
        for mid, m in g.members.items():
            m.target = targets.get(mid, {})
        g.assignment_epoch = g.group_epoch

    def _leave(self, g: ConsumerGroup, hb: Heartbeat, m: Member | None) -> HeartbeatResult:
        if m is None:
            return _err(ErrorCode.UNKNOWN_MEMBER_ID, f"Member {hb.member_id} is not a member of group {g.group_id}.")
        if hb.member_epoch == STATIC_LEAVE_EPOCH and m.instance_id is not None:
            # A static member leaving for a while: it keeps its partitions until its
            # session times out or it comes back under its instance id.
            if m.member_epoch != STATIC_LEAVE_EPOCH:
                m.previous_member_epoch = m.member_epoch
            m.member_epoch = STATIC_LEAVE_EPOCH
            self._touch(g, m)
        elif self._should_downgrade(g, m.member_id):
            self._downgrade(g, m.member_id)
        else:
            self._remove(g, m.member_id)
        return HeartbeatResult(ErrorCode.NONE, None, hb.member_id, hb.member_epoch, 0, None)

    # -- offsets, listing, describing ---------------------------------------------------

    async def group(self, group_id: str) -> ConsumerGroup | None:
        """The consumer group ``group_id`` if it is one this agent owns (loaded when needed)."""
        if not self.owns(group_id):
            return None
        g = await self._load(group_id)
        return None if g is None or g.dead else g

    async def validate_commit(self, group_id: str, member_id: str, epoch: int, version: int) -> int | None:
        """OffsetCommit's committer check for a consumer group (None: not one)."""
        if not self.owns(group_id):
            return None  # the classic path answers NOT_COORDINATOR
        g = await self.group(group_id)
        if g is None:
            return None
        if epoch < 0 and not member_id and not g.members:
            return ErrorCode.NONE  # an admin commit to an empty group
        m = g.members.get(member_id)
        if m is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if m.classic:  # a classic member's generation is its member epoch
            return ErrorCode.NONE if epoch == m.member_epoch else ErrorCode.ILLEGAL_GENERATION
        if version < 9:
            return ErrorCode.UNSUPPORTED_VERSION
        if epoch > m.member_epoch:
            return ErrorCode.FENCED_MEMBER_EPOCH
        if epoch < m.member_epoch:
            return ErrorCode.STALE_MEMBER_EPOCH
        return ErrorCode.NONE

    async def validate_fetch(self, group_id: str, member_id: str | None, epoch: int) -> int | None:
        """OffsetFetch v9+'s member check for a consumer group (None: not one)."""
        if member_id is None or (epoch < 0 and not member_id) or not self.owns(group_id):
            return None
        g = await self.group(group_id)
        if g is None:
            return None
        m = g.members.get(member_id)
        if m is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if epoch != m.member_epoch:
            return ErrorCode.ILLEGAL_GENERATION if m.classic else ErrorCode.STALE_MEMBER_EPOCH
        return ErrorCode.NONE

    async def delete(self, group_id: str) -> int | None:
        """DeleteGroups for a consumer group (None: not one); offsets are the caller's."""
        g = await self.group(group_id)
        if g is None:
            return None
        if g.members:
            return ErrorCode.NON_EMPTY_GROUP
        g.dead = True
        await self._save(g)
        self._groups.pop(group_id, None)
        return ErrorCode.NONE

    async def listing(self) -> dict[str, str]:
        """group id -> state of every consumer group (persisted or in memory)."""
        out = {r.group_id: GroupState.EMPTY.value for r in await self.meta.list_consumer_groups()}
        for gid in list(out):
            if gid not in self._groups:
                rec = await self.meta.load_consumer_group(gid)
                if rec is not None and rec.members:
                    g = ConsumerGroup.from_record(rec)
                    out[gid] = g.state().value
        for gid, g in self._groups.items():
            if g.dead:
                out.pop(gid, None)
            else:
                out[gid] = g.state().value
        return out
