"""read_committed's last stable offsets on SQLite, when nothing holds them back.

Where it sits: :meth:`metastore.txn.TxnMixin.stable_offsets` asks here first on a
SQLite metastore (``floe dev``, a single-node agent); the agent's Fetch path asks
for every read_committed Fetch that found data (librdkafka consumers read
committed by default). Postgres has its own (``metastore.pg_reads``).

Why: the general query goes through SQLAlchemy, whose statement building and
cache-key generation cost more than the query, once per Fetch with data (a
librdkafka consumer at the tail of a Java producer on ``floe dev`` sends ~100
such Fetches a second). Here one raw statement per partition, on sqlite3's
statement cache, in one call on the connection: each partition's high
watermark and whether any open transaction or aborted range touches it. When
none does - no transactions on the topic, the usual case - the last stable
offset is the high watermark and there is nothing to skip; otherwise
(``None``) the general query answers.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from metastore.types import ErrorCode, StableOffsets

_STATE = (
    "SELECT high_watermark,"
    " EXISTS (SELECT 1 FROM txn_partitions t WHERE t.topic_id = p.topic_id AND t.partition = p.partition)"
    " OR EXISTS (SELECT 1 FROM aborted_txns a WHERE a.topic_id = p.topic_id AND a.partition = p.partition)"
    " FROM partitions p WHERE p.topic_id = ? AND p.partition = ?"
)


def _plain(db: Any, partitions: list[tuple[str, int]]) -> list[StableOffsets] | None:
    out: list[StableOffsets] = []
    for key in partitions:
        row = db.execute(_STATE, key).fetchone()
        if row is None:
            out.append(StableOffsets(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION))
            continue
        hwm, held = row
        if held:
            return None
        out.append(StableOffsets(ErrorCode.NONE, hwm, hwm, []))
    return out


async def sqlite_plain_stable_offsets(
    read_raw: Callable[..., Awaitable[Any]], partitions: Sequence[tuple[uuid.UUID, int, int]]
) -> list[StableOffsets] | None:
    """The answers of ``stable_offsets`` if no partition among ``partitions`` has an
    open transaction or an aborted range; None otherwise (ask the general query).
    ``read_raw`` is ``SqlBase._read_raw``."""
    keys = [(t.hex, p) for t, p, _ in partitions]
    result: list[StableOffsets] | None = await read_raw(_plain, keys)
    return result
