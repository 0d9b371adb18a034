"""The in-memory model of a KIP-848 consumer group and its members' reconciliation.

Where it sits: :mod:`.coordinator` owns these objects; :mod:`metastore` stores
them (``ConsumerGroupRecord``). Vocabulary of KIP-848 / Kafka's group coordinator:

- the **group epoch** moves whenever membership, subscriptions, the assignor or
  the subscribed topics' partition counts change;
- the **target assignment** is computed by the assignor for the group epoch; its
  epoch is the **assignment epoch**;
- each member has a **member epoch** and a **current assignment**; it converges
  on its target one step at a time (:func:`next_assignment`, Kafka's
  ``CurrentAssignmentBuilder``): first it must revoke what it no longer owns
  (state ``unrevoked_partitions``, epoch unchanged), then it gets the assignment
  epoch and the target partitions that no other member still holds; partitions
  still held by another member are given later (``unreleased_partitions``).
  A partition is therefore never in two members' current assignments at once.
"""

from __future__ import annotations

import enum
import uuid
from dataclasses import dataclass, field

from agent.groups.consumer.assignors import Assignment
from metastore.types import ConsumerGroupRecord, ConsumerMemberRecord


class MemberState(enum.StrEnum):
    STABLE = "stable"
    UNREVOKED = "unrevoked_partitions"
    UNRELEASED = "unreleased_partitions"


class GroupState(enum.StrEnum):
    EMPTY = "Empty"
    ASSIGNING = "Assigning"
    RECONCILING = "Reconciling"
    STABLE = "Stable"
    DEAD = "Dead"


LEAVE_EPOCH = -1
STATIC_LEAVE_EPOCH = -2


def copy_assignment(a: Assignment) -> Assignment:
    return {t: set(ps) for t, ps in a.items() if ps}


def same(a: Assignment, b: Assignment) -> bool:
    return copy_assignment(a) == copy_assignment(b)


@dataclass(slots=True)
class Member:
    member_id: str
    instance_id: str | None = None
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    member_epoch: int = 0
    previous_member_epoch: int = -1
    state: MemberState = MemberState.STABLE
    rebalance_timeout_ms: int = 300_000
    server_assignor: str | None = None
    subscribed_topic_names: list[str] = field(default_factory=list)
    subscribed_topic_regex: str | None = None
    assigned: Assignment = field(default_factory=dict)
    pending_revocation: Assignment = field(default_factory=dict)
    target: Assignment = field(default_factory=dict)
    # A member that joined with the classic protocol (JoinGroup; online
    # migration): its session timeout and (name, metadata) protocols.
    classic_session_timeout_ms: int | None = None
    classic_protocols: list[tuple[str, bytes]] | None = None

    @property
    def classic(self) -> bool:
        return self.classic_protocols is not None

    def owned(self) -> Assignment:
        """Partitions this member may still hold: assigned plus pending revocation."""
        out = copy_assignment(self.assigned)
        for t, ps in self.pending_revocation.items():
            out.setdefault(t, set()).update(ps)
        return out

    def to_record(self) -> ConsumerMemberRecord:
        def dump(a: Assignment) -> dict[uuid.UUID, list[int]]:
            return {t: sorted(ps) for t, ps in a.items() if ps}

        return ConsumerMemberRecord(
            self.member_id, self.instance_id, self.rack_id, self.client_id, self.client_host,
            self.member_epoch, self.previous_member_epoch, self.state.value, self.rebalance_timeout_ms,
            self.server_assignor, list(self.subscribed_topic_names), self.subscribed_topic_regex,
            dump(self.assigned), dump(self.pending_revocation), dump(self.target),
            self.classic_session_timeout_ms, None if self.classic_protocols is None else list(self.classic_protocols),
        )  # fmt: skip

    @classmethod
    def from_record(cls, r: ConsumerMemberRecord) -> Member:
        def load(a: dict[uuid.UUID, list[int]]) -> Assignment:
            return {t: set(ps) for t, ps in a.items() if ps}

        return cls(
            r.member_id, r.instance_id, r.rack_id, r.client_id, r.client_host, r.member_epoch,
            r.previous_member_epoch, MemberState(r.state), r.rebalance_timeout_ms, r.server_assignor,
            list(r.subscribed_topic_names), r.subscribed_topic_regex,
            load(r.assigned), load(r.pending_revocation), load(r.target),
            r.classic_session_timeout_ms, None if r.classic_protocols is None else list(r.classic_protocols),
        )  # fmt: skip


