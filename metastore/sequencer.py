"""The sequencer's decision logic in pure Python: offsets and idempotent producers.

``plan_commit`` takes the locked partition rows and the producer state of every
``(topic, partition, producer)`` an object touches, and decides per batch: error,
duplicate (returns the original offset, not stored) or accepted (gets
``base = high_watermark``, which then advances by ``last_offset_delta + 1``).
The SQLite (and generic SQL) commit runs it inside one ``BEGIN IMMEDIATE``
transaction over a whole group of objects; on Postgres the plpgsql functions
of migrations 0002 (one object) and 0005 (group commit: a fast path for
in-order batches, a key-by-key port of ``_check_producer`` otherwise) do the
same, and the contract and parity suites hold them all to one behaviour.

Producer rules follow Kafka's ``ProducerStateManager`` / ``ProducerAppendInfo``:
- producer id -1: no checks;
- a batch equal (epoch, first and last sequence) to one of the producer's last 5
  batches on the partition is a duplicate: NONE with the original base offset;
- an epoch older than the partition's current one: INVALID_PRODUCER_EPOCH;
- a newer epoch must start at sequence 0 (else OUT_OF_ORDER_SEQUENCE_NUMBER) and
  resets the state;
- same epoch: the sequence must follow the last one (wrapping at int32 max), else
  OUT_OF_ORDER_SEQUENCE_NUMBER; this includes retries of batches older than the
  last 5, as in Kafka >= 2.x (DUPLICATE_SEQUENCE_NUMBER is not used any more);
- no state for the producer on this partition: any sequence is accepted (Kafka
  since KIP-360);
- a transaction marker (producer id set, sequence -1) is always accepted and
  leaves a newer epoch behind as the producer's state (fencing older epochs).
  Postgres commits groups holding markers through this code (``PostgresMetastore``).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping, MutableMapping, Sequence
from dataclasses import dataclass, field
from itertools import repeat
from typing import Any, NamedTuple

from metastore.types import (
    BatchToCommit,
    CommitResult,
    ErrorCode,
    ObjectCommitResult,
    ObjectToCommit,
)

INT32_MAX = 2**31 - 1
PRODUCER_STATE_BATCHES = 5

PartitionKey = tuple[uuid.UUID, int]
ProducerKey = tuple[uuid.UUID, int, int]


def last_sequence(base_sequence: int, last_offset_delta: int) -> int:
    """Sequence of the batch's last record; sequences wrap from int32 max to 0."""
    last = base_sequence + last_offset_delta
    return last - INT32_MAX - 1 if last > INT32_MAX else last


def in_sequence(last_seq: int, next_seq: int) -> bool:
    return next_seq == last_seq + 1 or (next_seq == 0 and last_seq == INT32_MAX)


@dataclass(slots=True)
class PartitionState:
    log_start_offset: int
    high_watermark: int
    added_bytes: int = 0
    changed: bool = False


class ProducerBatch(NamedTuple):
    producer_epoch: int
    base_sequence: int
    last_sequence: int
    base_offset: int
    last_offset: int
    append_time: int


@dataclass(slots=True)
class CommitPlan:
    results: list[CommitResult]
    accepted: set[int] = field(default_factory=set)  # indexes of batches to store
    touched_producers: set[ProducerKey] = field(default_factory=set)


def plan_commit(
    batches: Sequence[BatchToCommit],
    partitions: Mapping[PartitionKey, PartitionState],
    producers: MutableMapping[ProducerKey, list[ProducerBatch]],
    now_ms: int,
) -> CommitPlan:
    """Decide every batch in order; mutates ``partitions`` and ``producers`` to the
    state to write back (producer lists: oldest first, at most 5 entries)."""
    by_int = {(t.int, p): state for (t, p), state in partitions.items()}
    return plan_commit_by_int(batches, by_int, producers, now_ms)


def plan_commit_by_int(
    batches: Sequence[BatchToCommit],
    partitions: Mapping[tuple[int, int], PartitionState],
    producers: MutableMapping[ProducerKey, list[ProducerBatch]],
    now_ms: int,
) -> CommitPlan:
    """:func:`plan_commit` with the partitions keyed by ``(topic_id.int, partition)``.

    The loop runs once per batch (~1 per partition at width, ~1,400 per commit),
    on the SQLite writer thread holding the GIL: ``UUID.__hash__`` is Python code,
    so partitions are looked up by the id's int, and a batch without a producer
    id (most of them) takes no other call than its result's construction."""
    plan = CommitPlan(results=[])
    results = plan.results
    append = results.append
    refused: list[int] = []  # indexes of the batches not stored (rare)
    get = partitions.get
    new = tuple.__new__  # CommitResult(...) without the namedtuple's Python __new__
    ok = ErrorCode.NONE
    for batch in batches:
        topic_id, partition, _, byte_len, _, delta, _, _, producer_id, _, _, _ = batch
        state = get((topic_id.int, partition))
        if state is None:
            refused.append(len(results))
            append(CommitResult(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, -1, now_ms, -1))
            continue
        base = state.high_watermark
        if producer_id >= 0:
            outcome = _producer_step(batch, state, producers, plan.touched_producers, now_ms)
            if outcome is not None:
                refused.append(len(results))
                append(outcome)
                continue
        state.high_watermark = base + delta + 1
        state.added_bytes += byte_len
        state.changed = True
        append(new(CommitResult, (ok, base, now_ms, state.log_start_offset)))
    plan.accepted = set(range(len(results))).difference(refused)
    return plan


