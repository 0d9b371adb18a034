"""The per-batch fast paths of the group commit decide and store what the general
ones do: ``plan_commit_by_int`` (partitions and producers by the topic id's int)
against ``plan_commit``, ``plan_in_order`` (each key's newest entry only) against
``plan_commit_by_int``, ``group_outcome`` with ``make_rows`` against one ``make_row``
per batch, ``batch_rows`` against ``batch_tuple``; and the SQLite commit of in-order
idempotent groups (producer entries copied from the batch rows) against its general
path. The contract suite runs the SQLite and Postgres commits themselves."""

from __future__ import annotations

import ast
import asyncio
import random
import sqlite3
import uuid
from pathlib import Path
from typing import Any

import pytest

from metastore import open_metastore, sqlite_commit, sqlite_log
from metastore.sequencer import (
    PartitionState,
    ProducerBatch,
    ProducerKey,
    group_outcome,
    object_spans,
    plan_commit,
    plan_commit_by_int,
)
from metastore.sequencer_core import INT32_MAX, CommitPlan, plan_in_order
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
    states2 = _states()
    producers2 = {(t.int, p, pid): v for (t, p, pid), v in _producers().items()}
    got = plan_commit_by_int(batches, {(t.int, p): s for (t, p), s in states2.items()}, producers2, 1000)
    assert got.results == want.results and got.accepted == want.accepted
    assert got.touched_producers == {(t.int, p, pid) for t, p, pid in want.touched_producers}
    assert states2 == states
    assert producers2 == {(t.int, p, pid): v for (t, p, pid), v in producers.items()}
    # plan_commit keeps the caller's UUID keys: the lists it edited, and one per new key
    assert set(producers) == {(T2, 1, 9), (T2, 0, 5), (T2, 1, 6)}
    assert producers[(T2, 0, 5)][-1].producer_epoch == 1  # the marker's newer epoch
    assert want.touched_producers == {(T2, 0, 5), (T2, 1, 6)}
    errors = [r.error for r in got.results]
    assert errors[3:5] == [ErrorCode.UNKNOWN_TOPIC_OR_PARTITION] * 2
    assert errors[6] is ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert got.results[5].base_offset == got.results[2].base_offset  # the duplicate
    assert got.accepted == {0, 1, 2, 7, 8, 9}
    assert states[(T1, 0)].high_watermark == 10 + 3 + 2 and states[(T1, 0)].added_bytes == 200


def _in_order() -> list[BatchToCommit]:
    """Idempotent batches each following its key's sequence (one wraps at int32 max,
    one key has no state), plain ones, an unknown partition."""
    return [
        batch(T1, 0, 2, pid=3, epoch=1, seq=10),
        batch(T1, 0, 1),
        batch(T1, 0, 3, pid=3, epoch=1, seq=12),
        batch(T2, 0, 2, pid=4, epoch=0, seq=INT32_MAX),  # wraps: its last sequence is 0
        batch(T2, 0, 1, pid=4, epoch=0, seq=1),
        batch(T1, 9, 1, pid=3, epoch=1, seq=99),  # no such partition
        batch(T2, 1, 1, pid=6, epoch=2, seq=40),  # no state
        *[batch(T1, 1, 1, pid=3, epoch=0, seq=s) for s in range(7)],  # more than 5 in a group
    ]


def _stored() -> dict[tuple[int, int, int], list[ProducerBatch]]:
    return {(T1.int, 0, 3): [ProducerBatch(1, 0, 4, 0, 4, 1), ProducerBatch(1, 5, 9, 5, 9, 1)],
            (T2.int, 0, 4): [ProducerBatch(0, INT32_MAX - 3, INT32_MAX - 1, 0, 2, 1)]}  # fmt: skip


def _plan_both(
    batches: list[BatchToCommit],
) -> tuple[CommitPlan, CommitPlan | None, dict[str, dict[tuple[int, int], PartitionState]]]:
    states = {(t.int, p): s for (t, p), s in _states().items()}
    states2 = {(t.int, p): s for (t, p), s in _states().items()}
    full = plan_commit_by_int(batches, states, _stored(), 1000)
    newest = {k: (v[-1].producer_epoch, v[-1].last_sequence) for k, v in _stored().items()}
    lean = plan_in_order(batches, states2, newest, 1000)
    return full, lean, {"full": states, "lean": states2}


def test_in_order_plan_decides_as_the_full_plan() -> None:
    full, lean, states = _plan_both(_in_order())
    assert lean is not None
    assert (lean.results, lean.accepted) == (full.results, full.accepted)
    assert states["lean"] == states["full"]
    assert len(full.accepted) == len(_in_order()) - 1


