"""``PostgresMetastore``: SQLAlchemy for cold operations, raw asyncpg for the hot paths.

``commit_objects`` (group commit, :mod:`metastore.pg_group` and migrations
0005 and 0014): a group of at least ``COPY_MIN_BATCHES`` batches whose
partitions' high watermarks this process expects (:mod:`metastore.expected_hwm`)
is committed optimistically (object rows, the COPY at the expected offsets,
then ``floe_group_seal`` locks and checks), else takes the fast path
(``floe_group_begin``, one binary COPY of the batch rows, COMMIT) or, when that
declines, the general ``floe_commit_objects``; smaller groups take the general
function in one round trip, a single small object migration 0002's leaner
``floe_commit_object``. ``commit_object`` is a group of one. ``find_batches`` is one statement
reading the partition row and the batches in the same snapshot. Measured in
DESIGN.md: SQLAlchemy's async layer costs 22-25% on these paths.

The asyncpg pool skips asyncpg's default reset query on release (another round
trip per call) and only rolls back a connection left inside a transaction.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import AsyncIterator, Iterable, Sequence
from operator import attrgetter
from typing import Any

import asyncpg

from metastore import runs
from metastore.base import Clock
from metastore.commit_order import CommitTurn
from metastore.compaction import COMPACTOR_AGENT_ID
from metastore.engine import asyncpg_dsn, create_engine
from metastore.expected_hwm import ExpectedWatermarks
from metastore.log import DEFAULT_MAX_BATCHES
from metastore.pg_group import (
    BEGIN_SQL,
    GENERAL_SQL,
    OBJECTS_SQL,
    SEAL_SQL,
    GroupCommit,
)
from metastore.pg_reads import CONNECTION_ERRORS, PgReadsMixin
from metastore.pg_runs import HEADS_SQL, Copy, group_copy, prepare
from metastore.pg_swap import pg_move
from metastore.sql import SqlMetastore
from metastore.sqlite_swap import Conflict, NotAMove
from metastore.types import (
    BatchToCommit,
    CommitResult,
    ErrorCode,
    FindResult,
    MetastoreError,
    NewObject,
    ObjectAlreadyCommittedError,
    ObjectCommitResult,
    ObjectToCommit,
    StoredBatch,
    SwapResult,
)

COMMIT_SQL = (
    "SELECT object_id, errors, base_offsets, log_start_offsets FROM floe_commit_object("
    "$1::text, $2::bigint, $3::text, $4::bigint, $5::uuid[], $6::integer[], $7::bigint[], $8::bigint[], "
    "$9::integer[], $10::integer[], $11::bigint[], $12::bigint[], $13::bigint[], $14::smallint[], "
    "$15::integer[], $16::boolean[])"
)

def _lookup(topic: str, partition: str, offset: str, max_bytes: str) -> str:
    """The batch lookup both statements below run per partition (a LATERAL
    subquery over the outer row's ``topic``/``partition``/``offset``/``max_bytes``
    expressions): the rows from ``offset`` on, up to the one that crosses
    ``max_bytes``, counting a leading run's bytes as none (some lie before
    ``offset``); ``runs.expand`` trims exactly."""
    return f"""
        SELECT o.key, r.byte_pos, r.byte_len, r.base_offset, r.last_offset, r.record_count,
               r.max_timestamp, r.append_time, r.entries
          FROM (SELECT b.*, row_number() OVER ow AS rn, sum(b.byte_len) OVER ow AS cum,
                       CASE WHEN first_value(b.entries IS NOT NULL) OVER ow
                            THEN first_value(b.byte_len) OVER ow ELSE 0 END AS lead_len
                  FROM (SELECT * FROM batches
                         WHERE topic_id = {topic} AND partition = {partition}
                           AND last_offset >= {offset}
                         ORDER BY last_offset
                         LIMIT $5) b
                WINDOW ow AS (ORDER BY b.last_offset)) r
          JOIN objects o ON o.id = r.object_id
         WHERE r.rn = 1 OR r.cum - r.byte_len - r.lead_len < {max_bytes}"""


FIND_SQL = f"""
SELECT p.log_start_offset, p.high_watermark, x.key, x.byte_pos, x.byte_len, x.base_offset,
       x.last_offset, x.record_count, x.max_timestamp, x.append_time, x.entries
  FROM partitions p
  LEFT JOIN LATERAL ({_lookup("p.topic_id", "p.partition", "$3", "$4")}
  ) x ON $3 >= p.log_start_offset AND $3 < p.high_watermark
 WHERE p.topic_id = $1 AND p.partition = $2
 ORDER BY x.last_offset
