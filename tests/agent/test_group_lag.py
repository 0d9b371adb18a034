"""``floe_consumer_group_lag{group}`` for classic groups too (issue 42).

The lag of a classic group is the high watermark minus the committed offset,
summed over its committed partitions, reported by the group's coordinator (its
ring owner) only, for groups with members and for groups that only have
committed offsets. Unit tests drive the coordinator directly; the interop test
uses a confluent-kafka consumer on the classic protocol that commits.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import generate_latest

from agent.clock import ManualClock
from agent.groups import GroupConfig, GroupCoordinator
from agent.groups.consumer.metrics import LAG, refresh_classic
from agent.metrics import METRICS
from kafka_protocol.errors import ErrorCode as E
from metastore import Metastore, open_metastore
from metastore.types import GroupOffset
from tests.fixtures.agent import RunningAgent
from tests.metastore.helpers import batch


@pytest.fixture
async def meta(tmp_path: Path) -> AsyncIterator[Metastore]:
    ms = await open_metastore(f"sqlite:///{tmp_path / 'meta.db'}")
    yield ms
    await ms.close()


def _lag(group: str) -> float | None:
    for metric in METRICS.registry.collect():
        for s in metric.samples:
            if s.name == "floe_consumer_group_lag" and s.labels.get("group") == group:
                return s.value
    return None


async def test_classic_lag_owned_groups_only(meta: Metastore) -> None:
    coord = GroupCoordinator(meta, ManualClock(), GroupConfig(metrics_interval_s=0))
    res = await meta.create_topic(f"lag-{uuid.uuid4().hex[:6]}", 2, {})
    tid = res.topic.id
    await meta.commit_object(f"obj/{uuid.uuid4()}", 100, "a", [batch(tid, 0, 7), batch(tid, 1, 3)])
    g1, g2 = f"g1-{uuid.uuid4().hex[:6]}", f"g2-{uuid.uuid4().hex[:6]}"
    # A standalone commit (generation -1, no member), as a consumer with assign() makes.
    assert await coord.commit_offsets(g1, -1, "", None, [GroupOffset(tid, 0, 2, -1, "", -1, None),
                                                         GroupOffset(tid, 1, 3, -1, "", -1, None)]) == E.NONE  # fmt: skip
    # A group only in the metastore (committed by an earlier coordinator of it).
    await meta.commit_offsets(g2, [GroupOffset(tid, 0, 0, -1, "", -1, None)])
    got = await refresh_classic(coord)
    assert got[g1] == (7 - 2) + (3 - 3) and got[g2] == 7
    assert _lag(g1) == 5 and _lag(g2) == 7
    # More records: the lag grows; not this agent's group any more: its line goes.
    await meta.commit_object(f"obj/{uuid.uuid4()}", 100, "a", [batch(tid, 1, 4)])
    coord.owns = lambda gid: gid != g2  # type: ignore[method-assign]
    got = await refresh_classic(coord)
    assert got[g1] == 9 and g2 not in got
    assert _lag(g1) == 9 and _lag(g2) is None
    # Deleted: gone from /metrics at the next refresh.
    assert await coord.delete_group(g1) == E.NONE
    assert g1 not in await refresh_classic(coord) and _lag(g1) is None
    await coord.close()


async def test_metrics_loop_refreshes_on_its_interval(meta: Metastore) -> None:
    """start() runs the refresh every metrics_interval_s; close() stops it."""
    import asyncio

    coord = GroupCoordinator(meta, ManualClock(), GroupConfig(metrics_interval_s=0.01))
    res = await meta.create_topic(f"loop-{uuid.uuid4().hex[:6]}", 1, {})
    await meta.commit_object(f"obj/{uuid.uuid4()}", 100, "a", [batch(res.topic.id, 0, 4)])
    gid = f"loop-{uuid.uuid4().hex[:6]}"
    await meta.commit_offsets(gid, [GroupOffset(res.topic.id, 0, 1, -1, "", -1, None)])
    coord.start()
    for _ in range(1000):  # polls a real condition (10 s at most); the loop's own pace is its interval
        if _lag(gid) == 3:
            break
        await asyncio.sleep(0.01)
    assert _lag(gid) == 3
    await coord.close()
    assert coord._metrics_task is None
    LAG.remove(gid)


@pytest.mark.interop
def test_confluent_classic_group_lag(floe_agent: RunningAgent) -> None:
    """A classic-protocol consumer commits part of a topic: lag = high watermark - committed."""
    from confluent_kafka import Consumer, Producer, TopicPartition

    from tests.agent.test_fetch_protocol import make_topic

    topic, group = f"lag-{uuid.uuid4().hex[:6]}", f"lagging-{uuid.uuid4().hex[:6]}"
    make_topic(floe_agent, topic, 3)
    p = Producer({"bootstrap.servers": floe_agent.bootstrap, "linger.ms": 5})
    for i in range(60):
        p.produce(topic, str(i).encode(), partition=i % 3)
    assert p.flush(30) == 0
    c = Consumer({"bootstrap.servers": floe_agent.bootstrap, "group.id": group, "group.protocol": "classic",
                  "auto.offset.reset": "earliest", "enable.auto.commit": False})  # fmt: skip
    c.subscribe([topic])
    seen = 0
    deadline = time.monotonic() + 30
    while seen < 25 and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is not None and not m.error():
            seen += 1
    assert seen >= 25
    c.commit(asynchronous=False)  # the positions after what was consumed
    committed = c.committed([TopicPartition(topic, q) for q in range(3)], timeout=10)
    ends = [c.get_watermark_offsets(TopicPartition(topic, q), timeout=10)[1] for q in range(3)]
    # Over the committed partitions (a partition without a commit has no lag line, as in KIP-848 groups).
    expected = sum(hw - tp.offset for tp, hw in zip(committed, ends, strict=True) if tp.offset >= 0)
    assert any(tp.offset > 0 for tp in committed) and sum(ends) == 60 and expected > 0
    got: dict[str, Any] = floe_agent.call(refresh_classic(floe_agent.broker.groups))
    assert got[group] == expected
    assert f'floe_consumer_group_lag{{group="{group}"}} {float(expected)}' in generate_latest(METRICS.registry).decode()
    c.close()
