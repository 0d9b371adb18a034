"""Cross-agent wake-ups for long-polling fetches.

Where it sits: a fetch waiting for data on agent A is woken by the
:class:`~agent.notify.CommitNotifier` when A's own committer advances a
partition. When another agent B commits, A learns it here:

* **Postgres** (:class:`PgWakeups`): B sends ``NOTIFY floe_commits,
  '<topic_id>:<partition>,...'`` after its commit returned (a separate statement
  on a dedicated connection, coalescing the partitions of all commits made
  while the previous NOTIFY was in flight, so it is off the commit path and
  costs at most one round trip per commit; it waits 5 ms first to gather the
partitions of the commits that follow). Every agent LISTENs on its own
  connection and wakes the local waiters; its own notifications are skipped by
  backend pid. The listening connection is re-opened if it drops.
* **Anything else** (SQLite, the metastore served over HTTP) (:class:`PollWakeups`):
  while fetches are waiting (or fetch sessions hold partitions) and there is
  more than one live agent, poll the high watermarks of the watched partitions
  every ``interval_s`` (100 ms) - one query per topic with several watched
  partitions - and wake the waiters of those that moved.

A wake-up is only a hint: the fetch re-reads the metastore, so a spurious or
duplicated one costs a lookup, and a lost one costs at most ``max_wait_ms``.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Callable, Iterable
from contextlib import suppress

from agent.notify import CommitNotifier
from agent.tasks import cancel_and_wait
from metastore import LATEST_TIMESTAMP, Metastore

log = logging.getLogger(__name__)

CHANNEL = "floe_commits"
_MAX_PAYLOAD = 7000  # Postgres caps a NOTIFY payload at 8000 bytes

Key = tuple[uuid.UUID, int]


def encode_keys(keys: Iterable[Key]) -> list[str]:
    """Payloads of at most ``_MAX_PAYLOAD`` bytes each. A commit at width names a
    topic's partitions one after another: its id is turned into hex once per run
    (``UUID.hex`` formats the integer anew on every call)."""
    out: list[str] = []
    cur: list[str] = []
    size = 0
    prev: uuid.UUID | None = None
    hexed = ""
    for tid, p in keys:
        if tid is not prev:
            prev, hexed = tid, tid.hex
        item = f"{hexed}:{p}"
        if cur and size + len(item) + 1 > _MAX_PAYLOAD:
            out.append(",".join(cur))
            cur, size = [], 0
        cur.append(item)
        size += len(item) + 1
    if cur:
        out.append(",".join(cur))
    return out


def decode_keys(payload: str) -> list[Key]:
    keys: list[Key] = []
    for item in payload.split(","):
        tid, _, p = item.partition(":")
        with suppress(ValueError):
            keys.append((uuid.UUID(hex=tid), int(p)))
    return keys


def _topic_of(key: Key) -> int:
    return id(key[0])  # the same topic's keys share its id object (the agent's topic cache)


class Wakeups:
    """No cross-agent wake-ups (a single agent)."""

    async def start(self) -> None:
        return None

    def committed(self, keys: Iterable[Key]) -> None:
        return None

    async def stop(self) -> None:
        return None


class PgWakeups(Wakeups):
    def __init__(self, dsn: str, notifier: CommitNotifier) -> None:
        self.dsn = dsn
        self.notifier = notifier
        self._pending: set[Key] = set()
        self._kick = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._send_pid: int | None = None
        self.coalesce_s = 0.005
        self.sent = 0
        self.received = 0

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._tasks = [
            loop.create_task(self._listen_loop(), name="pg-listen"),
            loop.create_task(self._send_loop(), name="pg-notify"),
        ]

    async def stop(self) -> None:
        await cancel_and_wait(*self._tasks, swallow=(Exception,))
        self._tasks = []

    def committed(self, keys: Iterable[Key]) -> None:
        self._pending.update(keys)
        self._kick.set()

    def _on_notify(self, _con: object, pid: int, _channel: str, payload: str) -> None:
        if pid == self._send_pid:
            return
        self.received += 1
        self.notifier.notify(decode_keys(payload))

    async def _listen_loop(self) -> None:
        import asyncpg

        while True:
            con = None
            try:
                con = await asyncpg.connect(self.dsn)
                lost = asyncio.Event()
                con.add_termination_listener(lambda _c, lost=lost: lost.set())
                await con.add_listener(CHANNEL, self._on_notify)
                # Commits made while we were not listening: wake everyone to re-check.
                self.notifier.notify_all()
                await lost.wait()
            except asyncio.CancelledError:
                raise
            except Exception as e:
                log.warning("LISTEN %s failed: %s; retrying", CHANNEL, e)
            finally:
                if con is not None:
                    with suppress(Exception):
                        await asyncio.shield(con.close(timeout=2))
            await asyncio.sleep(1.0)

    async def _send_loop(self) -> None:
        import asyncpg

        con = None
        while True:
            await self._kick.wait()
            await asyncio.sleep(self.coalesce_s)  # gather the partitions of a few more commits
            self._kick.clear()
            keys, self._pending = self._pending, set()
            if not keys:
                continue
            try:
                if con is None or con.is_closed():
                    con = await asyncpg.connect(self.dsn)
                    self._send_pid = con.get_server_pid()
                # Grouped by topic, not sorted: sorting compares UUIDs in Python.
                for payload in encode_keys(sorted(keys, key=_topic_of)):
                    await con.execute("SELECT pg_notify($1, $2)", CHANNEL, payload)
                    self.sent += 1
            except asyncio.CancelledError:
                if con is not None:
                    with suppress(Exception):
                        await asyncio.shield(con.close(timeout=2))
                raise
            except Exception as e:  # a lost hint: waiters time out at max_wait_ms
                log.warning("NOTIFY failed: %s", e)
                con = None


class PollWakeups(Wakeups):
    def __init__(
        self,
        meta: Metastore,
        notifier: CommitNotifier,
        *,
        interval_s: float = 0.1,
        active: Callable[[], bool] = lambda: True,
    ) -> None:
        self.meta = meta
        self.notifier = notifier
        self.interval_s = interval_s
        self.active = active
        self._last: dict[Key, int] = {}
        self._task: asyncio.Task[None] | None = None
        self.polls = 0

    async def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="hwm-poll")

    async def stop(self) -> None:
        await cancel_and_wait(self._task)
        self._task = None

    async def poll_once(self) -> list[Key]:
        """Read the watched partitions' high watermarks; wake those that moved."""
        keys: list[Key] = [
            (k[0], k[1]) for k in self.notifier.watched_keys() if isinstance(k[0], uuid.UUID)
        ]
        if not keys:
            return []
        self.polls += 1
        offsets: dict[Key, int] = {}
        by_topic: dict[uuid.UUID, set[int]] = {}
        for tid, p in keys:
            by_topic.setdefault(tid, set()).add(p)
        single = [(tid, next(iter(ps))) for tid, ps in by_topic.items() if len(ps) == 1]
        many = [tid for tid, ps in by_topic.items() if len(ps) > 1]
        # A topic with several watched partitions: one query for all its high
        # watermarks (a poll of 8 partitions every 100 ms was 8 metastore reads, a
        # tenth of a core per idle worker of `floe dev`); a lone partition: its own.
        per_topic, per_partition = await asyncio.gather(
            asyncio.gather(*(self.meta.partition_offsets(t) for t in many), return_exceptions=True),
            asyncio.gather(
                *(self.meta.list_offsets(t, p, LATEST_TIMESTAMP) for t, p in single),
                return_exceptions=True,
            ),
        )
        for tid, r in zip(many, per_topic, strict=True):
            if not isinstance(r, BaseException):
                wanted = by_topic[tid]
                for po in r:
                    if po.partition in wanted:
                        offsets[(tid, po.partition)] = po.high_watermark
        for k, lo in zip(single, per_partition, strict=True):
            if not isinstance(lo, BaseException):
                offsets[k] = lo.offset
        moved: list[Key] = []
        for k, offset in offsets.items():
            prev = self._last.get(k)
            self._last[k] = offset
            if prev is not None and offset > prev:
                moved.append(k)
        if moved:
            self.notifier.notify(moved)
        if len(self._last) > 100_000:
            self._last.clear()
        return moved

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.interval_s)
            if not self.active():
                continue
            try:
                await self.poll_once()
            except asyncio.CancelledError:
                raise
            except Exception as e:
                log.debug("high-watermark poll failed: %s", e)
