"""Online migration between the classic and the consumer group protocol.

Where it sits: the consumer-group coordinator (:mod:`.coordinator` and
:mod:`.classic`) calls these pure conversions; the metastore stores the result
in one transaction (``switch_group_protocol``). Kafka 4.x's rules
(``group.consumer.migration.policy``, KIP-848 "Upgrade & Downgrade"):

- **upgrade**: the first ConsumerGroupHeartbeat (epoch 0) to a non-empty classic
  group whose members use the ``consumer`` embedded protocol converts it into a
  consumer group (policy ``upgrade`` or ``bidirectional``; not over
  ``group.consumer.max.size``). Group epoch, assignment epoch and every member's
  epoch become the classic generation; each member keeps its last assignment
  (decoded from the ConsumerProtocolAssignment it was given) as current and
  target, its subscription from its JoinGroup metadata, and its session timeout
  and protocols (it stays a *classic member*, served JoinGroup/SyncGroup/
  Heartbeat by the consumer coordinator);
- **downgrade**: when the last consumer-protocol member leaves or is fenced and
  only classic members remain (policy ``downgrade`` or ``bidirectional``), the
  group becomes a classic group of those members at generation = group epoch,
  each with its current assignment serialized, and a rebalance starts at once.
"""

from __future__ import annotations

import enum
import uuid

from agent.groups.consumer.assignors import Assignment, TopicMeta
from agent.groups.consumer.model import ConsumerGroup, Member, MemberState
from agent.groups.state import CONSUMER_PROTOCOL, Group
from agent.groups.state import Member as ClassicMember
from kafka_protocol.exceptions import DecodeError, UnsupportedVersion
from kafka_protocol.messages import ConsumerProtocolAssignment, ConsumerProtocolSubscription


class MigrationPolicy(enum.StrEnum):
    """``group.consumer.migration.policy``."""

    BIDIRECTIONAL = "bidirectional"
    UPGRADE = "upgrade"
    DOWNGRADE = "downgrade"
    DISABLED = "disabled"

    @property
    def upgrade(self) -> bool:
        return self in (MigrationPolicy.BIDIRECTIONAL, MigrationPolicy.UPGRADE)

    @property
    def downgrade(self) -> bool:
        return self in (MigrationPolicy.BIDIRECTIONAL, MigrationPolicy.DOWNGRADE)


def _version(data: bytes) -> int | None:
    if len(data) < 2:
        return None
    v = int.from_bytes(data[:2], "big", signed=True)
    return None if v < 0 else v


def parse_subscription(metadata: bytes) -> ConsumerProtocolSubscription | None:
    """A JoinGroup protocol's ConsumerProtocolSubscription (None: malformed)."""
    v = _version(metadata)
    if v is None:
        return None
    try:
        return ConsumerProtocolSubscription.decode(
            memoryview(metadata)[2:], min(v, ConsumerProtocolSubscription.MAX_VERSION)
        )
    except (DecodeError, UnsupportedVersion, ValueError):
        return None


def decode_assignment(data: bytes, topics: dict[str, TopicMeta]) -> Assignment | None:
    """A ConsumerProtocolAssignment as {topic id: partitions}; empty bytes is an
    empty assignment; unknown topics are dropped; None: malformed."""
    if not data:
        return {}
    v = _version(data)
    if v is None:
        return None
    try:
        a = ConsumerProtocolAssignment.decode(
            memoryview(data)[2:], min(v, ConsumerProtocolAssignment.MAX_VERSION)
        )
    except (DecodeError, UnsupportedVersion, ValueError):
        return None
    out: Assignment = {}
    for tp in a.assigned_partitions:
        meta = topics.get(tp.topic)
        if meta is not None:
            out.setdefault(meta.id, set()).update(
                p for p in tp.partitions if 0 <= p < meta.partitions
            )
    return {t: ps for t, ps in out.items() if ps}


def owned_partitions(
    sub: ConsumerProtocolSubscription | None, topics: dict[str, TopicMeta]
) -> Assignment:
    """The partitions a classic member says it owns in its JoinGroup (v1+ metadata)."""
    out: Assignment = {}
    for tp in sub.owned_partitions if sub is not None else []:
        meta = topics.get(tp.topic)
        if meta is not None:
            out.setdefault(meta.id, set()).update(tp.partitions)
    return out


def encode_assignment(assigned: Assignment, names: dict[uuid.UUID, str], metadata: bytes) -> bytes:
    """``assigned`` as the ConsumerProtocolAssignment a classic member gets in
    SyncGroup, at the version of its subscription metadata (as Kafka does)."""
    v = min(_version(metadata) or 0, ConsumerProtocolAssignment.MAX_VERSION)
    parts = [
        ConsumerProtocolAssignment.TopicPartition(topic=names[t], partitions=sorted(ps))
        for t, ps in sorted(assigned.items(), key=lambda kv: names.get(kv[0], ""))
        if ps and t in names
    ]
    return v.to_bytes(2, "big") + ConsumerProtocolAssignment(assigned_partitions=parts).encode(v)


def from_classic(cg: Group, topics: dict[str, TopicMeta]) -> ConsumerGroup | None:
    """The consumer group an upgrade makes of the classic group ``cg`` (None:
    a member's embedded protocol is malformed, the upgrade is refused)."""
    g = ConsumerGroup(cg.group_id, group_epoch=cg.generation, assignment_epoch=cg.generation)
    for cm in cg.members.values():
        meta = (
            cm.metadata(cg.protocol)
            if cg.protocol
            else (cm.protocols[0][1] if cm.protocols else b"")
        )
        sub = parse_subscription(meta)
        assigned = decode_assignment(cm.assignment, topics)
        if sub is None or assigned is None:
            return None
        m = Member(
            cm.member_id, cm.group_instance_id, sub.rack_id, cm.client_id, cm.client_host,
            member_epoch=cg.generation, previous_member_epoch=cg.generation, state=MemberState.STABLE,
            rebalance_timeout_ms=cm.rebalance_timeout_ms, subscribed_topic_names=sorted(set(sub.topics)),
            assigned={t: set(ps) for t, ps in assigned.items()}, target={t: set(ps) for t, ps in assigned.items()},
            classic_session_timeout_ms=cm.session_timeout_ms, classic_protocols=list(cm.protocols),
        )  # fmt: skip
        g.members[m.member_id] = m
        if m.instance_id is not None:
            g.static_members[m.instance_id] = m.member_id
    return g


def to_classic(g: ConsumerGroup, leaving: str, names: dict[uuid.UUID, str]) -> Group:
    """The classic group a downgrade makes of ``g`` without member ``leaving``
    (every other member is a classic one). The caller starts a rebalance."""
    cg = Group(g.group_id, generation=g.group_epoch, protocol_type=CONSUMER_PROTOCOL)
    for m in g.members.values():
        if m.member_id == leaving or m.classic_protocols is None:
            continue
        cg.members[m.member_id] = ClassicMember(
            m.member_id, m.instance_id, m.client_id, m.client_host,
            m.classic_session_timeout_ms or 45_000, m.rebalance_timeout_ms, CONSUMER_PROTOCOL, list(m.classic_protocols),
        )  # fmt: skip
        if m.instance_id is not None:
            cg.static_members[m.instance_id] = m.member_id
    cg.leader_id = next(iter(cg.members), None)
    cg.protocol = cg.select_protocol()
    for cm in cg.members.values():
        cm.assignment = encode_assignment(
            g.members[cm.member_id].assigned, names, cm.metadata(cg.protocol)
        )
    return cg
