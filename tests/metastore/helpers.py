"""Helpers of the metastore tests: a settable clock and a short batch constructor."""

from __future__ import annotations

import uuid
from typing import Any

from metastore import BatchToCommit, runs


class FakeClock:
    def __init__(self, now: int = 1_700_000_000_000) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now

    def advance(self, ms: int) -> None:
        self.now += ms


def batch(
    topic_id: uuid.UUID,
    partition: int,
    records: int = 1,
    *,
    pos: int = 0,
    size: int = 100,
    ts: int = 1000,
    pid: int = -1,
    epoch: int = -1,
    seq: int = -1,
) -> BatchToCommit:
    return BatchToCommit(
        topic_id, partition, pos, size, records, records - 1, ts, ts, pid, epoch, seq
    )


async def stored_batches(con: Any) -> list[tuple[uuid.UUID, int, int, int, int]]:
    """Every batch in ``batches`` as ``(topic_id, partition, base_offset, last_offset,
    object_id)``, ordered, run rows (metastore.runs) unpacked: on an asyncpg
    connection."""
    out = []
    for r in await con.fetch("SELECT topic_id, partition, base_offset, last_offset, object_id, entries FROM batches"):
        if r["entries"] is None:
            out.append((r["topic_id"], r["partition"], r["base_offset"], r["last_offset"], r["object_id"]))
        else:
            for e in runs.unpack(r["entries"]).tolist():
                out.append((r["topic_id"], r["partition"], e[0], e[1], e[2]))
    out.sort()
    return out
