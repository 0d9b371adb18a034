"""The journal tier end to end (issue 40): a real agent with three journal buckets and
confluent-kafka clients. Produce is acknowledged from small journal objects on a
quorum of buckets; consolidation moves every batch into standard objects without a
gap or a duplicate for readers; one bucket down changes nothing for producers; two
down and the agent writes to the standard bucket instead (never on one copy)."""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition

from agent.metrics import METRICS
from tests.agent.test_fetch_protocol import make_topic


def _journal(tmp_path: Path) -> tuple[list[Path], str]:
    dirs = [tmp_path / f"journal{i}" for i in range(3)]
    for d in dirs:
        d.mkdir()
    return dirs, ",".join(f"file://{d}" for d in dirs)


def _produce(bootstrap: str, topic: str, partitions: int, n: int, tag: str) -> dict[int, list[bytes]]:
    acked: dict[int, list[bytes]] = {p: [] for p in range(partitions)}
    errors: list[Any] = []

    def cb(err: Any, msg: Any) -> None:
        if err is not None:
            errors.append(err)
        else:
            acked[msg.partition()].append(msg.value())

    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 2})
    for i in range(n):
        p.produce(topic, f"{tag}-{i}".encode(), partition=i % partitions, on_delivery=cb)
        if i % 50 == 0:
            p.poll(0)
    assert p.flush(30) == 0
    assert errors == []
    return acked


def _read_all(bootstrap: str, topic: str, partitions: int, want: int) -> dict[int, list[bytes]]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{topic}", "enable.auto.commit": False})
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    got: dict[int, list[bytes]] = {p: [] for p in range(partitions)}
    deadline = time.monotonic() + 30
    while sum(map(len, got.values())) < want and time.monotonic() < deadline:
        for m in c.consume(500, 0.5):
            assert m.error() is None, m.error()
            got[m.partition()].append(m.value())
    c.close()
    return got


def _journal_rows(agent: Any) -> tuple[int, int]:
    """(batches whose object is a journal object, batches in standard objects)."""

    async def count() -> tuple[int, int]:
        topics = await agent.broker.meta.list_topics()
        j = s = 0
        for t in topics:
            for p in range(t.partitions):
                for b in await agent.broker.meta.partition_batches(t.id, p):
                    if b.object_key.startswith("journal/"):
                        j += 1
                    else:
                        s += 1
        return j, s

    out: tuple[int, int] = agent.call(count())
    return out


def _wait(cond: Any, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.05)


def _metric(counter: Any, *labels: str) -> float:
    c = counter.labels(*labels) if labels else counter
    return float(c._value.get())


def test_acknowledged_from_the_journal_then_consolidated_without_gap_or_duplicate(agent_factory, tmp_path):
    _, urls = _journal(tmp_path)
    agent = agent_factory(journal=urls, journal_quorum=2, consolidate_interval_ms=300, fetch_cache_writes=False)
    make_topic(agent, "jt", partitions=3)
    objects0 = _metric(METRICS.journal_objects)
    consolidated0 = _metric(METRICS.consolidations, "ok")
    acked = _produce(agent.bootstrap, "jt", 3, 600, "a")
    assert _metric(METRICS.journal_objects) > objects0
    # A reader right after the acks reads from the journal; later ones from standard objects.
    first = _read_all(agent.bootstrap, "jt", 3, 600)
    assert first == acked
    _wait(lambda: _journal_rows(agent)[0] == 0)
    assert _journal_rows(agent)[1] > 0
    assert _metric(METRICS.consolidations, "ok") > consolidated0
    # Across the switch: the same records, once each, in order.
    more = _produce(agent.bootstrap, "jt", 3, 300, "b")
    again = _read_all(agent.bootstrap, "jt", 3, 900)
    assert again == {p: acked[p] + more[p] for p in range(3)}


def test_one_bucket_down_changes_nothing_two_down_falls_back_to_the_standard_bucket(agent_factory, tmp_path):
    dirs, urls = _journal(tmp_path)
    agent = agent_factory(journal=urls, journal_quorum=2, consolidate_interval_ms=300)
    make_topic(agent, "jd", partitions=2)
    shutil.rmtree(dirs[2])
    dirs[2].write_text("not a directory: every PUT to this bucket fails")
    fallbacks0 = _metric(METRICS.journal_fallbacks)
    objects0 = _metric(METRICS.journal_objects)
    acked = _produce(agent.bootstrap, "jd", 2, 200, "one-down")
    assert _metric(METRICS.journal_fallbacks) == fallbacks0
    assert _metric(METRICS.journal_objects) > objects0
    shutil.rmtree(dirs[1])
    dirs[1].write_text("down too")
    more = _produce(agent.bootstrap, "jd", 2, 100, "two-down")
    assert _metric(METRICS.journal_fallbacks) > fallbacks0
    got = _read_all(agent.bootstrap, "jd", 2, 300)
    assert got == {p: acked[p] + more[p] for p in range(2)}
