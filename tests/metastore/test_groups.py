"""The metastore contract for consumer groups, over SQLite and PostgreSQL."""

from __future__ import annotations

import uuid

from metastore import ErrorCode, Metastore, TopicInfo
from metastore.types import GroupListing, GroupMemberRecord, GroupOffset, GroupRecord
from tests.metastore.helpers import FakeClock


async def make_topic(ms: Metastore, name: str, partitions: int = 3) -> TopicInfo:
    result = await ms.create_topic(name, partitions)
    assert result.error is ErrorCode.NONE and result.topic is not None
    return result.topic


def member(mid: str, *, instance: str | None = None, assignment: bytes | None = b"a") -> GroupMemberRecord:
    return GroupMemberRecord(mid, instance, f"client-{mid}", "10.0.0.1", 10_000, 30_000, b"\x00\x01meta", assignment)


async def test_group_save_load_replace(ms: Metastore, clock: FakeClock) -> None:
    assert await ms.load_group("g") is None
    g1 = GroupRecord("g", "Stable", 3, "consumer", "range", "m1", [member("m1"), member("m2", instance="i2")], "agent-a")
    await ms.save_group(g1)
    loaded = await ms.load_group("g")
    assert loaded is not None
    assert loaded.updated_at_ms == clock.now
    assert (loaded.state, loaded.generation, loaded.protocol_type, loaded.protocol, loaded.leader_id) == (
        "Stable", 3, "consumer", "range", "m1"
    )
    assert loaded.members == g1.members and loaded.coordinator_agent == "agent-a"

    # A new generation replaces the members, it does not merge them.
    clock.advance(5)
    g2 = GroupRecord("g", "CompletingRebalance", 4, "consumer", "roundrobin", "m3", [member("m3", assignment=None)])
    await ms.save_group(g2)
    loaded = await ms.load_group("g")
    assert loaded is not None and loaded.generation == 4 and loaded.protocol == "roundrobin"
    assert [m.member_id for m in loaded.members] == ["m3"] and loaded.members[0].assignment is None
    assert loaded.updated_at_ms == clock.now

    empty = GroupRecord("g", "Empty", 5, "consumer", None, None, [])
    await ms.save_group(empty)
    loaded = await ms.load_group("g")
    assert loaded is not None and loaded.members == [] and loaded.state == "Empty"


async def test_offsets_commit_fetch_overwrite(ms: Metastore, clock: FakeClock) -> None:
    a = await make_topic(ms, "a", 3)
    b = await make_topic(ms, "b", 1)
    await ms.commit_offsets(
        "g",
        [GroupOffset(a.id, 0, 10, 2, "meta"), GroupOffset(a.id, 2, 7), GroupOffset(b.id, 0, 1, commit_time_ms=5)],
    )
    got = {(o.topic_id, o.partition): o for o in await ms.fetch_offsets("g")}
    assert got[(a.id, 0)] == GroupOffset(a.id, 0, 10, 2, "meta", clock.now, None)
    assert got[(a.id, 2)].offset == 7 and got[(a.id, 2)].metadata is None
    assert got[(b.id, 0)].commit_time_ms == 5
    assert len(got) == 3

    clock.advance(100)
    await ms.commit_offsets("g", [GroupOffset(a.id, 0, 20, 3, "", expire_time_ms=9)])
    [p0] = [o for o in await ms.fetch_offsets("g", [a.id]) if o.partition == 0]
    assert (p0.offset, p0.leader_epoch, p0.metadata, p0.commit_time_ms, p0.expire_time_ms) == (20, 3, "", clock.now, 9)
    assert [o.topic_id for o in await ms.fetch_offsets("g", [b.id])] == [b.id]
    assert await ms.fetch_offsets("g", []) == []
    assert await ms.fetch_offsets("other") == []

    # The last commit of a partition within one call wins.
    await ms.commit_offsets("g", [GroupOffset(b.id, 0, 3), GroupOffset(b.id, 0, 4)])
    assert [o.offset for o in await ms.fetch_offsets("g", [b.id])] == [4]


