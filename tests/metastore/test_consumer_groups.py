"""The metastore contract for KIP-848 consumer groups, over SQLite and PostgreSQL:
a group saved by one coordinator loads with the same epochs and assignments in
another (a takeover continues at the same epoch), a save replaces the members,
and the served (HTTP) metastore carries the records too (tests/cluster)."""

from __future__ import annotations

import uuid

from metastore import Metastore
from metastore.types import ConsumerGroupRecord, ConsumerMemberRecord, GroupOffset
from tests.metastore.helpers import FakeClock

T1, T2 = uuid.UUID(int=1), uuid.UUID(int=2)


def member(mid: str, epoch: int, *, instance: str | None = None, state: str = "stable") -> ConsumerMemberRecord:
    return ConsumerMemberRecord(
        member_id=mid,
        instance_id=instance,
        rack_id=None,
        client_id=f"client-{mid}",
        client_host="/10.0.0.1",
        member_epoch=epoch,
        previous_member_epoch=epoch - 1,
        state=state,
        rebalance_timeout_ms=300_000,
        server_assignor="uniform",
        subscribed_topic_names=["a", "b"],
        subscribed_topic_regex=None,
        assigned={T1: [0, 2]},
        pending_revocation={T2: [1]} if state == "unrevoked_partitions" else {},
        target={T1: [0, 2], T2: [0]},
    )


async def test_save_load_replace(ms: Metastore, clock: FakeClock) -> None:
    assert await ms.load_consumer_group("cg") is None
    g1 = ConsumerGroupRecord(
        "cg", 7, 7, "uniform", {"a": 3, "b": 2},
        [member("m1", 7), member("m2", 6, instance="i2", state="unrevoked_partitions")], "agent-a",
    )  # fmt: skip
    await ms.save_consumer_group(g1)
    got = await ms.load_consumer_group("cg")
    assert got is not None
    assert (got.group_epoch, got.assignment_epoch, got.assignor, got.subscribed) == (7, 7, "uniform", {"a": 3, "b": 2})
    assert got.members == g1.members and got.coordinator_agent == "agent-a" and got.updated_at_ms == clock.now

    # The next epoch replaces the members (a member left), it does not merge them.
    g2 = ConsumerGroupRecord("cg", 8, 8, "range", {"a": 3}, [member("m2", 8, instance="i2")])
    await ms.save_consumer_group(g2)
    got = await ms.load_consumer_group("cg")
    assert got is not None and got.group_epoch == 8 and got.assignor == "range"
    assert [m.member_id for m in got.members] == ["m2"] and got.members[0].member_epoch == 8
    assert got.members[0].target == {T1: [0, 2], T2: [0]} and got.members[0].pending_revocation == {}

    listed = await ms.list_consumer_groups()
    assert [(x.group_id, x.group_epoch, x.members) for x in listed] == [("cg", 8, [])]


async def test_empty_group_and_delete_keeps_offsets(ms: Metastore) -> None:
    topic = (await ms.create_topic("t", 2)).topic
    assert topic is not None
    await ms.save_consumer_group(ConsumerGroupRecord("e", 3, 3, None, {}, []))
    got = await ms.load_consumer_group("e")
    assert got is not None and got.members == [] and got.assignor is None
    await ms.commit_offsets("e", [GroupOffset(topic.id, 0, 42, -1, "", 1, None)])
    assert await ms.delete_consumer_group("e") is True
    assert await ms.delete_consumer_group("e") is False
    assert await ms.load_consumer_group("e") is None
    assert [o.offset for o in await ms.fetch_offsets("e")] == [42]  # offsets go with DeleteGroups (delete_group)
    assert await ms.delete_group("e") is True
    assert await ms.fetch_offsets("e") == []


async def test_two_groups_do_not_mix(ms: Metastore) -> None:
    await ms.save_consumer_group(ConsumerGroupRecord("x", 1, 1, "uniform", {"a": 1}, [member("m", 1)]))
    await ms.save_consumer_group(ConsumerGroupRecord("y", 2, 1, "uniform", {"a": 1}, [member("m", 1)]))
    await ms.save_consumer_group(ConsumerGroupRecord("x", 2, 2, "uniform", {"a": 1}, []))
    y = await ms.load_consumer_group("y")
    assert y is not None and [m.member_id for m in y.members] == ["m"] and (y.group_epoch, y.assignment_epoch) == (2, 1)


async def test_classic_members_and_protocol_switch(ms: Metastore) -> None:
    """Online migration (issue 16): a classic-protocol member of a consumer group
    keeps its session timeout and protocols; ``switch_group_protocol`` moves the
    group between the two tables in one transaction, offsets untouched."""
    from dataclasses import replace

    from metastore.types import GroupMemberRecord, GroupRecord

    topic = (await ms.create_topic("sw", 1)).topic
    assert topic is not None
    await ms.commit_offsets("sw", [GroupOffset(topic.id, 0, 7, -1, "", 1, None)])
    classic = replace(member("c1", 4), classic_session_timeout_ms=45_000, classic_protocols=[("range", b"\x00\x01ab"), ("coop", b"")])
    consumer = member("n1", 5)
    # upgrade: the classic row emptied, the consumer group with both members
    emptied = GroupRecord("sw", "Empty", 4, "consumer", None, None, [], "agent-a")
    await ms.switch_group_protocol(emptied, ConsumerGroupRecord("sw", 5, 5, "uniform", {"a": 1}, [classic, consumer]))
    got = await ms.load_consumer_group("sw")
    assert got is not None and got.members == [classic, consumer]
    assert got.members[0].classic_protocols == [("range", b"\x00\x01ab"), ("coop", b"")]
    assert got.members[1].classic_session_timeout_ms is None and got.members[1].classic_protocols is None
    old = await ms.load_group("sw")
    assert old is not None and old.members == [] and old.state == "Empty"
    # downgrade: the classic group back with its member, the consumer group gone
    back = GroupRecord(
        "sw", "PreparingRebalance", 6, "consumer", "range", "c1",
        [GroupMemberRecord("c1", None, "client-c1", "/10.0.0.1", 45_000, 300_000, b"\x00\x01ab", b"")], "agent-a",
    )  # fmt: skip
    await ms.switch_group_protocol(back, None)
    assert await ms.load_consumer_group("sw") is None
    again = await ms.load_group("sw")
    assert again is not None and again.generation == 6 and [m.member_id for m in again.members] == ["c1"]
    assert [o.offset for o in await ms.fetch_offsets("sw")] == [7]
