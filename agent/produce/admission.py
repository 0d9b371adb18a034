"""Admission of a Produce into the pipeline: now, after a short grace, or refused at once.

Where it sits: the produce handler (:mod:`agent.handlers.produce`) asks here
after validating a request and before appending it (:mod:`agent.produce.append`).
Under overload Floe fails fast instead of queueing (the seeds' "when the storage
layer is busy, fail fast and let the client retry"):

* **budget**: the request's bytes do not fit the memory budget
  (:mod:`agent.produce.budget`, shared with responses) within
  ``produce_admission_wait_ms``;
* **slow_store**: the oldest sealed segment has waited longer than
  ``produce_fail_fast_ms`` for its upload and commit.

Either way every batch of the request is answered NOT_ENOUGH_REPLICAS at once,
with ``throttle_time_ms`` as a back-off hint, and counted in
``floe_produce_rejected_total{reason}``. NOT_ENOUGH_REPLICAS is the code Kafka
answers for a batch it did not append; librdkafka classes it "retry, not
persisted" and the Java client as retriable, so an idempotent producer retries
with the same epoch and sequence (no epoch bump, no duplicate).

A refused batch leaves a gap in its producer's sequence for the partition:
later batches of that producer for that partition (pipelined on the
connection, up to 5 in flight) are refused the same way until the refused
sequence comes back (:meth:`Admission.fence`), rather than reaching the
sequencer to be refused as OUT_OF_ORDER_SEQUENCE_NUMBER after an upload. The
batches of a segment aborted for a stalled upload (:mod:`agent.produce.abort`)
fence their producers the same way.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable, Sequence
from typing import Protocol

from prometheus_client import Counter as PromCounter

from agent.clock import Clock
from agent.metrics import METRICS
from agent.produce.budget import ByteBudget
from agent.produce.segment import ProduceItem
from kafka_protocol.errors import ErrorCode

REJECTED = PromCounter(
    "floe_produce_rejected",
    "Produce requests refused at once with a retriable error instead of queueing:"
    " budget (memory budget full past produce_admission_wait_ms), slow_store"
    " (oldest unacknowledged segment older than produce_fail_fast_ms), sequence"
    " (a batch after a refused one of the same producer and partition)",
    ["reason"],
    registry=METRICS.registry,
)
OVERLOADED = int(ErrorCode.NOT_ENOUGH_REPLICAS)
# A fence whose retry never came (the producer gave up or died) is dropped after
# this long; the sequencer still refuses a gap then (OUT_OF_ORDER_SEQUENCE_NUMBER).
FENCE_TTL_S = 120.0
_FENCE_PRUNE_AT = 10_000

FenceKey = tuple[int, uuid.UUID, int]  # producer id, topic id, partition


class Settings(Protocol):
    max_buffered_bytes: int
    queued_max_request_bytes: int
    memory_budget_bytes: int | None
    fetch_cache_bytes: int


def cache_bytes_of(cfg: Settings) -> int:
    """The block cache's share of the process's budget: ``fetch_cache_bytes``, at most
    half of ``memory_budget_bytes`` when that is set."""
    if cfg.memory_budget_bytes is not None:
        return max(1, min(cfg.fetch_cache_bytes, cfg.memory_budget_bytes // 2))
    return cfg.fetch_cache_bytes


def memory_budget_of(cfg: Settings) -> int:
    """What produce data and responses share of the agent process's one memory budget:
    ``memory_budget_bytes`` less the block cache's share (:func:`cache_bytes_of`), or
    when unset the larger of the two older knobs (which stay as caps of their side).
    So ``memory_budget_bytes`` bounds the cache, the produce data waiting for its
    acknowledgement and the responses together (unset: fetch_cache_bytes + that)."""
    if cfg.memory_budget_bytes is not None:
        return max(1, cfg.memory_budget_bytes - cache_bytes_of(cfg))
    return max(cfg.max_buffered_bytes, cfg.queued_max_request_bytes)


class Admission:
    """The admission decision for one pipeline (``pipeline.admission``)."""

    def __init__(
        self, budget: ByteBudget, clock: Clock, oldest_pending_s: Callable[[], float]
    ) -> None:
        self.budget = budget
        self._clock = clock
        self._oldest = oldest_pending_s
        # Refused sequences not yet retried: key -> (epoch, base sequence, refused at).
        self._fences: dict[FenceKey, tuple[int, int, float]] = {}

    def slow_store(self, fail_fast_ms: int) -> bool:
        """The store is slow: the oldest unacknowledged segment is older than ``fail_fast_ms``."""
        return fail_fast_ms > 0 and self._oldest() * 1000 > fail_fast_ms

    async def admit(self, nbytes: int, wait_s: float) -> bool:
        """Reserve ``nbytes`` in the budget, waiting at most ``wait_s`` for room."""
        if self.budget.try_acquire(nbytes):
            return True
        if wait_s <= 0:
            return False
        try:
            await asyncio.wait_for(self.budget.acquire(nbytes), wait_s)
        except TimeoutError:
            return False
        return True

    def fenced(self, items: Sequence[ProduceItem]) -> list[int]:
        """Indexes of the items that follow a refused batch of their producer and
        partition (same epoch, higher sequence); a retry of the refused sequence
        (or a new epoch) lifts the fence."""
        if not self._fences:
            return []
        out: list[int] = []
        now = self._clock.monotonic()
        for i, it in enumerate(items):
            m = it.meta
            if m.producer_id < 0:
                continue
            key = (m.producer_id, it.topic_id, it.partition)
            fence = self._fences.get(key)
            if fence is None:
                continue
            epoch, seq, at = fence
            if m.producer_epoch == epoch and m.base_sequence > seq and now - at < FENCE_TTL_S:
                out.append(i)
            else:
                del self._fences[key]
        return out

    def fence(self, items: Sequence[ProduceItem]) -> None:
        """Remember the idempotent batches just refused, so that later ones of the same
        producer and partition are refused until these come back."""
        now = self._clock.monotonic()
        for it in items:
            m = it.meta
            if m.producer_id < 0 or m.base_sequence < 0:  # not idempotent (or a txn marker)
                continue
            key = (m.producer_id, it.topic_id, it.partition)
            old = self._fences.get(key)
            if old is None or old[0] != m.producer_epoch or m.base_sequence < old[1]:
                self._fences[key] = (m.producer_epoch, m.base_sequence, now)
        if len(self._fences) > _FENCE_PRUNE_AT:
            self._fences = {k: v for k, v in self._fences.items() if now - v[2] < FENCE_TTL_S}

    @property
    def fences(self) -> int:
        return len(self._fences)
