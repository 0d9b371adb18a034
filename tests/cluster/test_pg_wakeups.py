"""Postgres LISTEN/NOTIFY wake-ups: delivered across connections, and their cost on
the commit rate (printed; the NOTIFY runs on its own connection after the commit)."""

from __future__ import annotations

import asyncio
import time

import pytest

from agent.cluster.wakeups import PgWakeups
from agent.notify import CommitNotifier
from metastore import open_metastore
from metastore.engine import asyncpg_dsn
from tests.metastore.helpers import batch

pytestmark = [pytest.mark.postgres]


async def test_notify_wakes_other_agent_and_costs_little(postgres_url: str) -> None:
    ms = await open_metastore(postgres_url, auto_migrate=False)
    a_notifier, b_notifier = CommitNotifier(), CommitNotifier()
    a, b = PgWakeups(asyncpg_dsn(postgres_url), a_notifier), PgWakeups(asyncpg_dsn(postgres_url), b_notifier)
    await a.start()
    await b.start()
    try:
        await ms.create_topic("t", 12)
        topic = await ms.get_topic("t")
        assert topic is not None
        await asyncio.sleep(0.3)  # both LISTENing
        with b_notifier.watch([(topic.id, 3)]) as ev:
            await ms.commit_object("k0", 100, "a", [batch(topic.id, 3)])
            a.committed([(topic.id, 3)])
            await asyncio.wait_for(ev.wait(), 5)
        with a_notifier.watch([(topic.id, 3)]) as own:
            a.committed([(topic.id, 3)])
            await asyncio.sleep(0.3)
            assert not own.is_set()  # an agent skips its own notifications

        async def run(n: int, notify: bool, tag: str) -> float:
            t0 = time.perf_counter()
            for i in range(n):
                keys = [(topic.id, p) for p in range(12)]
                await ms.commit_object(f"{tag}-{i}", 100, "a", [batch(topic.id, p) for p in range(12)])
                if notify:
                    a.committed(keys)
            return n / (time.perf_counter() - t0)

        await run(100, False, "warm")
        plain = await run(600, False, "plain")
        with_notify = await run(600, True, "notify")
        await asyncio.sleep(0.5)
        print(f"\ncommits/s (12 partitions each, concurrency 1): plain {plain:.0f}, with NOTIFY {with_notify:.0f}; "
              f"NOTIFYs sent {a.sent}, received by the other agent {b.received}")  # fmt: skip
        assert with_notify > 0.6 * plain
        assert b.received > 0
    finally:
        await a.stop()
        await b.stop()
        await ms.close()
