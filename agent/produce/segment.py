"""What moves through the produce pipeline: a request's batches, its waiter, a segment.

Where it sits: the produce handler (:mod:`agent.handlers.produce`) hands
:class:`ProduceItem` rows to :meth:`ProducePipeline.append
<agent.produce.pipeline.ProducePipeline.append>`; every later step (seal,
upload, commit, ack) works on the :class:`Segment` they went into, and answers
each request's :class:`Waiter`. :class:`PipelineState` declares the state the
steps' mixins share (set up by :class:`~agent.produce.pipeline.ProducePipeline`).
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from kafka_protocol.errors import ErrorCode as KafkaErrorCode
from metastore.types import BatchToCommit, CommitResult
from objectstore.segment import BatchMeta, SegmentBuilder

if TYPE_CHECKING:
    from agent.clock import Clock
    from agent.produce.autobatch import ProduceFlow, SealPolicy
    from agent.produce.budget import ByteBudget
    from agent.produce.consolidate import Consolidator
    from metastore.commit_order import CommitOrder
    from objectstore.base import ObjectStore

# Agent-level outcomes (not the metastore's): the wire codes from the one error table.
KAFKA_STORAGE_ERROR = KafkaErrorCode.KAFKA_STORAGE_ERROR
REQUEST_TIMED_OUT = KafkaErrorCode.REQUEST_TIMED_OUT


@dataclass(slots=True)
class ProduceItem:
    topic_id: uuid.UUID
    partition: int
    batch: bytes | memoryview
    meta: BatchMeta
    is_transactional: bool = False


@dataclass(slots=True)
class Waiter:
    future: asyncio.Future[list[CommitResult]]
    first: int
    count: int
    nbytes: int
    flow: ProduceFlow | None = None
    items: Sequence[ProduceItem] = ()  # the request's batches (to fence them if aborted)
    owner: object = None  # the sending connection's flow, when it may be withdrawn
    withdrawn: bool = False  # agent.produce.withdraw: its connection closed before the commit


@dataclass(slots=True)
class Segment:
    builder: SegmentBuilder
    opened_at: float
    waiters: list[Waiter] = field(default_factory=list)
    nbytes: int = 0
    key: str = ""
    upload: asyncio.Task[tuple[int, list[BatchToCommit]]] | None = None
    data: bytes | None = None  # a journal object's bytes, kept for consolidation
    sealed_at: float = 0.0
    # Aborted (agent.produce.abort): answered NOT_ENOUGH_REPLICAS, never to be committed.
    aborted: bool = False
    withdrawn: int = 0  # waiters withdrawn (agent.produce.withdraw): left out of the commit

    @property
    def partitions(self) -> list[tuple[uuid.UUID, int]]:
        """The distinct partitions of the segment's batches (from the builder's index:
        no set maintained per appended batch)."""
        return self.builder.partitions()


def error_results(code: KafkaErrorCode, n: int) -> list[CommitResult]:
    # CommitResult.error is typed with the metastore's subset of Kafka's codes; these
    # agent-level failures are outside that subset but share the numbering.
    return [CommitResult(code, -1, -1, -1)] * n  # type: ignore[arg-type]


class Fences(Protocol):
    """What the abort step needs of :class:`~agent.produce.admission.Admission`."""

    def fence(self, items: Sequence[ProduceItem]) -> None: ...


class PipelineState:
    """The state the pipeline's steps share (:mod:`~agent.produce.append`,
    :mod:`~agent.produce.upload`, :mod:`~agent.produce.commit`,
    :mod:`~agent.produce.ack`), set by :class:`~agent.produce.pipeline.ProducePipeline`."""

    _store: ObjectStore
    _meta: object
    _agent_id: str
    _flush_bytes: int
    _interval: float
    _min_interval: float
    _adaptive: bool
    _idle_gap: float
    _policy: SealPolicy
    _last_seal_at: float | None
    _clock: Clock
    _on_commit: Callable[[Iterable[tuple[uuid.UUID, int]]], None] | None
    _on_committed: Callable[[str, list[BatchToCommit], list[CommitResult]], None] | None
    _on_uploaded: Callable[[str, bytes], None] | None
    _prefix: str
    _commit_attempts: int
    _max_group: int
    _max_commits: int
    _order: CommitOrder | None
    _upload_sem: asyncio.Semaphore
    budget: ByteBudget
    _open: Segment | None
    _sealed: asyncio.Queue[Segment | None]
    _seq: int
    _inflight: int
    _pending: dict[int, float]
    _idle: asyncio.Event
    _timer: bool
    _consolidator: Consolidator | None
    admission: Fences
    _abort_s: float  # produce_abort_ms in seconds; 0: never abort
    _abortable: dict[int, Segment]  # sealed, commit not started: id(seg) -> seg, in seal order
