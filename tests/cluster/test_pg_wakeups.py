"""Postgres LISTEN/NOTIFY wake-ups: delivered across connections, coalesced, and their
cost on the commit rate (printed only; the NOTIFY runs on its own connection after the
commit, and timings belong in loadtest/)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

import asyncpg
import pytest

from agent.cluster.wakeups import PgWakeups
from agent.notify import CommitNotifier
from metastore import open_metastore
from metastore.engine import asyncpg_dsn
from tests.metastore.helpers import batch

pytestmark = [pytest.mark.postgres]


async def until(cond: Callable[[], Awaitable[bool]], within: float, what: str) -> None:
    """Poll ``cond`` every 10 ms until true; fail after ``within`` seconds."""
    try:
        async with asyncio.timeout(within):
            while not await cond():  # noqa: ASYNC110 - polls state no Event exposes
                await asyncio.sleep(0.01)
    except TimeoutError:
        raise AssertionError(f"timed out waiting for {what}") from None


async def test_notify_wakes_other_agent_coalesced(postgres_url: str) -> None:
    ms = await open_metastore(postgres_url, auto_migrate=False)
    a_notifier, b_notifier = CommitNotifier(), CommitNotifier()
    a, b = PgWakeups(asyncpg_dsn(postgres_url), a_notifier), PgWakeups(asyncpg_dsn(postgres_url), b_notifier)
    await a.start()
    await b.start()
    try:
        await ms.create_topic("t", 12)
        topic = await ms.get_topic("t")
        assert topic is not None
        probe = await asyncpg.connect(asyncpg_dsn(postgres_url))
        try:

            async def both_listening() -> bool:
                n = await probe.fetchval(
                    "SELECT count(*) FROM pg_stat_activity"
                    " WHERE datname = current_database() AND query LIKE 'LISTEN %floe_commits%'"
                )
                return bool(n >= 2)

            await until(both_listening, 10, "both agents LISTENing")
        finally:
            await probe.close()
        with b_notifier.watch([(topic.id, 3)]) as ev:
            await ms.commit_object("k0", 100, "a", [batch(topic.id, 3)])
            a.committed([(topic.id, 3)])
            await asyncio.wait_for(ev.wait(), 5)
        with a_notifier.watch([(topic.id, 3)]) as own, a_notifier.watch([(topic.id, 4)]) as mark:
            sent = a.sent
            a.committed([(topic.id, 3)])

            async def a_sent() -> bool:
                return a.sent > sent

            await until(a_sent, 5, "a's NOTIFY")
            # Notifications reach a listener in commit order: once b's later one has
            # arrived at a, a's own has been through a's listener too.
            b.committed([(topic.id, 4)])
            await asyncio.wait_for(mark.wait(), 5)
            assert not own.is_set()  # an agent skips its own notifications

        async def run(n: int, notify: bool, tag: str) -> float:
            t0 = time.perf_counter()
            for i in range(n):
                keys = [(topic.id, p) for p in range(12)]
                await ms.commit_object(f"{tag}-{i}", 100, "a", [batch(topic.id, p) for p in range(12)])
                if notify:
                    a.committed(keys)
            return n / (time.perf_counter() - t0)

        # The rates are printed, not asserted: a timed bound in the suite failed CI when
        # another process's load spike hit the NOTIFY rounds (539 against 1,099 commits/s).
        # What is asserted is what keeps the commit path cheap: a.committed() only queues
        # the keys, and queued keys coalesce into at most one NOTIFY per commit round.
        await run(50, False, "warm")
        sent0 = a.sent
        plain = await run(200, False, "plain")
        with_notify = await run(200, True, "notify")

        async def b_caught_up() -> bool:  # every NOTIFY a sent has reached b
            return not a._pending and not a._kick.is_set() and b.received >= a.sent

        await until(b_caught_up, 10, "b to receive a's NOTIFYs")
        print(f"\ncommits/s (12 partitions each, concurrency 1): plain {plain:.0f}, with NOTIFY {with_notify:.0f}; "
              f"NOTIFYs sent {a.sent - sent0}, received by the other agent {b.received}")  # fmt: skip
        assert 0 < a.sent - sent0 <= 200
        assert b.received == a.sent
        assert b.received > 0
    finally:
        await a.stop()
        await b.stop()
        await ms.close()
