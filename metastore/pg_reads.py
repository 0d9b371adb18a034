"""Postgres fast paths of hot, wide reads: one asyncpg statement over arrays.

Where it sits: mixed into :class:`metastore.postgres.PostgresMetastore` ahead of
the implementations SQLite keeps (``TxnMixin.stable_offsets`` in SQLAlchemy,
``TopicsMixin.partition_offsets`` and ``topic_offsets`` as raw sqlite3 statements). Every read_committed
Fetch with data asks for the last stable offsets of its partitions, and a
consumer of a wide topic asks for the watermarks of every partition; through
SQLAlchemy those cost a compiled, cache-keyed statement per 64 partitions
(expanding tuple IN lists) and a statement per open transaction. Here each is
one prepared statement over ``unnest`` arrays, and the answers are the same
(the metastore contract suite runs both).

``stable_offsets`` reads everything in one statement, so in one snapshot: the
high watermark, the first batch of every open transaction (the last stable
offset is the lowest of these and the high watermark) and the aborted
transactions from the fetch offset below it.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

import asyncpg

from metastore.types import ErrorCode, MetastoreError, PartitionOffsets, StableOffsets, TopicOffsets

# A lost or confused connection: the outcome is unknown (MetastoreError, the caller
# retries). InternalClientError is asyncpg's "another operation is in progress" on a
# connection whose session the server terminated mid-statement.
CONNECTION_ERRORS = (OSError, asyncpg.PostgresError, asyncpg.InterfaceError, asyncpg.InternalClientError)

STABLE_SQL = """
SELECT w.i, p.high_watermark, l.lso, ab.pids, ab.firsts, ab.lasts
  FROM unnest($1::uuid[], $2::integer[], $3::bigint[])
       WITH ORDINALITY AS w(topic_id, partition, fetch_offset, i)
  JOIN partitions p ON p.topic_id = w.topic_id AND p.partition = w.partition
 CROSS JOIN LATERAL (
        SELECT LEAST(p.high_watermark, (
                 SELECT min(b.base_offset)
                   FROM txn_partitions tp
                   JOIN batches b ON b.topic_id = tp.topic_id AND b.partition = tp.partition
                                 AND b.last_offset >= tp.first_offset
                                 AND b.producer_id = tp.producer_id AND b.is_transactional
                  WHERE tp.topic_id = w.topic_id AND tp.partition = w.partition)) AS lso
  ) l
  LEFT JOIN LATERAL (
        SELECT array_agg(a.producer_id ORDER BY a.first_offset, a.producer_id) AS pids,
               array_agg(a.first_offset ORDER BY a.first_offset, a.producer_id) AS firsts,
               array_agg(a.last_offset ORDER BY a.first_offset, a.producer_id) AS lasts
          FROM aborted_txns a
         WHERE a.topic_id = w.topic_id AND a.partition = w.partition
           AND a.last_offset >= w.fetch_offset AND a.first_offset < l.lso
  ) ab ON true
"""

OFFSETS_SQL = """
SELECT partition, log_start_offset, high_watermark
  FROM partitions WHERE topic_id = $1 ORDER BY partition
"""

# The same rows, and (one snapshot) whether the topic holds no transaction state.
TOPIC_OFFSETS_SQL = """
SELECT partition, log_start_offset, high_watermark,
       NOT EXISTS (SELECT 1 FROM txn_partitions WHERE topic_id = $1)
       AND NOT EXISTS (SELECT 1 FROM aborted_txns WHERE topic_id = $1)
  FROM partitions WHERE topic_id = $1 ORDER BY partition
"""


class PgReadsMixin:
    """``stable_offsets``, ``partition_offsets`` and ``topic_offsets`` as single asyncpg statements."""

    def _require_pool(self) -> asyncpg.Pool:  # provided by PostgresMetastore
        raise NotImplementedError

    async def _fetch(self, what: str, sql: str, *args: Any) -> list[asyncpg.Record]:
        """One statement on a pooled connection; a lost connection is a MetastoreError."""
        try:
            async with self._require_pool().acquire() as con:
                rows: list[asyncpg.Record] = await con.fetch(sql, *args)
                return rows
        except CONNECTION_ERRORS as e:
            raise MetastoreError(f"{what} failed: {e}") from e

    async def stable_offsets(
        self, partitions: Sequence[tuple[uuid.UUID, int, int]]
    ) -> list[StableOffsets]:
        """Per ``(topic_id, partition, fetch_offset)``: the last stable offset and the
        aborted transactions a read_committed reader from ``fetch_offset`` must skip."""
        if not partitions:
            return []
        rows = await self._fetch(
            "stable_offsets",
            STABLE_SQL,
            [t for t, _, _ in partitions],
            [p for _, p, _ in partitions],
            [o for _, _, o in partitions],
        )
        found: dict[int, Any] = {r[0] - 1: r for r in rows}
        out: list[StableOffsets] = []
        for i in range(len(partitions)):
            r = found.get(i)
            if r is None:
                out.append(StableOffsets(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION))
                continue
            ranges = list(zip(r[3], r[4], r[5], strict=True)) if r[3] is not None else []
            out.append(StableOffsets(ErrorCode.NONE, r[2], r[1], ranges))
        return out

    async def partition_offsets(self, topic_id: uuid.UUID) -> list[PartitionOffsets]:
        """Log start offset and high watermark of every partition of a topic, in
        partition order; empty for an unknown or deleted topic."""
        rows = await self._fetch("partition_offsets", OFFSETS_SQL, topic_id)
        return [PartitionOffsets(r[0], r[1], r[2]) for r in rows]

    async def topic_offsets(self, topic_id: uuid.UUID) -> TopicOffsets:
        """``partition_offsets`` and whether the topic holds no transaction state,
        in one statement (one snapshot)."""
        rows = await self._fetch("topic_offsets", TOPIC_OFFSETS_SQL, topic_id)
        return TopicOffsets([PartitionOffsets(r[0], r[1], r[2]) for r in rows], all(r[3] for r in rows))