def _producer_step(
    batch: BatchToCommit,
    state: PartitionState,
    producers: MutableMapping[ProducerKey, list[ProducerBatch]],
    touched: set[ProducerKey],
    now_ms: int,
) -> CommitResult | None:
    """A batch with a producer id: its result when it is not stored (a duplicate or
    an error), else ``None`` after recording it in the producer's state."""
    base = state.high_watermark
    last = base + batch.last_offset_delta
    key = (batch.topic_id, batch.partition, batch.producer_id)
    entries = producers.setdefault(key, [])
    if batch.base_sequence < 0:
        # A transaction marker (control batch; data batches of producers always
        # carry a sequence): always accepted; a newer epoch (a bump by the
        # coordinator) becomes the producer's state here, fencing the old one,
        # and the next batch of the new epoch starts at sequence 0.
        if not entries or entries[-1].producer_epoch < batch.producer_epoch:
            entries[:] = [ProducerBatch(batch.producer_epoch, -1, -1, base, last, now_ms)]
            touched.add(key)
        return None
    outcome = _check_producer(batch, entries)
    if not isinstance(outcome, ErrorCode):  # a duplicate
        return CommitResult(ErrorCode.NONE, outcome, now_ms, state.log_start_offset)
    if outcome is not ErrorCode.NONE:
        return CommitResult(outcome, -1, now_ms, state.log_start_offset)
    if entries and entries[-1].producer_epoch != batch.producer_epoch:
        entries.clear()  # epoch bump: the old epoch's state is gone
    entries.append(
        ProducerBatch(
            batch.producer_epoch,
            batch.base_sequence,
            last_sequence(batch.base_sequence, batch.last_offset_delta),
            base,
            last,
            now_ms,
        )
    )
    del entries[:-PRODUCER_STATE_BATCHES]
    touched.add(key)
    return None


def _check_producer(batch: BatchToCommit, entries: list[ProducerBatch]) -> ErrorCode | int:
    """NONE to accept, an error code, or (an int) the base offset of the original
    when ``batch`` duplicates one of the last 5."""
    if not entries:
        return ErrorCode.NONE
    current = entries[-1]
    if batch.producer_epoch == current.producer_epoch:
        last_seq = last_sequence(batch.base_sequence, batch.last_offset_delta)
        for entry in entries:
            if entry.base_sequence == batch.base_sequence and entry.last_sequence == last_seq:
                return entry.base_offset
        if not in_sequence(current.last_sequence, batch.base_sequence):
            return ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
        return ErrorCode.NONE
    if batch.producer_epoch < current.producer_epoch:
        return ErrorCode.INVALID_PRODUCER_EPOCH
    if batch.base_sequence != 0:
        return ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    return ErrorCode.NONE


# -- a group of objects around plan_commit (every SQL commit path) -------------------


def fresh_objects(keys: Sequence[str], registered: set[str]) -> list[bool]:
    """Which objects of a group get sequenced: not a key registered before, nor one
    repeated earlier in the group (its first occurrence wins)."""
    seen = set(registered)
    out: list[bool] = []
    for key in keys:
        out.append(key not in seen)
        seen.add(key)
    return out


class ObjectSpan(NamedTuple):
    """A sequenced object: its batches are ``[start, end)`` of the group's batch
    list, and it is ``live`` when at least one of them is stored."""

    start: int
    end: int
    live: bool


def object_spans(
    objects: Sequence[ObjectToCommit], fresh: Sequence[bool], accepted: set[int]
) -> list[ObjectSpan | None]:
    """Per object of the group, its span (``None``: already committed)."""
    out: list[ObjectSpan | None] = []
    pos = 0
    for o, ok in zip(objects, fresh, strict=True):
        if not ok:
            out.append(None)
            continue
        end = pos + len(o.batches)
        out.append(ObjectSpan(pos, end, any(i in accepted for i in range(pos, end))))
        pos = end
    return out


def group_outcome(
    spans: Sequence[ObjectSpan | None],
    object_ids: Sequence[int | None],
    batches: Sequence[BatchToCommit],
    plan: CommitPlan,
    make_row: Callable[[BatchToCommit, int, int, int], Any],
    now_ms: int,
    make_rows: Callable[[Sequence[BatchToCommit], list[int], int, int], list[Any]] | None = None,
) -> tuple[list[ObjectCommitResult], list[Any]]:
    """Each object's results, and the batch rows to store (``make_row(batch, base
    offset, object id, now)``) once the objects are registered as ``object_ids``.
    ``make_rows(batches, base offsets, object id, now)``, when given, makes the rows
    of a group whose batches are all stored (the usual case) in one call per object
    rather than one per batch."""
    accepted = plan.accepted
    results = plan.results
    every = len(accepted) == len(results)  # no membership test per batch (the usual case)
    out: list[ObjectCommitResult] = []
    rows: list[Any] = []
    for span, object_id in zip(spans, object_ids, strict=True):
        if span is None or object_id is None:
            out.append(ObjectCommitResult([], already_committed=True))
            continue
        mine = results[span.start : span.end]
        if every:
            bases = [r.base_offset for r in mine]
            if make_rows is not None:
                rows += make_rows(batches[span.start : span.end], bases, object_id, now_ms)
            else:
                rows += map(make_row, batches[span.start : span.end], bases, repeat(object_id), repeat(now_ms))
        else:
            rows.extend(
                make_row(batches[i], results[i].base_offset, object_id, now_ms)
                for i in range(span.start, span.end)
                if i in accepted
            )
        out.append(ObjectCommitResult(mine))
    return out, rows