@pytest.mark.parametrize(
    "odd",
    [
        batch(T1, 0, 2, pid=3, epoch=1, seq=5),  # a retry of a stored batch (a duplicate)
        batch(T1, 0, 1, pid=3, epoch=1, seq=11),  # a gap
        batch(T1, 0, 1, pid=3, epoch=2, seq=0),  # an epoch bump
        batch(T1, 0, 1, pid=3, epoch=0, seq=10),  # an older epoch
        batch(T1, 0, 1, pid=3, epoch=1, seq=-1)._replace(is_transactional=True),  # a marker
    ],
)
def test_in_order_plan_gives_up_on_anything_else(odd: BatchToCommit) -> None:
    batches = [*_in_order()[:2], odd, *_in_order()[2:]]
    full, lean, _ = _plan_both(batches)
    assert lean is None
    assert full.accepted != set(range(len(batches))) or odd.base_sequence < 0
    # a batch of an unknown partition is refused whatever its sequence
    assert plan_in_order([batch(T1, 9, 1, pid=3, epoch=7, seq=-1)], {}, {}, 1000) is not None


def _commit_all(path: Path, groups: list[list[ObjectToCommit]]) -> list[object]:
    async def setup() -> uuid.UUID:
        ms = await open_metastore(f"sqlite+aiosqlite:///{path}")
        await ms.create_topic("t", 4)
        topic = await ms.get_topic("t")
        await ms.close()
        assert topic is not None
        return topic.id

    topic_id = asyncio.run(setup())
    db = sqlite3.connect(path, isolation_level=None)
    out: list[object] = []
    for n, group in enumerate(groups):
        objects = [o._replace(batches=[b._replace(topic_id=topic_id) for b in o.batches]) for o in group]
        db.execute("BEGIN IMMEDIATE")
        out.append(sqlite_commit.sqlite_commit(db, objects, 1000 + n))
        db.execute("COMMIT")
    for sql in (
        "SELECT * FROM batches",
        "SELECT topic_id, partition, log_start_offset, high_watermark, bytes FROM partitions",
        "SELECT * FROM producer_batches",
    ):
        rows = db.execute(sql).fetchall()
        out.append(sorted(repr(r).replace(topic_id.hex, "T") for r in rows))
    db.close()
    return out


def test_sqlite_in_order_groups_store_what_the_general_path_stores(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Idempotent producers in order (up to 8 batches of a key in a group, sequences
    wrapping at int32 max, plain batches between): the commit copies each stored
    batch's producer entry from its row and keeps each key's newest 5; the general
    path (plan_commit_by_int over the last 5 entries) stores the same tables."""
    rnd = random.Random(7)
    seqs: dict[tuple[int, int], int] = {}
    groups = []
    for g in range(12):
        objects = []
        for o in range(2):
            batches = []
            for _ in range(rnd.randrange(20)):
                p, pid, n = rnd.randrange(5), rnd.choice([1, 2]), rnd.randint(1, 3)
                if rnd.random() < 0.2:
                    batches.append(batch(T1, p, n))
                    continue
                seq = seqs.get((p, pid), INT32_MAX - 4 if pid == 2 else 0)
                batches.append(batch(T1, p, n, pid=pid, epoch=0, seq=seq))
                seqs[(p, pid)] = (seq + n) % (INT32_MAX + 1)
            objects.append(ObjectToCommit(f"g{g}o{o}", 1, "ag", batches))
        groups.append(objects)
    plans: list[CommitPlan | None] = []

    def spy(*args: Any) -> CommitPlan | None:
        plans.append(plan_in_order(*args))
        return plans[-1]

    with monkeypatch.context() as m:
        m.setattr(sqlite_commit, "plan_in_order", spy)
        lean = _commit_all(tmp_path / "lean.db", groups)
    assert len(plans) == len(groups) and None not in plans  # every group in order
    with monkeypatch.context() as m:
        m.setattr(sqlite_commit, "plan_in_order", lambda *a: None)  # the general path
        assert lean == _commit_all(tmp_path / "full.db", groups)
    stored = lean[-1]
    # 5 entries per key of the 4 partitions (partition 4 does not exist), 2 producers
    assert isinstance(stored, list) and len(stored) == 4 * 2 * 5
    # (topic, partition, producer id, base offset, epoch, first and last sequence, ...)
    entries = [ast.literal_eval(r) for r in stored]
    assert all(e[5] < 100 for e in entries if e[2] == 2)  # past int32 max: wrapped


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
