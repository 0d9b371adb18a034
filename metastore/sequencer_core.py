"""The sequencer's per-batch loop, keyed by ints: offsets and the producer rules.

Where it sits: under :mod:`metastore.sequencer` (its docstring states the
rules; its ``plan_commit`` takes partitions and producers keyed by topic UUIDs,
converts them to the keys here and back, and it re-exports these names) and
:mod:`metastore.sqlite_commit`, which calls :func:`plan_commit_by_int` itself
with keys it builds from the topic id's int.

Why ints: the loop runs once per batch (~1 per partition at width, ~1,400 per
commit) on the SQLite writer thread holding the GIL, and ``UUID.__hash__`` is
Python code; a partition is ``(topic_id.int, partition)`` and a producer
``(topic_id.int, partition, producer_id)`` here, so a batch costs tuple hashes
only. The next batch of a producer's sequence (what idempotent producers send
nearly always) is decided inline; anything else goes through
:func:`_producer_step`.
"""

from __future__ import annotations

from collections.abc import Mapping, MutableMapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from metastore.types import BatchToCommit, CommitResult, ErrorCode

INT32_MAX = 2**31 - 1
PRODUCER_STATE_BATCHES = 5

IntPartitionKey = tuple[int, int]  # (topic_id.int, partition)
IntProducerKey = tuple[int, int, int]  # (topic_id.int, partition, producer_id)


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
    # The producer keys whose state changed, keyed as the producers passed in were.
    touched_producers: set[tuple[Any, int, int]] = field(default_factory=set)


def plan_commit_by_int(
    batches: Sequence[BatchToCommit],
    partitions: Mapping[IntPartitionKey, PartitionState],
    producers: MutableMapping[IntProducerKey, list[ProducerBatch]],
    now_ms: int,
) -> CommitPlan:
    """``metastore.sequencer.plan_commit`` with partitions and producers keyed by
    ints: decide every batch in order, mutating ``partitions`` and ``producers`` to
    the state to write back (producer lists: oldest first, at most 5 entries)."""
    plan = CommitPlan(results=[])
    results = plan.results
    append = results.append
    refused: list[int] = []  # indexes of the batches not stored (rare)
    get = partitions.get
    entries_of = producers.get
    touched = plan.touched_producers
    touch = touched.add
    new = tuple.__new__  # CommitResult(...) without the namedtuple's Python __new__
    ok = ErrorCode.NONE
    for batch in batches:
        topic_id, partition, _, byte_len, _, delta, _, _, producer_id, epoch, seq, _ = batch
        tint = topic_id.int
        state = get((tint, partition))
        if state is None:
            refused.append(len(results))
            append(CommitResult(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, -1, now_ms, -1))
            continue
        base = state.high_watermark
        if producer_id >= 0:
            key = (tint, partition, producer_id)
            entries = entries_of(key)
            if entries is None:
                entries = producers[key] = []
            last_seq = seq + delta
            if last_seq > INT32_MAX:
                last_seq -= INT32_MAX + 1
            # The next batch of the key's sequence in its epoch (or the key's first):
            # accepted, as _producer_step would, unless it equals an entry (a retry).
            nxt = seq >= 0 and (
                not entries
                or (
                    entries[-1][0] == epoch
                    and (seq == entries[-1][2] + 1 or (seq == 0 and entries[-1][2] == INT32_MAX))
                )
            )
            if nxt:
                for e in entries:
                    if e[1] == seq and e[2] == last_seq:
                        nxt = False
                        break
            if nxt:
                entries.append(new(ProducerBatch, (epoch, seq, last_seq, base, base + delta, now_ms)))
                if len(entries) > PRODUCER_STATE_BATCHES:
                    del entries[:-PRODUCER_STATE_BATCHES]
                touch(key)
            else:
                outcome = _producer_step(batch, state, key, entries, touched, now_ms)
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


def plan_in_order(
    batches: Sequence[BatchToCommit],
    partitions: Mapping[IntPartitionKey, PartitionState],
    newest: dict[IntProducerKey, tuple[int, int]],
    now_ms: int,
) -> CommitPlan | None:
    """:func:`plan_commit_by_int` for a group whose idempotent batches each follow
    their key's sequence, knowing only each key's newest stored entry (``newest``:
    its epoch and last sequence); ``None`` at the first batch of a known partition
    that does not (a retry, a gap, an epoch bump, a marker), having moved
    ``partitions`` and ``newest`` part of the way.

    The plan is the one the last 5 entries would give: a batch of the key's epoch
    that follows its newest entry cannot equal an older one (that takes 2**31
    sequences within 5 batches), so it is accepted, as is any batch of a key without
    state. It leaves the producers' entries to the caller (each stored batch is its
    key's newest) and ``touched_producers`` empty."""
    plan = CommitPlan(results=[])
    results = plan.results
    append = results.append
    refused: list[int] = []
    get = partitions.get
    last_of = newest.get
    new = tuple.__new__
    ok = ErrorCode.NONE
    for batch in batches:
        topic_id, partition, _, byte_len, _, delta, _, _, producer_id, epoch, seq, _ = batch
        tint = topic_id.int
        state = get((tint, partition))
        if state is None:
            refused.append(len(results))
            append(CommitResult(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, -1, now_ms, -1))
            continue
        base = state.high_watermark
        if producer_id >= 0:
            if seq < 0:
                return None  # a marker
            key = (tint, partition, producer_id)
            prev = last_of(key)
            if prev is not None and (
                prev[0] != epoch or (seq != prev[1] + 1 and (seq != 0 or prev[1] != INT32_MAX))
            ):
                return None
            last_seq = seq + delta
            newest[key] = (epoch, last_seq - INT32_MAX - 1 if last_seq > INT32_MAX else last_seq)
        state.high_watermark = base + delta + 1
        state.added_bytes += byte_len
        state.changed = True
        append(new(CommitResult, (ok, base, now_ms, state.log_start_offset)))
    plan.accepted = set(range(len(results))).difference(refused)
    return plan


def _producer_step(
    batch: BatchToCommit,
    state: PartitionState,
    key: IntProducerKey,
    entries: list[ProducerBatch],
    touched: set[Any],
    now_ms: int,
) -> CommitResult | None:
    """A batch with a producer id (``entries``: its key's state): its result when it
    is not stored (a duplicate or an error), else ``None`` after recording it."""
    base = state.high_watermark
    last = base + batch.last_offset_delta
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