async def test_simple_commit_creates_empty_group(ms: Metastore) -> None:
    t = await make_topic(ms, "t", 1)
    await ms.commit_offsets("simple", [GroupOffset(t.id, 0, 5)])
    loaded = await ms.load_group("simple")
    assert loaded is not None and loaded.state == "Empty" and loaded.generation == 0 and loaded.members == []
    # An existing group row is not touched by a commit.
    await ms.save_group(GroupRecord("managed", "Stable", 2, "consumer", "range", "m", [member("m")]))
    await ms.commit_offsets("managed", [GroupOffset(t.id, 0, 1)])
    managed = await ms.load_group("managed")
    assert managed is not None and managed.state == "Stable" and managed.generation == 2
    assert await ms.list_groups() == [
        GroupListing("managed", "consumer", "Stable"),
        GroupListing("simple", None, "Empty"),
    ]


async def test_delete_offsets_and_group(ms: Metastore) -> None:
    t = await make_topic(ms, "t", 3)
    await ms.commit_offsets("g", [GroupOffset(t.id, p, p + 1) for p in range(3)])
    await ms.commit_offsets("h", [GroupOffset(t.id, 0, 9)])
    assert await ms.delete_offsets("g", [(t.id, 0), (t.id, 2), (uuid.uuid4(), 0)]) == 2
    assert [o.partition for o in await ms.fetch_offsets("g")] == [1]
    assert await ms.delete_offsets("g", []) == 0

    await ms.save_group(GroupRecord("g", "Empty", 1, "consumer", None, None, [member("x")]))
    assert await ms.delete_group("g") is True
    assert await ms.load_group("g") is None
    assert await ms.fetch_offsets("g") == []
    assert await ms.delete_group("g") is False
    # Other groups are untouched.
    assert [o.offset for o in await ms.fetch_offsets("h")] == [9]
    assert [x.group_id for x in await ms.list_groups()] == ["h"]


async def test_group_save_compare_and_set_on_generation(ms: Metastore) -> None:
    """Two coordinators of one group (a ring move) race to write generation 2:
    only the one that saw generation 1 stored wins; the other learns it is stale."""
    def at(gen: int, mid: str) -> GroupRecord:
        return GroupRecord("g", "CompletingRebalance", gen, "consumer", "range", mid, [member(mid)], f"agent-{mid}")

    # No row counts as generation 0: a second creator of the group loses.
    assert await ms.save_group(at(1, "a"), expected_generation=0) is True
    assert await ms.save_group(at(1, "b"), expected_generation=0) is False
    loaded = await ms.load_group("g")
    assert loaded is not None and loaded.leader_id == "a" and [m.member_id for m in loaded.members] == ["a"]

    # Both loaded generation 1; the first to write 2 wins, the late one changes nothing.
    assert await ms.save_group(at(2, "b"), expected_generation=1) is True
    assert await ms.save_group(at(2, "a"), expected_generation=1) is False
    loaded = await ms.load_group("g")
    assert loaded is not None and (loaded.generation, loaded.leader_id) == (2, "b")
    assert [m.member_id for m in loaded.members] == ["b"] and loaded.coordinator_agent == "agent-b"

    # Same generation (the SyncGroup's assignment) from the holder of generation 2.
    assert await ms.save_group(at(2, "b"), expected_generation=2) is True
    # A group created by an offset commit (generation 0) can be taken with 0.
    await ms.commit_offsets("simple", [])
    topic = await make_topic(ms, "t", 1)
    await ms.commit_offsets("simple", [GroupOffset(topic.id, 0, 5)])
    simple = GroupRecord("simple", "CompletingRebalance", 1, "consumer", "range", "m", [member("m")])
    assert await ms.save_group(simple, expected_generation=0) is True
    assert await ms.save_group(simple, expected_generation=0) is False
    # A deleted group is not written back by a stale coordinator.
    assert await ms.delete_group("g") is True
    assert await ms.save_group(at(3, "b"), expected_generation=2) is False
    assert await ms.load_group("g") is None
    # Unconditional saves still overwrite (the migration's and older callers').
    assert await ms.save_group(at(7, "c")) is True
    loaded = await ms.load_group("g")
    assert loaded is not None and loaded.generation == 7
