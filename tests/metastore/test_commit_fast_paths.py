"""The per-batch fast paths of the group commit decide and store what the general
ones do: ``plan_commit_by_int`` (partitions by the topic id's int) against
``plan_commit``, ``group_outcome`` with ``make_rows`` against one ``make_row`` per
batch, and ``batch_rows`` against ``batch_tuple``. Pure Python, no database (the
contract suite runs the SQLite and Postgres commits themselves)."""

from __future__ import annotations

import uuid

from metastore import sqlite_log
from metastore.sequencer import (
    PartitionState,
    ProducerBatch,
    ProducerKey,
    group_outcome,
    object_spans,
    plan_commit,
    plan_commit_by_int,
)
from metastore.sqlite_log import batch_rows, batch_tuple
from metastore.types import BatchToCommit, ErrorCode, ObjectToCommit
from tests.metastore.helpers import batch

T1 = uuid.UUID(int=0x1234)
T2 = uuid.UUID("9f0c3a52-6a1e-4c55-9b7e-0d4f5c1e2a3b")
GHOST = uuid.UUID(int=77)  # no partitions: UNKNOWN_TOPIC_OR_PARTITION


def _batches() -> list[BatchToCommit]:
    """Plain batches on two topics (as fresh UUID objects, as parsed per request), an
    unknown partition, an idempotent producer with a duplicate and a gap, a marker."""
    return [
        batch(T1, 0, 3),
        batch(uuid.UUID(int=T1.int), 1, 1, size=7),
        batch(T2, 0, 2, pid=5, epoch=0, seq=0),
        batch(GHOST, 0),
        batch(T1, 9),  # no such partition
        batch(T2, 0, 2, pid=5, epoch=0, seq=0),  # duplicate: the original's offset
        batch(T2, 0, 1, pid=5, epoch=0, seq=7),  # out of order
        batch(T2, 0, 1, pid=5, epoch=1, seq=-1)._replace(is_transactional=True),  # marker
        batch(T1, 0, 2)._replace(is_transactional=True),
        batch(T2, 1, 4, pid=6, epoch=2, seq=3),  # no state: accepted
    ]


def _states() -> dict[tuple[uuid.UUID, int], PartitionState]:
    return {(T1, 0): PartitionState(0, 10), (T1, 1): PartitionState(2, 2),
            (T2, 0): PartitionState(0, 0), (T2, 1): PartitionState(0, 100)}  # fmt: skip


def _producers() -> dict[ProducerKey, list[ProducerBatch]]:
    return {(T2, 1, 9): [ProducerBatch(0, 0, 0, 99, 99, 1)]}


def test_plan_by_int_decides_as_plan_commit() -> None:
    batches = _batches()
    states, producers = _states(), _producers()
    want = plan_commit(batches, states, producers, 1000)
    states2, producers2 = _states(), _producers()
    got = plan_commit_by_int(batches, {(t.int, p): s for (t, p), s in states2.items()}, producers2, 1000)
    assert got == want
    assert states2 == states and producers2 == producers
    errors = [r.error for r in got.results]
    assert errors[3:5] == [ErrorCode.UNKNOWN_TOPIC_OR_PARTITION] * 2
    assert errors[6] is ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert got.results[5].base_offset == got.results[2].base_offset  # the duplicate
    assert got.accepted == {0, 1, 2, 7, 8, 9}
    assert states[(T1, 0)].high_watermark == 10 + 3 + 2 and states[(T1, 0)].added_bytes == 200


def _outcome(batches: list[BatchToCommit], fast: bool) -> tuple[object, list[object]]:
    objects = [ObjectToCommit("a", 1, "ag", batches[:4]), ObjectToCommit("b", 1, "ag", batches[4:])]
    plan = plan_commit(batches, _states(), _producers(), 1000)
    spans = object_spans(objects, [True, True], plan.accepted)
    make_rows = batch_rows if fast else None
    return group_outcome(spans, [11, 12], batches, plan, batch_tuple, 1000, make_rows)


def test_rows_in_one_call_are_the_rows_one_by_one() -> None:
    every = [b for b in _batches() if b.topic_id != GHOST and b.partition < 2 and b.producer_id < 0]
    for batches in (_batches(), every):  # with refused batches, and all stored
        out, rows = _outcome(batches, fast=True)
        assert (out, rows) == _outcome(batches, fast=False)
        assert len(rows) == (6 if batches is not every else len(every))


def test_batch_row_layout() -> None:
    b = BatchToCommit(T2, 3, 40, 50, 6, 5, 111, 222, 7, 1, 9, True)
    row = (T2.hex, 3, 105, 100, 8, 40, 50, 6, 111, 222, 1000, 7, 1, 9, 1)
    assert batch_tuple(b, 100, 8, 1000) == row
    assert batch_rows([b, b._replace(is_transactional=False)], [100, 200], 8, 1000) == [
        row, (T2.hex, 3, 205, 200, 8, 40, 50, 6, 111, 222, 1000, 7, 1, 9, 0)
    ]


def test_topic_hex_cache_is_bounded_and_right() -> None:
    ids = [uuid.UUID(int=i * 7919 + 1) for i in range(5000)]
    rows = batch_rows([batch(t, 0) for t in ids], range(len(ids)), 1, 1)
    assert [r[0] for r in rows] == [t.hex for t in ids]
    assert len(sqlite_log._HEX) <= 4096