"""

# FIND_SQL for many partitions in one statement: row ``i`` (1-based) of the
# arrays is one lookup; a partition that does not exist has no row.
FIND_MANY_SQL = f"""
SELECT w.i, p.log_start_offset, p.high_watermark, x.key, x.byte_pos, x.byte_len, x.base_offset,
       x.last_offset, x.record_count, x.max_timestamp, x.append_time, x.entries
  FROM unnest($1::uuid[], $2::int[], $3::bigint[], $4::bigint[])
       WITH ORDINALITY AS w(topic_id, partition, off, max_bytes, i)
  JOIN partitions p ON p.topic_id = w.topic_id AND p.partition = w.partition
  LEFT JOIN LATERAL ({_lookup("w.topic_id", "w.partition", "w.off", "w.max_bytes")}
  ) x ON w.off >= p.log_start_offset AND w.off < p.high_watermark
 ORDER BY w.i, x.last_offset
"""

KEYS_SQL = "SELECT id, key FROM objects WHERE id = ANY($1::bigint[])"
_KEY_CACHE = 100_000

# Groups with fewer batches take the one-call general path: the fast path's
# extra round trips (BEGIN, COPY, COMMIT) cost more than they save below this.
COPY_MIN_BATCHES = 512
# How long an optimistic group without a turn waits for the previous one's seal.
SEAL_ORDER_WAIT_S = 2.0
_UUID_INT = attrgetter("int")

_CODES = {code.value: code for code in ErrorCode}
_EMPTY_COLUMNS: list[tuple[Any, ...]] = [() for _ in BatchToCommit._fields]


async def _reset(con: asyncpg.Connection) -> None:
    if con.is_in_transaction():
        await con.execute("ROLLBACK")


async def _copy_batches(con: asyncpg.Connection, copy: Copy) -> None:
    """One binary COPY of a group's batch and run rows (``metastore.pg_runs``), and
    the head of its run rows on the objects packed in them. A memoryview, not a
    file: asyncpg reads a file-like source through the default thread pool (two
    hand-offs per COPY), and takes ``bytes`` for a path."""
    await con.copy_to_table("batches", source=memoryview(copy.data), columns=copy.columns, format="binary")
    if copy.head is not None:
        await con.execute(HEADS_SQL, copy.head, copy.members)


async def _rollback_if_open(con: asyncpg.Connection) -> None:
    """Declined or failed: nothing of the transaction stays. A connection already
    lost (or its pool proxy already released) has nothing to roll back here."""
    with contextlib.suppress(*CONNECTION_ERRORS):
        if not con.is_closed() and con.is_in_transaction():
            await con.execute("ROLLBACK")




class _OneLineWhileDown(logging.Filter):
    """asyncpg's pool logs "Failed to restore the pool connection floor" with a
    traceback on every retry while Postgres is down: keep the line, drop the
    traceback (the outage is reported once by the callers, issue 15)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.exc_info and record.exc_info[1] is not None:
            e = record.exc_info[1]
            record.msg = f"{record.msg} ({type(e).__name__}: {e})"
            record.exc_info = None
            record.exc_text = None
        return True


logging.getLogger("asyncpg.pool").addFilter(_OneLineWhileDown())

