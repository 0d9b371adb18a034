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

The per-batch loop itself is :mod:`metastore.sequencer_core` (keyed by the topic
id's int; its names are re-exported here); this module adds ``plan_commit`` over
UUID keys (``metastore.log``'s generic SQL commit) and the group helpers below.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping, MutableMapping, Sequence
from itertools import repeat
from typing import Any, NamedTuple

from metastore.sequencer_core import (
    INT32_MAX,
    PRODUCER_STATE_BATCHES,
    CommitPlan,
    IntProducerKey,
    PartitionState,
    ProducerBatch,
    in_sequence,
    last_sequence,
    plan_commit_by_int,
)
from metastore.types import BatchToCommit, ObjectCommitResult, ObjectToCommit

__all__ = [
    "INT32_MAX",
    "PRODUCER_STATE_BATCHES",
    "CommitPlan",
    "ObjectSpan",
    "PartitionKey",
    "PartitionState",
    "ProducerBatch",
    "ProducerKey",
    "fresh_objects",
    "group_outcome",
    "in_sequence",
    "last_sequence",
    "object_spans",
    "plan_commit",
    "plan_commit_by_int",
]

PartitionKey = tuple[uuid.UUID, int]
ProducerKey = tuple[uuid.UUID, int, int]


def plan_commit(
    batches: Sequence[BatchToCommit],
    partitions: Mapping[PartitionKey, PartitionState],
    producers: MutableMapping[ProducerKey, list[ProducerBatch]],
    now_ms: int,
) -> CommitPlan:
    """Decide every batch in order; mutates ``partitions`` and ``producers`` to the
    state to write back (producer lists: oldest first, at most 5 entries; a key a
    batch names gets a list, empty when nothing was stored). The loop is
    :func:`metastore.sequencer_core.plan_commit_by_int` on the ids' ints."""
    by_int = {(t.int, p): state for (t, p), state in partitions.items()}
    ids = {t.int: t for t, _, _ in producers}
    ids.update((b.topic_id.int, b.topic_id) for b in batches if b.producer_id >= 0)
    mine: dict[IntProducerKey, list[ProducerBatch]] = {
        (t.int, p, pid): entries for (t, p, pid), entries in producers.items()
    }
    plan = plan_commit_by_int(batches, by_int, mine, now_ms)
    for (t, p, pid), entries in mine.items():  # the same lists, and the keys' new ones
        producers[(ids[t], p, pid)] = entries
    plan.touched_producers = {(ids[t], p, pid) for t, p, pid in plan.touched_producers}
    return plan


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