@dataclass(slots=True)
class ConsumerGroup:
    group_id: str
    group_epoch: int = 0
    assignment_epoch: int = 0
    assignor: str | None = None
    subscribed: dict[str, int] = field(default_factory=dict)  # topic name -> partitions, at group_epoch
    members: dict[str, Member] = field(default_factory=dict)
    static_members: dict[str, str] = field(default_factory=dict)  # instance id -> member id
    dead: bool = False
    dirty: bool = False
    persist_task: object = None

    def state(self) -> GroupState:
        if self.dead:
            return GroupState.DEAD
        if not self.members:
            return GroupState.EMPTY
        if self.group_epoch > self.assignment_epoch:
            return GroupState.ASSIGNING
        if any(m.member_epoch != self.assignment_epoch or m.state is not MemberState.STABLE for m in self.members.values()):
            return GroupState.RECONCILING
        return GroupState.STABLE

    def owner_of(self) -> dict[tuple[uuid.UUID, int], str]:
        """Which member currently holds each partition (assigned or revoking)."""
        out: dict[tuple[uuid.UUID, int], str] = {}
        for m in self.members.values():
            for t, ps in m.owned().items():
                for p in ps:
                    out[(t, p)] = m.member_id
        return out

    def to_record(self, agent: str | None) -> ConsumerGroupRecord:
        return ConsumerGroupRecord(
            self.group_id, self.group_epoch, self.assignment_epoch, self.assignor, dict(self.subscribed),
            [m.to_record() for m in sorted(self.members.values(), key=lambda m: m.member_id)], agent,
        )  # fmt: skip

    @classmethod
    def from_record(cls, r: ConsumerGroupRecord) -> ConsumerGroup:
        g = cls(r.group_id, r.group_epoch, r.assignment_epoch, r.assignor, dict(r.subscribed))
        for mr in r.members:
            m = Member.from_record(mr)
            g.members[m.member_id] = m
            if m.instance_id is not None:
                g.static_members[m.instance_id] = m.member_id
        return g


def next_assignment(g: ConsumerGroup, m: Member, owned: Assignment | None) -> None:
    """Move ``m`` one step towards its target (Kafka's CurrentAssignmentBuilder).

    ``owned`` is what the member reported holding in this heartbeat (None when it
    did not say). A member revoking partitions stays at its epoch until it
    reports that it no longer holds any of them."""
    if m.state is MemberState.UNREVOKED:
        if owned is None:
            return
        still = {(t, p) for t, ps in owned.items() for p in ps}
        if any((t, p) in still for t, ps in m.pending_revocation.items() for p in ps):
            return
        m.pending_revocation = {}
    elif m.state is MemberState.STABLE and m.member_epoch == g.assignment_epoch:
        return
    holders = g.owner_of()
    keep: Assignment = {}
    revoke: Assignment = {}
    add: Assignment = {}
    unreleased = False
    for t in set(m.target) | set(m.assigned):
        target, current = m.target.get(t, set()), m.assigned.get(t, set())
        if current & target:
            keep[t] = current & target
        if current - target:
            revoke[t] = current - target
        for p in target - current:
            h = holders.get((t, p))
            if h is None or h == m.member_id:
                add.setdefault(t, set()).add(p)
            else:
                unreleased = True
    # Kafka's ownsRevokedPartitions: a member that says it no longer holds any of
    # the partitions to revoke (an eager classic member rejoining) skips the wait.
    owns_revoked = owned is None or any(p in owned.get(t, set()) for t, ps in revoke.items() for p in ps)
    if revoke and owns_revoked:
        m.assigned, m.pending_revocation, m.state = keep, revoke, MemberState.UNREVOKED
        return
    for t, ps in add.items():
        keep.setdefault(t, set()).update(ps)
    if m.member_epoch != g.assignment_epoch:
        m.previous_member_epoch, m.member_epoch = m.member_epoch, g.assignment_epoch
    m.assigned, m.pending_revocation = keep, {}
    m.state = MemberState.UNRELEASED if unreleased else MemberState.STABLE
