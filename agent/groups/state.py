"""In-memory model of a classic consumer group and the coordinator's result types.

Kafka's ``GroupMetadata``/``MemberMetadata`` in Python: members with their
supported protocols, the pending (``MEMBER_ID_REQUIRED``) member ids, the static
``group.instance.id`` -> member id map, the protocol vote and the subscription
parsing OffsetDelete needs. The state machine itself lives in
:mod:`agent.groups.coordinator`.
"""

from __future__ import annotations

import asyncio
import enum
from collections import Counter
from dataclasses import dataclass, field

from kafka_protocol.exceptions import DecodeError, UnsupportedVersion
from kafka_protocol.messages import ConsumerProtocolSubscription
from metastore.types import GroupMemberRecord, GroupRecord


class GroupState(enum.Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


CONSUMER_PROTOCOL = "consumer"


@dataclass(slots=True)
class JoinResult:
    error: int
    member_id: str
    generation: int = -1
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str = ""
    #: (member_id, group_instance_id, metadata); only the leader gets them.
    members: list[tuple[str, str | None, bytes]] = field(default_factory=list)
    skip_assignment: bool = False


@dataclass(slots=True)
class SyncResult:
    error: int
    assignment: bytes = b""
    protocol_type: str | None = None
    protocol_name: str | None = None


@dataclass(slots=True)
class MemberDescription:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    metadata: bytes
    assignment: bytes


@dataclass(slots=True)
class GroupDescription:
    group_id: str
    state: str
    protocol_type: str
    protocol: str
    members: list[MemberDescription]


@dataclass(slots=True, eq=False)
class Member:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    assignment: bytes = b""
    join_future: asyncio.Future[JoinResult] | None = None
    sync_future: asyncio.Future[SyncResult] | None = None

    def metadata(self, protocol: str | None) -> bytes:
        for name, meta in self.protocols:
            if name == protocol:
                return meta
        return b""

    def names(self) -> list[str]:
        return [name for name, _ in self.protocols]

    def matches(self, protocols: list[tuple[str, bytes]]) -> bool:
        return self.protocols == protocols

    def vote(self, candidates: set[str]) -> str:
        return next(name for name in self.names() if name in candidates)


@dataclass(slots=True, eq=False)
class Group:
    group_id: str
    state: GroupState = GroupState.EMPTY
    generation: int = 0
    protocol_type: str | None = None
    protocol: str | None = None
    leader_id: str | None = None
    members: dict[str, Member] = field(default_factory=dict)
    static_members: dict[str, str] = field(default_factory=dict)  # instance id -> member id
    pending_members: set[str] = field(default_factory=set)
    # Initial delayed join (group.initial.rebalance.delay.ms) bookkeeping.
    in_initial_delay: bool = False
    new_member_added: bool = False
    initial_remaining_ms: int = 0
    # Persistence: a single writer task per group always saves the latest state.
    dirty: bool = False
    persist_task: asyncio.Task[None] | None = None
    changes: int = 0  # bumped by every change to persist
    saved: int = 0  # the ``changes`` count the last successful save covered
    #: The generation stored in the metastore as far as this coordinator knows:
    #: saves are a compare-and-set on it (None: unconditional, after a downgrade).
    stored_generation: int | None = 0

    def candidate_protocols(self, extra: list[str] | None = None) -> set[str]:
        sets = [set(m.names()) for m in self.members.values()]
        if extra is not None:
            sets.append(set(extra))
        return set.intersection(*sets) if sets else set()

    def supports(self, protocol_type: str, names: list[str]) -> bool:
        if self.state is GroupState.EMPTY and not self.members:
            return bool(protocol_type) and bool(names)
        return protocol_type == self.protocol_type and bool(self.candidate_protocols(names))

    def select_protocol(self) -> str:
        """Kafka's vote: every member votes for its most preferred protocol among
        those all members support; the most votes win (ties: the leader's order)."""
        candidates = self.candidate_protocols()
        if not candidates:
            raise ValueError(f"group {self.group_id!r} has no protocol all members support")
        votes = Counter(m.vote(candidates) for m in self.members.values())
        leader = self.members.get(self.leader_id or "") or next(iter(self.members.values()))
        order = {name: i for i, name in enumerate(leader.names())}
        return max(votes, key=lambda name: (votes[name], -order.get(name, len(order))))

    def all_joined(self) -> bool:
        return not self.pending_members and all(m.join_future is not None for m in self.members.values())

    def max_rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    def subscribed_topics(self) -> set[str] | None:
        """Topics the members subscribe to (consumer protocol only); None if unknown."""
        if self.protocol_type != CONSUMER_PROTOCOL:
            return None
        topics: set[str] = set()
        for m in self.members.values():
            meta = m.metadata(self.protocol) if self.protocol else (m.protocols[0][1] if m.protocols else b"")
            parsed = parse_subscription(meta)
            if parsed is None:
                return None
            topics |= parsed
        return topics

    def to_record(self, agent_id: str | None) -> GroupRecord:
        return GroupRecord(
            group_id=self.group_id,
            state=self.state.value,
            generation=self.generation,
            protocol_type=self.protocol_type,
            protocol=self.protocol,
            leader_id=self.leader_id,
            members=[
                GroupMemberRecord(
                    m.member_id,
                    m.group_instance_id,
                    m.client_id,
                    m.client_host,
                    m.session_timeout_ms,
                    m.rebalance_timeout_ms,
                    m.metadata(self.protocol) if self.protocol else (m.protocols[0][1] if m.protocols else None),
                    m.assignment,
                )
                for m in self.members.values()
            ],
            coordinator_agent=agent_id,
        )

    @classmethod
    def from_record(cls, rec: GroupRecord) -> Group:
        g = cls(
            rec.group_id,
            generation=rec.generation,
            protocol_type=rec.protocol_type,
            protocol=rec.protocol,
            leader_id=rec.leader_id,
            stored_generation=rec.generation,
        )
        try:
            g.state = GroupState(rec.state)
        except ValueError:
            g.state = GroupState.EMPTY
        for r in rec.members:
            g.members[r.member_id] = Member(
                r.member_id,
                r.group_instance_id,
                r.client_id,
                r.client_host,
                r.session_timeout_ms,
                r.rebalance_timeout_ms,
                rec.protocol_type or "",
                [(rec.protocol or "", r.metadata or b"")],
                r.assignment or b"",
            )
            if r.group_instance_id is not None:
                g.static_members[r.group_instance_id] = r.member_id
        if not g.members:
            g.state = GroupState.EMPTY
            g.leader_id = None
        elif g.state is GroupState.EMPTY or g.leader_id not in g.members:
            g.state = GroupState.PREPARING_REBALANCE  # inconsistent row: make everyone rejoin
        return g


def parse_subscription(metadata: bytes) -> set[str] | None:
    """Topics of a consumer-protocol subscription (int16 version, then the body)."""
    if len(metadata) < 2:
        return None
    version = int.from_bytes(metadata[:2], "big", signed=True)
    if version < 0:
        return None
    version = min(version, ConsumerProtocolSubscription.MAX_VERSION)
    try:
        sub = ConsumerProtocolSubscription.decode(memoryview(metadata)[2:], version)
    except (DecodeError, UnsupportedVersion):
        return None
    return set(sub.topics)