class PostgresMetastore(PgReadsMixin, SqlMetastore):
    # commit_objects(turn=...) waits for the previous turn before locking partition
    # rows and marks its own once they are held (metastore.commit_order).
    ordered_commits = True
    # One index row per partition run where a group has several batches of it
    # (issue 41); off only in loadtest.metastore's baseline of the path before runs.
    run_rows = True

    def __init__(self, url: str, now_ms: Clock | None = None, pool_size: int = 10) -> None:
        super().__init__(create_engine(url, pool_size=pool_size, max_overflow=0), now_ms)
        self._dsn = asyncpg_dsn(url)
        self._pool_size = pool_size
        self._pool: asyncpg.Pool | None = None
        self._expected = ExpectedWatermarks()  # the optimistic group commit's hints
        self._sealed: asyncio.Event | None = None  # the last optimistic group's seal
        self._keys: dict[int, str] = {}  # object keys named inside run rows

    async def start(self) -> PostgresMetastore:
        try:
            self._pool = await asyncpg.create_pool(
                self._dsn,
                min_size=1,
                max_size=self._pool_size,
                reset=_reset,
                server_settings={"jit": "off"},
            )
        except (OSError, asyncpg.PostgresError) as e:
            raise MetastoreError(f"cannot connect to the metastore: {e}") from e
        return self

    async def close(self) -> None:
        if self._pool is not None:
            await self._pool.close()
            self._pool = None
        await super().close()

    def _require_pool(self) -> asyncpg.Pool:
        if self._pool is None:
            raise MetastoreError("PostgresMetastore is not started (use open_metastore)")
        return self._pool

    async def commit_object(
        self, key: str, size: int, agent_id: str, batches: Sequence[BatchToCommit]
    ) -> list[CommitResult]:
        (res,) = await self.commit_objects([ObjectToCommit(key, size, agent_id, batches)])
        if res.already_committed:
            raise ObjectAlreadyCommittedError(f"object {key!r} is already committed")
        return res.results

    async def commit_objects(
        self, objects: Sequence[ObjectToCommit], *, turn: CommitTurn | None = None
    ) -> list[ObjectCommitResult]:
        """The whole group in one transaction: optimistically (the rows COPYed at the
        expected offsets, then ``floe_group_seal``), else the fast path
        (``floe_group_begin`` + one COPY of the batch rows), else the general
        ``floe_commit_objects``. With ``turn``: no partition lock before the previous
        turn is sequenced, and this one is marked as soon as its locks are held."""
        if turn is not None:
            # Then no await before the plan (expected watermarks, forget): the
            # calls plan in turn order.
            await turn.begin()
        if any(b.producer_id >= 0 and b.base_sequence < 0 for o in objects for b in o.batches):
            # Transaction markers (rare): the generic SQL sequencer knows them; it
            # locks the same partition rows in the same order as the functions.
            keys = list({(b.topic_id.int, b.partition) for o in objects for b in o.batches})
            self._expected.forget(keys)
            try:
                if turn is not None:
                    await turn.wait()
                out = await super().commit_objects(objects)
            finally:
                self._expected.forget(keys)
            if turn is not None:
                turn.done()
            return out
        now = self.now_ms()
        n = sum(len(o.batches) for o in objects)
        if n < COPY_MIN_BATCHES:
            keys = list({(b.topic_id.int, b.partition) for o in objects for b in o.batches})
            self._expected.forget(keys)
            try:
                async with self._acquire() as con:
                    if turn is not None:
                        await turn.wait()
                    if len(objects) == 1:
                        # one small object: migration 0002's function is the leanest
                        small = [await self._commit_one(con, objects[0], now)]
                    else:
                        # one round trip beats BEGIN + COPY + COMMIT
                        group = GroupCommit(objects)
                        row = await con.fetchrow(GENERAL_SQL, now, *group.general_args())
                        small = group.general_results(row, now)
            finally:
                self._expected.forget(keys)
            if turn is not None:
                turn.done()
            return small
        group = GroupCommit(objects)
        keys = list(zip(map(_UUID_INT, group.t_topic), group.t_part, strict=True))
        sizes = group.t_size.tolist()
        if turn is None:
            await self._expected.settle(keys, SEAL_ORDER_WAIT_S)
        expected = self._expected.plan(keys, sizes)
        if expected is not None:
            # Without a turn, optimistic groups still seal in the order they were
            # planned (each expects the watermarks the previous one leaves): the
            # seal waits, bounded, until the previous group's seal has answered.
            after, sealed = (None, None) if turn is not None else (self._sealed, asyncio.Event())
            if sealed is not None:
                self._sealed = sealed
            try:
                async with self._acquire() as con:
                    results = await self._commit_optimistic(
                        con, group, expected, now, turn, after, sealed
                    )
            except BaseException:
                self._expected.miss(keys)
                raise
            finally:
                if sealed is not None:
                    sealed.set()
            if results is not None:
                self._expected.hit()
                return results
            self._expected.miss(keys)
            self._expected.plan(keys, sizes)  # (pausing now) the ordinary way, marked busy
        before: list[int] | None = None
        try:
            async with self._acquire() as con:
                prepare(group, self.run_rows)
                if turn is not None:
                    await turn.wait()
                await con.execute("BEGIN")
                try:
                    row = await con.fetchrow(BEGIN_SQL, now, *group.begin_args())
                    if row["fast"]:
                        if turn is not None:
                            turn.done()  # the partition rows are locked
                        if group.n:
                            copy = group_copy(group, row["object_ids"], row["high_watermarks"], now, self.run_rows)
                            await _copy_batches(con, copy)
                        await con.execute("COMMIT")
                        before = list(row["high_watermarks"] or [])
                        return group.fast_results(before, row["log_start_offsets"] or [], now)
                finally:
                    await _rollback_if_open(con)
                row = await con.fetchrow(GENERAL_SQL, now, *group.general_args())
                general = group.general_results(row, now)
                if turn is not None:
                    turn.done()
                return general
        finally:
            self._expected.release(keys, before, sizes)

    async def _commit_optimistic(
        self,
        con: asyncpg.Connection,
        group: GroupCommit,
        expected: list[int],
        now: int,
        turn: CommitTurn | None,
        after: asyncio.Event | None = None,
        sealed: asyncio.Event | None = None,
    ) -> list[ObjectCommitResult] | None:
        """Objects, COPY at ``expected``, seal, COMMIT; ``None`` (rolled back) when
        an object key is taken or the seal declines. The object rows and the COPY
        hold no partition lock, so they run before ``turn``'s wait (or, without a
        turn, before waiting for ``after``, the previous optimistic group's seal;
        ``sealed`` is this group's, set once the seal has answered)."""
        prepare(group, self.run_rows)
        await con.execute("BEGIN")
        try:
            ids = await con.fetchval(OBJECTS_SQL, now, *group.objects_args())
            if ids is None or None in ids:
                return None
            if group.n:
                await _copy_batches(con, group_copy(group, ids, expected, now, self.run_rows))
            if turn is not None:
                await turn.wait()
            elif after is not None and not after.is_set():
                # Bounded: the order is only a hint (the seal checks the watermarks
                # under the locks), and the previous group might be waiting on one
                # of this transaction's rows (the same object key in both).
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(after.wait(), SEAL_ORDER_WAIT_S)
            row = await con.fetchrow(SEAL_SQL, now, *group.seal_args(expected))
            if sealed is not None:
                sealed.set()  # our partition rows are locked (or we declined)
            if not row["fast"]:
                return None
            if turn is not None:
                turn.done()  # the partition rows are locked
            await con.execute("COMMIT")
            return group.fast_results(expected, row["log_start_offsets"] or [], now)
        except (asyncpg.UniqueViolationError, asyncpg.DeadlockDetectedError):
            # rows at the expected offsets exist (someone else wrote there), or this
            # group and another writer's waited on each other: the ordinary way
            return None
        finally:
            await _rollback_if_open(con)

    @contextlib.asynccontextmanager
    async def _acquire(self) -> AsyncIterator[asyncpg.Connection]:
        try:
            async with self._require_pool().acquire() as con:
                yield con
        except CONNECTION_ERRORS as e:
            raise MetastoreError(f"group commit failed: {e}") from e

    async def _commit_one(
        self, con: asyncpg.Connection, obj: ObjectToCommit, now: int
    ) -> ObjectCommitResult:
        columns = list(zip(*obj.batches, strict=True)) if obj.batches else _EMPTY_COLUMNS
        try:
            row = await con.fetchrow(COMMIT_SQL, obj.key, obj.size, obj.agent_id, now, *columns)
        except asyncpg.UniqueViolationError:
            return ObjectCommitResult([], already_committed=True)
        codes = _CODES
        return ObjectCommitResult(
            [
                CommitResult(codes[err], base, now, lso)
                for err, base, lso in zip(
                    row["errors"], row["base_offsets"], row["log_start_offsets"], strict=True
                )
            ]
        )

    async def _move(
        self,
        expected: Sequence[StoredBatch],
        replacements: Sequence[StoredBatch],
        new_objects: Sequence[NewObject],
        now: int,
    ) -> SwapResult | None:
        """A pure move without partition locks (metastore.pg_swap); None when a run
        row is involved (the general path does it)."""
        try:
            async with self._acquire() as con:
                async with con.transaction():
                    return await pg_move(con, expected, replacements, new_objects, COMPACTOR_AGENT_ID, now)
        except NotAMove:
            return None
        except (Conflict, asyncpg.DeadlockDetectedError) as e:
            return await self._conflicted(new_objects, now, str(e))

    async def find_batches_many(
        self, wants: Sequence[tuple[uuid.UUID, int, int, int]], max_batches: int = DEFAULT_MAX_BATCHES
    ) -> list[FindResult]:
        if not wants:
            return []
        rows = await self._fetch(
            "find_batches_many",
            FIND_MANY_SQL,
            [w[0] for w in wants],
            [w[1] for w in wants],
            [w[2] for w in wants],
            [w[3] for w in wants],
            max(1, max_batches),
        )
        by_index: dict[int, list[Any]] = {}
        for r in rows:
            by_index.setdefault(r[0] - 1, []).append(r)
        keys = await self._run_keys(r[11] for r in rows)
        out: list[FindResult] = []
        for i, (_, _, offset, max_bytes) in enumerate(wants):
            got = by_index.get(i)
            if not got:
                out.append(FindResult(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, -1, -1))
                continue
            lso, hwm = got[0][1], got[0][2]
            if offset < lso or offset > hwm:
                out.append(FindResult(ErrorCode.OFFSET_OUT_OF_RANGE, lso, hwm))
            elif got[0][3] is None:
                out.append(FindResult(ErrorCode.NONE, lso, hwm))
            else:
                found = runs.expand([r[3:] for r in got], keys, offset, max_bytes, max_batches)
                out.append(FindResult(ErrorCode.NONE, lso, hwm, found))
        return out

    async def _run_keys(self, entries: Iterable[bytes | None]) -> dict[int, str]:
        """The keys of the objects named inside run rows (ids are never reused on
        Postgres, so they are kept; a bounded cache)."""
        ids = runs.run_object_ids(entries)
        missing = [i for i in ids if i not in self._keys]
        if missing:
            if len(self._keys) + len(missing) > _KEY_CACHE:
                self._keys.clear()
                missing = list(ids)  # what this answer needs, all of it
            found = await self._fetch("object keys", KEYS_SQL, missing)
            self._keys.update((r[0], r[1]) for r in found)
        return self._keys

    async def find_batches(
        self,
        topic_id: uuid.UUID,
        partition: int,
        offset: int,
        max_bytes: int,
        max_batches: int = DEFAULT_MAX_BATCHES,
    ) -> FindResult:
        rows = await self._fetch(
            "find_batches", FIND_SQL, topic_id, partition, offset, max_bytes, max(1, max_batches)
        )
        if not rows:
            return FindResult(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, -1, -1)
        lso, hwm = rows[0]["log_start_offset"], rows[0]["high_watermark"]
        if offset < lso or offset > hwm:
            return FindResult(ErrorCode.OFFSET_OUT_OF_RANGE, lso, hwm)
        if rows[0]["key"] is None:
            return FindResult(ErrorCode.NONE, lso, hwm)
        keys = await self._run_keys(r[10] for r in rows)
        found = runs.expand([r[2:] for r in rows], keys, offset, max_bytes, max_batches)
        return FindResult(ErrorCode.NONE, lso, hwm, found)

