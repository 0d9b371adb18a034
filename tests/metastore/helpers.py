"""Helpers of the metastore tests: a settable clock and a short batch constructor."""

from __future__ import annotations

import uuid

from metastore import BatchToCommit


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
