"""Driving a compactor from a synchronous test against a running agent's data."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition

from compactor.config import CompactorConfig
from compactor.runner import Compactor, PassSummary
from metastore import Metastore, open_metastore
from metastore.base import Clock
from objectstore import open_object_store
from objectstore.base import ObjectStore


class SyncCompactor:
    """A compactor on its own event loop, over the same SQLite file and object dir as an agent."""

    def __init__(self, agent: Any, config: CompactorConfig, now_ms: Clock | None = None) -> None:
        self.loop = asyncio.new_event_loop()
        d = agent.data_dir
        self.metastore_url = f"sqlite:///{d / 'meta.db'}"
        self.objects_url = f"file://{d / 'objects'}"
        # The metastore shares the compactor's clock: read leases expire by it.
        self.meta: Metastore = self.loop.run_until_complete(
            open_metastore(self.metastore_url, now_ms=now_ms)
        )
        self.store: ObjectStore = open_object_store(self.objects_url)
        self.compactor = Compactor(self.meta, self.store, config, now_ms=now_ms)

    def run(self, coro: Any) -> Any:
        return self.loop.run_until_complete(coro)

    def run_pass(self, **kw: Any) -> PassSummary:
        return self.run(self.compactor.run_pass(**kw))

    def object_count(self, level: int, fmt: str = "segment") -> int:
        return len(self.run(self.meta.list_compaction_objects(level, fmt=fmt)))

    def close(self) -> None:
        self.run(self.store.close())
        self.run(self.meta.close())
        self.loop.close()


def produce(
    bootstrap: str, topic: str, rows: list[tuple[int, bytes | None, bytes | None]], **conf: Any
) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "acks": "all", **conf})
    errors: list[Any] = []
    for part, k, v in rows:
        p.produce(
            topic,
            v,
            key=k,
            partition=part,
            on_delivery=lambda e, m: errors.append(e) if e else None,
        )
    assert p.flush(30) == 0
    assert not errors, errors


def consume_all(
    bootstrap: str, topic: str, partitions: int, n: int, timeout: float = 60
) -> list[tuple[int, int, bytes | None, bytes | None]]:
    """(partition, offset, key, value) of ``n`` records from offset 0 (log start) on."""
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "compactor-tests",
            "enable.auto.commit": False,
            "fetch.wait.max.ms": 50,
            "auto.offset.reset": "earliest",
        }
    )
    try:
        c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        out: list[tuple[int, int, bytes | None, bytes | None]] = []
        deadline = time.monotonic() + timeout
        while len(out) < n and time.monotonic() < deadline:
            m = c.poll(0.2)
            if m is None or m.error() is not None:
                continue
            out.append((m.partition(), m.offset(), m.key(), m.value()))
        # Anything more (duplicates) would show up now.
        end = time.monotonic() + 0.5
        while time.monotonic() < end:
            m = c.poll(0.1)
            if m is not None and m.error() is None:
                out.append((m.partition(), m.offset(), m.key(), m.value()))
        return out
    finally:
        c.close()
