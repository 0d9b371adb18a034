"""The metastore contract for share groups (KIP-932), over SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
import uuid

from metastore import Metastore
from metastore.types import InflightRange, SharePartitionState
from tests.metastore.helpers import FakeClock

T1 = uuid.UUID(int=1)
T2 = uuid.UUID(int=2)


def state(start: int, end: int, ranges: list[InflightRange], *, p: int = 0, topic: uuid.UUID = T1) -> SharePartitionState:
    return SharePartitionState("g", topic, p, start, end, ranges)


async def test_share_partition_insert_then_cas(ms: Metastore, clock: FakeClock) -> None:
    assert await ms.share_partitions_load("g") == []
    s0 = state(5, 5, [])
    assert await ms.share_partition_cas(s0, 0)
    # A second insert of the same partition loses.
    assert not await ms.share_partition_cas(s0, 0)
    [loaded] = await ms.share_partitions_load("g", [(T1, 0)])
    assert (loaded.start_offset, loaded.end_offset, loaded.version, loaded.ranges) == (5, 5, 1, [])
    assert loaded.updated_at_ms == clock.now

    ranges = [InflightRange(5, 9, 1, 1, 40_000, "m1"), InflightRange(10, 10, 0, 2, 0, "")]
    s1 = state(5, 11, ranges)
    assert await ms.share_partition_cas(s1, 1)
    # A writer that read version 1 too loses now.
    assert not await ms.share_partition_cas(state(5, 12, []), 1)
    [loaded] = await ms.share_partitions_load("g")
    assert loaded.version == 2 and loaded.ranges == ranges and loaded.end_offset == 11


async def test_share_partition_cas_race_one_winner(ms: Metastore) -> None:
    assert await ms.share_partition_cas(state(0, 0, []), 0)
    results = await asyncio.gather(
        *(ms.share_partition_cas(state(0, i + 1, [InflightRange(0, i, 1, 1, 1, f"m{i}")]), 1) for i in range(6))
    )
    assert sum(results) == 1
    [loaded] = await ms.share_partitions_load("g")
    winner = results.index(True)
    assert loaded.end_offset == winner + 1 and loaded.version == 2


async def test_share_partitions_select_and_delete(ms: Metastore) -> None:
    for topic, p in ((T1, 0), (T1, 1), (T2, 0)):
        assert await ms.share_partition_cas(state(0, 0, [], p=p, topic=topic), 0)
    other = SharePartitionState("other", T1, 0, 3, 3, [])
    assert await ms.share_partition_cas(other, 0)
    assert [(x.topic_id, x.partition) for x in await ms.share_partitions_load("g", [(T1, 1), (T2, 0)])] == [
        (T1, 1),
        (T2, 0),
    ]
    assert len(await ms.share_partitions_load("g")) == 3
    assert await ms.share_partitions_delete("g", [(T1, 0)]) == 1
    assert len(await ms.share_partitions_load("g")) == 2
    assert await ms.share_partitions_delete("g") == 2
    assert await ms.share_partitions_load("g") == []
    assert len(await ms.share_partitions_load("other")) == 1


async def test_share_groups_and_configs(ms: Metastore) -> None:
    assert await ms.share_groups_list() == []
    await ms.share_group_save("sg", 1)
    await ms.share_group_save("sg", 4)
    await ms.share_group_save("sg", 2)  # the epoch never goes back
    [g] = await ms.share_groups_list()
    assert (g.group_id, g.group_epoch) == ("sg", 4)

    assert await ms.group_config_get("sg") == {}
    await ms.group_config_alter("sg", {"share.record.lock.duration.ms": "1000", "share.delivery.count.limit": "3"})
    await ms.group_config_alter("sg", {"share.delivery.count.limit": "4"}, ["share.record.lock.duration.ms"])
    assert await ms.group_config_get("sg") == {"share.delivery.count.limit": "4"}

    assert await ms.share_partition_cas(SharePartitionState("sg", T1, 0, 0, 0, []), 0)
    assert await ms.share_group_delete("sg")
    assert await ms.share_groups_list() == []
    assert await ms.share_partitions_load("sg") == [] and await ms.group_config_get("sg") == {}
    assert not await ms.share_group_delete("sg")
