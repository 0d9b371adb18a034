"""The classic group coordinator: Kafka's join/sync barrier, in memory, persisted.

Where it sits: the JoinGroup/SyncGroup/Heartbeat/LeaveGroup/OffsetCommit/...
handlers call this object (``broker.groups``); it keeps every group it has
touched in memory and writes to the metastore what another agent needs to take
the group over (generation, protocol, leader, members with their metadata and
assignments). A group not in memory is loaded from the metastore on first
access. Committed offsets are never only here: ``commit_offsets`` returns after
the metastore write, and offset reads go to the metastore.

The state machine follows Kafka's ``GroupCoordinator`` (classic protocol):
Empty -> PreparingRebalance -> CompletingRebalance -> Stable, Dead once deleted.
A rebalance completes when every member has rejoined or the largest rebalance
timeout passes (members that did not rejoin are dropped); an empty group first
waits ``group.initial.rebalance.delay.ms`` (extended while members keep
arriving). The leader gets the member list and computes the assignment; the
coordinator only stores and hands it out on SyncGroup. Members that neither
heartbeat nor wait in a join/sync for ``session.timeout.ms`` are removed.

All state changes are synchronous (no ``await`` in the middle of a transition),
so the asyncio loop is the only lock needed. Persisting a group is a background
write per group that always saves the latest state, but, as in Kafka, a
JoinGroup or SyncGroup is answered only once the state it hands out (generation,
members, assignment) is in the metastore. Each save is a compare-and-set on the
stored generation, so when a ring move has two agents serving the group for a
moment, only one of them can write a given new generation: the other drops its
copy (its waiting members get NOT_COORDINATOR and look the coordinator up
again), and a request naming a generation newer than the in-memory one reloads
the group. Generations handed out therefore only grow, even across a move.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from agent.clock import Clock
from agent.groups.state import (
    CONSUMER_PROTOCOL,
    Group,
    GroupDescription,
    GroupState,
    JoinResult,
    Member,
    MemberDescription,
    SyncResult,
)
from agent.groups.timers import Timers
from kafka_protocol.errors import ErrorCode
from metastore import Metastore, MetastoreError
from metastore.types import GroupListing, GroupOffset
from metastore.unavailable import metastore_unavailable

log = logging.getLogger(__name__)

EMPTY = GroupState.EMPTY
PREPARING = GroupState.PREPARING_REBALANCE
COMPLETING = GroupState.COMPLETING_REBALANCE
STABLE = GroupState.STABLE
DEAD = GroupState.DEAD


@dataclass(frozen=True, slots=True)
class GroupConfig:
    initial_rebalance_delay_ms: int = 100
    min_session_timeout_ms: int = 6000
    max_session_timeout_ms: int = 1_800_000
    agent_id: str | None = None
    metrics_interval_s: float = 10.0  # per-group lag on /metrics (0: off), as for KIP-848 groups


@dataclass(frozen=True, slots=True)
class JoinRequest:
    group_id: str
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    require_known_member_id: bool = True


def _resolve(fut: asyncio.Future[JoinResult] | asyncio.Future[SyncResult] | None, value: object) -> None:
    if fut is not None and not fut.done():
        fut.set_result(value)  # type: ignore[arg-type]


class GroupCoordinator:
    #: Is this agent the group's coordinator (its ring owner)? agent.cluster sets it.
    owns: Callable[[str], bool] = staticmethod(lambda _group_id: True)

    def __init__(self, meta: Metastore, clock: Clock, config: GroupConfig | None = None) -> None:
        self.meta = meta
        self.clock = clock
        self.config = config or GroupConfig()
        self.timers = Timers(clock)
        self._groups: dict[str, Group] = {}
        self._load_locks: dict[str, asyncio.Lock] = {}
        self._handed_over: set[str] = set()  # upgraded; the consumer row is not written yet
        self._metrics_task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self.timers.start()
        if self.config.metrics_interval_s > 0:
            self._metrics_task = asyncio.get_running_loop().create_task(self._metrics_loop(), name="group-lag")

    async def _metrics_loop(self) -> None:
        # Imported here: agent.groups.consumer imports this module.
        from agent.groups.consumer.metrics import refresh_classic

        while True:
            await asyncio.sleep(self.config.metrics_interval_s)
            try:
                await refresh_classic(self)
            except Exception as e:  # a metastore blip: the next refresh retries
                log.debug("classic group metrics: %s", e)

    async def reported_group_ids(self) -> list[str]:
        """The classic groups whose lag this agent reports on /metrics: every live
        group it owns, in memory or only in the metastore (committed offsets, no
        member), but not one handed over to the consumer protocol."""
        ids = {x.group_id for x in await self.meta.list_groups() if x.state != DEAD.value}
        ids |= set(self._groups)
        out = []
        for gid in sorted(ids - self._handed_over):
            g = self._groups.get(gid)
            if (g is None or g.state is not DEAD) and self.owns(gid):
                out.append(gid)
        return out

    async def close(self) -> None:
        if self._metrics_task is not None:
            self._metrics_task.cancel()
            await asyncio.gather(self._metrics_task, return_exceptions=True)
            self._metrics_task = None
        await self.timers.stop()
        for g in self._groups.values():
            for m in g.members.values():
                _resolve(m.join_future, JoinResult(ErrorCode.NOT_COORDINATOR, m.member_id))
                _resolve(m.sync_future, SyncResult(ErrorCode.NOT_COORDINATOR))
        await self.flush()

    async def flush(self) -> None:
        """Wait until every group's latest state is in the metastore."""
        for g in list(self._groups.values()):
            while g.persist_task is not None and not g.persist_task.done():
                await g.persist_task

    # -- loading and persisting ---------------------------------------------------

    async def _group(self, group_id: str, *, create: bool) -> Group | None:
        g = self._groups.get(group_id)
        if g is not None or group_id in self._handed_over:
            return g
        # One load per group id at a time (the lock only saves duplicate reads);
        # whoever stores the group first wins, so there is never a second copy.
        lock = self._load_locks.setdefault(group_id, asyncio.Lock())
        async with lock:
            g = self._groups.get(group_id)
            if g is None:
                rec = await self.meta.load_group(group_id)
                g = self._groups.get(group_id)  # stored by someone else meanwhile?
                if group_id in self._handed_over:
                    g = None
                elif g is None and rec is not None:
                    g = self._groups[group_id] = Group.from_record(rec)
                    self._adopt(g)
                elif g is None and create:
                    g = self._groups[group_id] = Group(group_id)
        if self._load_locks.get(group_id) is lock and not lock.locked():
            del self._load_locks[group_id]
        return g

    def _adopt(self, g: Group) -> None:
        """Start the clocks of a group loaded from the metastore (a takeover)."""
        for m in g.members.values():
            self._touch(g, m)
        if g.state in (PREPARING, COMPLETING):
            # Whatever barrier was in flight died with the previous coordinator.
            g.state = STABLE
            self._prepare_rebalance(g, "group loaded mid-rebalance")

    def _persist(self, g: Group) -> None:
        if self._groups.get(g.group_id) is not g:
            return  # dropped (moved, fenced, deleted): its owner writes it now
        g.changes += 1
        g.dirty = True
        if g.persist_task is None or g.persist_task.done():
            g.persist_task = asyncio.get_running_loop().create_task(
                self._persist_loop(g), name=f"group-persist {g.group_id}"
            )

    async def _persist_loop(self, g: Group) -> None:
        while g.dirty and g.state is not DEAD and self._groups.get(g.group_id) is g:
            g.dirty = False
            changes, rec = g.changes, g.to_record(self.config.agent_id)
            try:
                saved = await self.meta.save_group(rec, expected_generation=g.stored_generation)
            except Exception as e:
                if metastore_unavailable(e):
                    log.warning("could not persist group %r (next change retries): metastore unavailable: %s: %s",
                                g.group_id, type(e).__name__, e)  # fmt: skip
                else:
                    log.exception("could not persist group %r (next change retries)", g.group_id)
                return
            if saved is False:
                # Another agent wrote the group since we loaded it (a ring move).
                log.warning("group %r: generation %s is no longer the stored one; dropping the local copy",
                            g.group_id, g.stored_generation)  # fmt: skip
                self._drop(g)
                return
            g.saved, g.stored_generation = changes, rec.generation

    async def _durable(self, g: Group) -> int:
        """Wait until the group's state as of now is in the metastore (once more
        if the last save failed); the error to answer with when it is not."""
        target, retried = g.changes, False
        while g.saved < target:
            if self._groups.get(g.group_id) is not g or g.state is DEAD:
                return ErrorCode.NOT_COORDINATOR  # dropped: the member asks again
            task = g.persist_task
            if task is None or task.done():
                if retried:
                    return ErrorCode.COORDINATOR_NOT_AVAILABLE
                retried = True
                self._persist(g)
                task = g.persist_task
            assert task is not None
            await asyncio.shield(task)
        return ErrorCode.NONE

    def _drop(self, g: Group) -> None:
        """Forget ``g``: it is stale (another agent wrote a newer state). Members
        waiting in its barrier get NOT_COORDINATOR; the next request loads it."""
        if self._groups.get(g.group_id) is g:
            del self._groups[g.group_id]
        g.dirty = False
        for m in g.members.values():
            _resolve(m.join_future, JoinResult(ErrorCode.NOT_COORDINATOR, m.member_id))
            _resolve(m.sync_future, SyncResult(ErrorCode.NOT_COORDINATOR))
            m.join_future = m.sync_future = None
        self.timers.cancel_where(lambda key: isinstance(key, tuple) and len(key) > 1 and key[1] == g.group_id)

    async def _fresh(self, g: Group | None, generation: int) -> Group | None:
        """``g``, or the stored group when ``generation`` is newer than ours (another
        agent ran the group meanwhile): our copy is stale, theirs is the truth."""
        if g is None or generation <= g.generation or g.state is DEAD:
            return g
        try:
            rec = await self.meta.load_group(g.group_id)
        except MetastoreError as e:
            log.warning("group %r: could not reload: %s", g.group_id, e)
            return g
        if self._groups.get(g.group_id) is not g:
            return self._groups.get(g.group_id)
        if rec is None or rec.generation <= g.generation:
            return g
        log.info("group %r: generation %d stored by another agent (ours: %d); reloading",
                 g.group_id, rec.generation, g.generation)  # fmt: skip
        self._drop(g)
        fresh = self._groups[g.group_id] = Group.from_record(rec)
        self._adopt(fresh)
        return fresh

    # -- timers ---------------------------------------------------------------------

    def _touch(self, g: Group, m: Member) -> None:
        """Push the member's session deadline back (a heartbeat, a commit, a sync)."""
        self.timers.schedule(
            ("session", g.group_id, m.member_id),
            m.session_timeout_ms / 1000,
            lambda: self._session_expired(g, m),
        )

    def _session_expired(self, g: Group, m: Member) -> None:
        if g.members.get(m.member_id) is not m:
            return
        if m.join_future is not None or m.sync_future is not None:
            self._touch(g, m)  # waiting in the barrier counts as alive, as in Kafka
            return
        log.info("group %r: member %s session expired", g.group_id, m.member_id)
        self._remove_member(g, m)
        self._after_removal(g, "member session expired")

    def _schedule_join(self, g: Group, delay_ms: int) -> None:
        self.timers.schedule(("join", g.group_id), delay_ms / 1000, lambda: self._join_timer(g))

    def _join_timer(self, g: Group) -> None:
        if g.state is not PREPARING:
            return
        if g.in_initial_delay and g.new_member_added and g.initial_remaining_ms > 0:
            g.new_member_added = False
            delay = min(self.config.initial_rebalance_delay_ms, g.initial_remaining_ms)
            g.initial_remaining_ms -= delay
            self._schedule_join(g, delay)
            return
        self._complete_join(g)

    # -- the rebalance barrier ----------------------------------------------------

    def _prepare_rebalance(self, g: Group, reason: str) -> None:
        if g.state in (PREPARING, DEAD):
            return
        log.info("group %r: preparing rebalance (generation %d): %s", g.group_id, g.generation, reason)
        if g.state is COMPLETING:
            for m in g.members.values():
                m.assignment = b""
                _resolve(m.sync_future, SyncResult(ErrorCode.REBALANCE_IN_PROGRESS))
                m.sync_future = None
        rebalance_ms = g.max_rebalance_timeout_ms()
        if g.state is EMPTY:
            delay = self.config.initial_rebalance_delay_ms
            g.in_initial_delay = True
            g.new_member_added = False
            g.initial_remaining_ms = max(rebalance_ms - delay, 0)
            self._schedule_join(g, delay)
        else:
            g.in_initial_delay = False
            self._schedule_join(g, rebalance_ms)
        g.state = PREPARING

    def _try_complete_join(self, g: Group) -> None:
        if g.state is PREPARING and not g.in_initial_delay and g.all_joined():
            self._complete_join(g)

    def _complete_join(self, g: Group) -> None:
        if g.state is not PREPARING:
            return
        self.timers.cancel(("join", g.group_id))
        g.in_initial_delay = False
        for m in list(g.members.values()):
            if m.join_future is None:
                log.info("group %r: member %s did not rejoin in time", g.group_id, m.member_id)
                self._remove_member(g, m)
        g.generation += 1
        if not g.members:
            g.state = EMPTY
            g.protocol = None
            g.leader_id = None
            self._persist(g)
            return
        if g.leader_id not in g.members:
            g.leader_id = next(iter(g.members))
        g.protocol = g.select_protocol()
        g.protocol_type = next(iter(g.members.values())).protocol_type
        g.state = COMPLETING
        log.info(
            "group %r: generation %d with %d members, protocol %s, leader %s",
            g.group_id, g.generation, len(g.members), g.protocol, g.leader_id,
        )
        everyone = [(m.member_id, m.group_instance_id, m.metadata(g.protocol)) for m in g.members.values()]
        for m in g.members.values():
            fut, m.join_future = m.join_future, None
            _resolve(fut, self._join_result(g, m, everyone if m.member_id == g.leader_id else []))
            self._touch(g, m)
        self._persist(g)

    def _join_result(
        self, g: Group, m: Member, members: list[tuple[str, str | None, bytes]], *, skip: bool = False
    ) -> JoinResult:
        return JoinResult(
            ErrorCode.NONE,
            m.member_id,
            g.generation,
            g.protocol_type,
            g.protocol,
            g.leader_id or "",
            members,
            skip,
        )

    def _remove_member(self, g: Group, m: Member) -> None:
        self.timers.cancel(("session", g.group_id, m.member_id))
        _resolve(m.join_future, JoinResult(ErrorCode.UNKNOWN_MEMBER_ID, m.member_id))
        _resolve(m.sync_future, SyncResult(ErrorCode.UNKNOWN_MEMBER_ID))
        m.join_future = m.sync_future = None
        g.members.pop(m.member_id, None)
        if m.group_instance_id is not None and g.static_members.get(m.group_instance_id) == m.member_id:
            del g.static_members[m.group_instance_id]
        if g.leader_id == m.member_id:
            g.leader_id = next(iter(g.members), None)

    def _after_removal(self, g: Group, reason: str) -> None:
        if g.state in (STABLE, COMPLETING):
            self._prepare_rebalance(g, reason)
        # Everyone left may already be waiting (or nobody is left): no need to wait.
        self._try_complete_join(g)
        self._persist(g)

    # -- JoinGroup ------------------------------------------------------------------

    async def join(self, req: JoinRequest) -> JoinResult:
        if not req.group_id:
            return JoinResult(ErrorCode.INVALID_GROUP_ID, req.member_id)
        cfg = self.config
        if not cfg.min_session_timeout_ms <= req.session_timeout_ms <= cfg.max_session_timeout_ms:
            return JoinResult(ErrorCode.INVALID_SESSION_TIMEOUT, req.member_id)
        if not req.protocol_type or not req.protocols:
            return JoinResult(ErrorCode.INCONSISTENT_GROUP_PROTOCOL, req.member_id)
        g = await self._group(req.group_id, create=not req.member_id)
        if g is None:
            return JoinResult(ErrorCode.UNKNOWN_MEMBER_ID, req.member_id)
        out = self._join(g, req)
        res = out if isinstance(out, JoinResult) else await out
        if res.error == ErrorCode.NONE:
            error = await self._durable(g)  # never hand out a generation a successor may not see
            if error:
                return JoinResult(error, res.member_id)
        return res

    def _join(self, g: Group, req: JoinRequest) -> JoinResult | asyncio.Future[JoinResult]:
        if g.state is DEAD:
            return JoinResult(ErrorCode.COORDINATOR_NOT_AVAILABLE, req.member_id)
        names = [name for name, _ in req.protocols]
        if not g.supports(req.protocol_type, names):
            return JoinResult(ErrorCode.INCONSISTENT_GROUP_PROTOCOL, req.member_id)
        instance = req.group_instance_id
        if not req.member_id:
            if instance is not None and instance in g.static_members:
                return self._static_rejoin(g, req)
            new_id = f"{instance or req.client_id}-{uuid.uuid4()}"
            if instance is None and req.require_known_member_id:
                # KIP-394: hand out the id first; the member joins with it.
                g.pending_members.add(new_id)
                self.timers.schedule(
                    ("pending", g.group_id, new_id),
                    req.session_timeout_ms / 1000,
                    lambda: self._pending_expired(g, new_id),
                )
                return JoinResult(ErrorCode.MEMBER_ID_REQUIRED, new_id)
            return self._add_member(g, new_id, req)
        if req.member_id in g.pending_members:
            g.pending_members.discard(req.member_id)
            self.timers.cancel(("pending", g.group_id, req.member_id))
            return self._add_member(g, req.member_id, req)
        if instance is not None:
            known = g.static_members.get(instance)
            if known is not None and known != req.member_id:
                return JoinResult(ErrorCode.FENCED_INSTANCE_ID, req.member_id)
        m = g.members.get(req.member_id)
        if m is None or g.state is EMPTY:
            return JoinResult(ErrorCode.UNKNOWN_MEMBER_ID, req.member_id)
        if g.state is PREPARING:
            return self._update_member(g, m, req)
        if g.state is COMPLETING:
            if m.matches(req.protocols):
                # It missed the join response: answer again for this generation.
                everyone = [(x.member_id, x.group_instance_id, x.metadata(g.protocol)) for x in g.members.values()]
                return self._join_result(g, m, everyone if m.member_id == g.leader_id else [])
            return self._update_member(g, m, req)
        # Stable: a follower with unchanged metadata just gets the current generation.
        if m.member_id != g.leader_id and m.matches(req.protocols):
            self._touch(g, m)
            return self._join_result(g, m, [])
        return self._update_member(g, m, req)

    def _pending_expired(self, g: Group, member_id: str) -> None:
        if member_id in g.pending_members:
            g.pending_members.discard(member_id)
            self._try_complete_join(g)

    def _add_member(self, g: Group, member_id: str, req: JoinRequest) -> asyncio.Future[JoinResult]:
        fut: asyncio.Future[JoinResult] = asyncio.get_running_loop().create_future()
        m = Member(
            member_id,
            req.group_instance_id,
            req.client_id,
            req.client_host,
            req.session_timeout_ms,
            req.rebalance_timeout_ms,
            req.protocol_type,
            list(req.protocols),
            join_future=fut,
        )
        if not g.members:
            g.protocol_type = req.protocol_type
        g.members[member_id] = m
        if req.group_instance_id is not None:
            g.static_members[req.group_instance_id] = member_id
        if g.leader_id is None or g.leader_id not in g.members:
            g.leader_id = member_id
        if g.state is PREPARING and g.in_initial_delay:
            g.new_member_added = True
        self._touch(g, m)
        self._prepare_rebalance(g, f"member {member_id} joined")
        self._try_complete_join(g)
        return fut

    def _update_member(self, g: Group, m: Member, req: JoinRequest) -> asyncio.Future[JoinResult]:
        fut: asyncio.Future[JoinResult] = asyncio.get_running_loop().create_future()
        # A retried JoinGroup replaces the earlier one, which gets a retriable error.
        _resolve(m.join_future, JoinResult(ErrorCode.REBALANCE_IN_PROGRESS, m.member_id))
        m.join_future = fut
        m.protocols = list(req.protocols)
        m.protocol_type = req.protocol_type
        m.session_timeout_ms = req.session_timeout_ms
        m.rebalance_timeout_ms = req.rebalance_timeout_ms
        m.client_id, m.client_host = req.client_id, req.client_host
        self._touch(g, m)
        self._prepare_rebalance(g, f"member {m.member_id} rejoined")
        self._try_complete_join(g)
        return fut

    def _static_rejoin(self, g: Group, req: JoinRequest) -> JoinResult | asyncio.Future[JoinResult]:
        """KIP-345: a known group.instance.id joins with no member id (a restart):
        it takes over the old member's place under a new member id, fencing the old
        one, without a rebalance when nothing about it changed."""
        assert req.group_instance_id is not None
        old_id = g.static_members[req.group_instance_id]
        old = g.members[old_id]
        new_id = f"{req.group_instance_id}-{uuid.uuid4()}"
        _resolve(old.join_future, JoinResult(ErrorCode.FENCED_INSTANCE_ID, old_id))
        _resolve(old.sync_future, SyncResult(ErrorCode.FENCED_INSTANCE_ID))
        old.join_future = old.sync_future = None
        self.timers.cancel(("session", g.group_id, old_id))
        del g.members[old_id]
        old.member_id = new_id
        g.members[new_id] = old
        g.static_members[req.group_instance_id] = new_id
        was_leader = g.leader_id == old_id
        if was_leader:
            g.leader_id = new_id
        if g.state is STABLE and old.matches(req.protocols):
            old.client_id, old.client_host = req.client_id, req.client_host
            old.session_timeout_ms = req.session_timeout_ms
            old.rebalance_timeout_ms = req.rebalance_timeout_ms
            self._touch(g, old)
            self._persist(g)
            return self._join_result(g, old, [], skip=was_leader)
        return self._update_member(g, old, req)

    # -- SyncGroup ------------------------------------------------------------------

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
        g = await self._fresh(await self._group(group_id, create=False), generation)
        if g is None:
            return SyncResult(ErrorCode.UNKNOWN_MEMBER_ID)
        out = self._sync(g, generation, member_id, group_instance_id, assignments, protocol_type, protocol_name)
        res = out if isinstance(out, SyncResult) else await out
        if res.error == ErrorCode.NONE:
            error = await self._durable(g)  # the assignment is stored before anyone gets it
            if error:
                return SyncResult(error)
        return res

    def _sync(
        self,
        g: Group,
        generation: int,
        member_id: str,
        instance: str | None,
        assignments: dict[str, bytes],
        protocol_type: str | None,
        protocol_name: str | None,
    ) -> SyncResult | asyncio.Future[SyncResult]:
        if g.state is DEAD:
            return SyncResult(ErrorCode.COORDINATOR_NOT_AVAILABLE)
        error = self._check_member(g, member_id, instance, generation)
        if error:
            return SyncResult(error)
        if (protocol_type is not None and protocol_type != g.protocol_type) or (
            protocol_name is not None and protocol_name != g.protocol
        ):
            return SyncResult(ErrorCode.INCONSISTENT_GROUP_PROTOCOL)
        m = g.members[member_id]
        if g.state is PREPARING:
            return SyncResult(ErrorCode.REBALANCE_IN_PROGRESS)
        self._touch(g, m)
        if g.state is STABLE:
            return SyncResult(ErrorCode.NONE, m.assignment, g.protocol_type, g.protocol)
        # CompletingRebalance: wait for the leader's assignment.
        fut: asyncio.Future[SyncResult] = asyncio.get_running_loop().create_future()
        _resolve(m.sync_future, SyncResult(ErrorCode.REBALANCE_IN_PROGRESS))
        m.sync_future = fut
        if member_id == g.leader_id:
            for mem in g.members.values():
                mem.assignment = assignments.get(mem.member_id, b"")
            g.state = STABLE
            self.timers.cancel(("join", g.group_id))
            for mem in g.members.values():
                f, mem.sync_future = mem.sync_future, None
                _resolve(f, SyncResult(ErrorCode.NONE, mem.assignment, g.protocol_type, g.protocol))
            self._persist(g)
        return fut

    def _check_member(self, g: Group, member_id: str, instance: str | None, generation: int) -> int:
        if instance is not None:
            known = g.static_members.get(instance)
            if known is not None and known != member_id:
                return ErrorCode.FENCED_INSTANCE_ID
        if member_id not in g.members or g.state is EMPTY:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if generation != g.generation:
            return ErrorCode.ILLEGAL_GENERATION
        return ErrorCode.NONE

    # -- Heartbeat / LeaveGroup -----------------------------------------------------

    async def heartbeat(self, group_id: str, generation: int, member_id: str, group_instance_id: str | None) -> int:
        g = await self._fresh(await self._group(group_id, create=False), generation)
        if g is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if g.state is DEAD:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        error = self._check_member(g, member_id, group_instance_id, generation)
        if error:
            return error
        self._touch(g, g.members[member_id])
        if g.state is PREPARING:
            return ErrorCode.REBALANCE_IN_PROGRESS
        return ErrorCode.NONE

    async def leave(self, group_id: str, members: Sequence[tuple[str, str | None]]) -> tuple[int, list[int]]:
        """Remove ``(member_id, group_instance_id)`` pairs; returns the group-level
        error and one error per member."""
        g = await self._group(group_id, create=False)
        if g is None:
            return ErrorCode.NONE, [ErrorCode.UNKNOWN_MEMBER_ID] * len(members)
        if g.state is DEAD:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, [ErrorCode.COORDINATOR_NOT_AVAILABLE] * len(members)
        errors: list[int] = []
        removed = False
        for member_id, instance in members:
            if instance is not None:
                known = g.static_members.get(instance)
                if known is None:
                    errors.append(ErrorCode.UNKNOWN_MEMBER_ID)
                    continue
                if member_id and member_id != known:
                    errors.append(ErrorCode.FENCED_INSTANCE_ID)
                    continue
                member_id = known
            if member_id in g.pending_members:
                g.pending_members.discard(member_id)
                self.timers.cancel(("pending", g.group_id, member_id))
                errors.append(ErrorCode.NONE)
                removed = True
                continue
            m = g.members.get(member_id)
            if m is None:
                errors.append(ErrorCode.UNKNOWN_MEMBER_ID)
                continue
            log.info("group %r: member %s left", g.group_id, member_id)
            self._remove_member(g, m)
            errors.append(ErrorCode.NONE)
            removed = True
        if removed:
            self._after_removal(g, "member left")
        return ErrorCode.NONE, errors

    # -- offsets --------------------------------------------------------------------

    async def commit_offsets(
        self,
        group_id: str,
        generation: int,
        member_id: str,
        group_instance_id: str | None,
        offsets: Sequence[GroupOffset],
    ) -> int:
        """Validate the committer and store ``offsets``; returns an error code. The
        offsets are in the metastore when this returns NONE."""
        g = await self._fresh(await self._group(group_id, create=generation < 0), generation)
        if g is None:
            return ErrorCode.ILLEGAL_GENERATION  # a member of a generation that no longer exists
        if g.state is DEAD:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        if group_instance_id is not None:
            known = g.static_members.get(group_instance_id)
            if known is not None and known != member_id:
                return ErrorCode.FENCED_INSTANCE_ID
        if not (generation < 0 and g.state is EMPTY):  # not a standalone commit
            if member_id not in g.members:
                return ErrorCode.UNKNOWN_MEMBER_ID
            if generation != g.generation:
                return ErrorCode.ILLEGAL_GENERATION
            if g.state is COMPLETING:
                return ErrorCode.REBALANCE_IN_PROGRESS
            self._touch(g, g.members[member_id])
        if not offsets:
            return ErrorCode.NONE
        try:
            await self.meta.commit_offsets(group_id, offsets)
        except MetastoreError as e:
            log.warning("offset commit of group %r failed: %s", group_id, e)
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        return ErrorCode.NONE

    async def validate_txn_commit(
        self, group_id: str, generation: int, member_id: str, group_instance_id: str | None
    ) -> int:
        """TxnOffsetCommit's committer check, as Kafka's classic group does it: an
        unknown group is fine with generation -1 (a simple group), else
        ILLEGAL_GENERATION; a member id, instance id or generation >= 0 must name
        a current member (FENCED_INSTANCE_ID, UNKNOWN_MEMBER_ID) of the current
        generation (ILLEGAL_GENERATION). Unlike OffsetCommit, a commit without a
        member is allowed while the group has members (v0-2 carry none), and a
        rebalance in progress does not refuse it."""
        g = await self._group(group_id, create=generation < 0)
        if g is None:
            return ErrorCode.ILLEGAL_GENERATION
        if g.state is DEAD:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        if generation < 0 and g.state is EMPTY:
            return ErrorCode.NONE
        if generation >= 0 or member_id or group_instance_id is not None:
            if group_instance_id is not None:
                known = g.static_members.get(group_instance_id)
                if known is not None and known != member_id:
                    return ErrorCode.FENCED_INSTANCE_ID
            if member_id not in g.members:
                return ErrorCode.UNKNOWN_MEMBER_ID
            if generation != g.generation:
                return ErrorCode.ILLEGAL_GENERATION
        return ErrorCode.NONE

    async def fetch_offsets(self, group_id: str, topic_ids: Sequence[uuid.UUID] | None = None) -> list[GroupOffset]:
        return await self.meta.fetch_offsets(group_id, topic_ids)

    async def delete_offsets(
        self, group_id: str, partitions: Sequence[tuple[str, uuid.UUID, int]]
    ) -> tuple[int, list[int]]:
        """OffsetDelete: ``(topic name, topic id, partition)`` triples; the group
        error and one error per partition."""
        g = await self._group(group_id, create=False)
        if g is None or g.state is DEAD:
            return ErrorCode.GROUP_ID_NOT_FOUND, []
        subscribed: set[str] = set()
        if g.state is not EMPTY:
            if g.protocol_type != CONSUMER_PROTOCOL:
                return ErrorCode.NON_EMPTY_GROUP, []
            # Unparsable subscriptions count as subscribed to nothing, as in Kafka.
            subscribed = g.subscribed_topics() or set()
        errors = [ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC if name in subscribed else ErrorCode.NONE for name, _, _ in partitions]
        doomed = [(tid, p) for (_, tid, p), e in zip(partitions, errors, strict=True) if e == ErrorCode.NONE]
        try:
            await self.meta.delete_offsets(group_id, doomed)
        except MetastoreError as e:
            log.warning("offset delete of group %r failed: %s", group_id, e)
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, []
        return ErrorCode.NONE, [int(e) for e in errors]

    # -- admin ----------------------------------------------------------------------

    async def list_groups(self) -> list[GroupListing]:
        found = {x.group_id: x for x in await self.meta.list_groups()}
        for g in list(self._groups.values()):
            if g.state is DEAD:
                found.pop(g.group_id, None)
            else:
                found[g.group_id] = GroupListing(g.group_id, g.protocol_type, g.state.value)
        return [found[k] for k in sorted(found)]

    async def describe(self, group_id: str) -> GroupDescription | None:
        g = await self._group(group_id, create=False)
        if g is None or g.state is DEAD:
            return None
        stable = g.state is STABLE
        return GroupDescription(
            g.group_id,
            g.state.value,
            g.protocol_type or "",
            (g.protocol or "") if stable else "",
            [
                MemberDescription(
                    m.member_id,
                    m.group_instance_id,
                    m.client_id,
                    m.client_host,
                    m.metadata(g.protocol) if stable else b"",
                    m.assignment if stable else b"",
                )
                for m in g.members.values()
            ],
        )

    async def delete_group(self, group_id: str) -> int:
        g = await self._group(group_id, create=False)
        if g is None or g.state is DEAD:
            return ErrorCode.GROUP_ID_NOT_FOUND
        if g.state is not EMPTY:
            return ErrorCode.NON_EMPTY_GROUP
        g.state = DEAD
        for key in list(g.pending_members):
            self.timers.cancel(("pending", group_id, key))
        self.timers.cancel(("join", group_id))
        if self._groups.get(group_id) is g:
            del self._groups[group_id]
        if g.persist_task is not None:
            await asyncio.gather(g.persist_task, return_exceptions=True)
        try:
            await self.meta.delete_group(group_id)
        except MetastoreError as e:
            log.warning("delete of group %r failed: %s", group_id, e)
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        return ErrorCode.NONE

    # -- online migration (the consumer-group coordinator's side) --------------------

    async def group_for_migration(self, group_id: str) -> Group | None:
        """The non-empty classic group ``group_id`` an upgrade would convert, or None."""
        g = await self._group(group_id, create=False)
        return g if g is not None and g.state is not DEAD and g.members else None

    def hand_over(self, group_id: str) -> None:
        """The group became a consumer group (upgrade): members waiting in the
        barrier get REBALANCE_IN_PROGRESS (they rejoin, now to the consumer
        group), the clocks stop, and this coordinator forgets the group (the
        caller empties its row in the same transaction as the consumer group)."""
        g = self._groups.pop(group_id, None)
        if g is None:
            return
        self._handed_over.add(group_id)
        for m in g.members.values():
            _resolve(m.join_future, JoinResult(ErrorCode.REBALANCE_IN_PROGRESS, m.member_id))
            _resolve(m.sync_future, SyncResult(ErrorCode.REBALANCE_IN_PROGRESS))
            m.join_future = m.sync_future = None
            self.timers.cancel(("session", group_id, m.member_id))
        for member_id in g.pending_members:
            self.timers.cancel(("pending", group_id, member_id))
        self.timers.cancel(("join", group_id))
        g.state = DEAD
        g.dirty = False

    def migration_done(self, group_id: str) -> None:
        """The upgrade is in the metastore (or abandoned): load the id normally again."""
        self._handed_over.discard(group_id)

    def adopt(self, g: Group, *, rebalance: bool = True) -> None:
        """A consumer group became this classic group (downgrade): its members
        keep their assignments and (``rebalance``) are asked to rejoin."""
        g.state = STABLE
        g.stored_generation = None  # the downgrade writes the row unconditionally
        self._handed_over.discard(g.group_id)
        self._groups[g.group_id] = g
        for m in g.members.values():
            self._touch(g, m)
        if rebalance:
            self._prepare_rebalance(g, "downgraded from a consumer group")

    def persist(self, g: Group) -> None:
        """Write the group's latest state (after the downgrade's own write)."""
        if self._groups.get(g.group_id) is g:
            self._persist(g)

    def group_state(self, group_id: str) -> Group | None:
        """The in-memory group (tests, diagnostics, and the routing of classic requests
        between this coordinator and the consumer-group one)."""
        return self._groups.get(group_id)
