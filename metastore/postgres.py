"""``PostgresMetastore``: SQLAlchemy for cold operations, raw asyncpg for the hot paths.

``commit_object`` is one call of the plpgsql ``floe_commit_object`` (migration
0002) with one array per batch field, sent in autocommit mode on a pooled
asyncpg connection: one round trip per object. ``find_batches`` is one statement
reading the partition row and the batches in the same snapshot. Measured in
DESIGN.md: SQLAlchemy's async layer costs 22-25% on these paths.

The asyncpg pool skips asyncpg's default reset query on release (another round
trip per call) and only rolls back a connection left inside a transaction.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

import asyncpg

from metastore.base import Clock
from metastore.engine import asyncpg_dsn, create_engine
from metastore.log import DEFAULT_MAX_BATCHES
from metastore.sql import SqlMetastore
from metastore.types import (
    BatchLocation,
    BatchToCommit,
    CommitResult,
    ErrorCode,
    FindResult,
    MetastoreError,
    ObjectAlreadyCommittedError,
)

COMMIT_SQL = (
    "SELECT object_id, errors, base_offsets, log_start_offsets FROM floe_commit_object("
    "$1::text, $2::bigint, $3::text, $4::bigint, $5::uuid[], $6::integer[], $7::bigint[], $8::bigint[], "
    "$9::integer[], $10::integer[], $11::bigint[], $12::bigint[], $13::bigint[], $14::smallint[], "
    "$15::integer[], $16::boolean[])"
)

FIND_SQL = """
SELECT p.log_start_offset, p.high_watermark, x.key, x.byte_pos, x.byte_len, x.base_offset,
       x.last_offset, x.record_count, x.max_timestamp, x.append_time
  FROM partitions p
  LEFT JOIN LATERAL (
        SELECT o.key, w.byte_pos, w.byte_len, w.base_offset, w.last_offset, w.record_count,
               w.max_timestamp, w.append_time
          FROM (SELECT b.*, row_number() OVER (ORDER BY b.last_offset) AS rn,
                       sum(b.byte_len) OVER (ORDER BY b.last_offset) AS cum
                  FROM (SELECT * FROM batches
                         WHERE topic_id = p.topic_id AND partition = p.partition
                           AND last_offset >= $3
                         ORDER BY last_offset
                         LIMIT $5) b) w
          JOIN objects o ON o.id = w.object_id
         WHERE w.rn = 1 OR w.cum <= $4
  ) x ON $3 >= p.log_start_offset AND $3 < p.high_watermark
 WHERE p.topic_id = $1 AND p.partition = $2
 ORDER BY x.last_offset
"""

_CODES = {code.value: code for code in ErrorCode}
_EMPTY_COLUMNS: list[tuple[Any, ...]] = [() for _ in BatchToCommit._fields]


async def _reset(con: asyncpg.Connection) -> None:
    if con.is_in_transaction():
        await con.execute("ROLLBACK")


class PostgresMetastore(SqlMetastore):
    def __init__(self, url: str, now_ms: Clock | None = None, pool_size: int = 10) -> None:
        super().__init__(create_engine(url, pool_size=pool_size, max_overflow=0), now_ms)
        self._dsn = asyncpg_dsn(url)
        self._pool_size = pool_size
        self._pool: asyncpg.Pool | None = None

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
        now = self.now_ms()
        columns = list(zip(*batches, strict=True)) if batches else _EMPTY_COLUMNS
        try:
            async with self._require_pool().acquire() as con:
                row = await con.fetchrow(COMMIT_SQL, key, size, agent_id, now, *columns)
        except asyncpg.UniqueViolationError as e:
            raise ObjectAlreadyCommittedError(f"object {key!r} is already committed") from e
        except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError) as e:
            raise MetastoreError(f"commit of {key!r} failed: {e}") from e
        codes = _CODES
        return [
            CommitResult(codes[err], base, now, lso)
            for err, base, lso in zip(
                row["errors"], row["base_offsets"], row["log_start_offsets"], strict=True
            )
        ]

    async def find_batches(
        self,
        topic_id: uuid.UUID,
        partition: int,
        offset: int,
        max_bytes: int,
        max_batches: int = DEFAULT_MAX_BATCHES,
    ) -> FindResult:
        try:
            async with self._require_pool().acquire() as con:
                rows = await con.fetch(
                    FIND_SQL, topic_id, partition, offset, max_bytes, max(1, max_batches)
                )
        except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError) as e:
            raise MetastoreError(f"find_batches failed: {e}") from e
        if not rows:
            return FindResult(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, -1, -1)
        lso, hwm = rows[0]["log_start_offset"], rows[0]["high_watermark"]
        if offset < lso or offset > hwm:
            return FindResult(ErrorCode.OFFSET_OUT_OF_RANGE, lso, hwm)
        if rows[0]["key"] is None:
            return FindResult(ErrorCode.NONE, lso, hwm)
        return FindResult(
            ErrorCode.NONE,
            lso,
            hwm,
            [BatchLocation(r[2], r[3], r[4], r[5], r[6], r[7], r[8], r[9]) for r in rows],
        )
