"""The rows every step of a Fetch passes along: a wanted partition and its answer.

Where it sits: :mod:`agent.fetch.resolve` turns a request into :class:`Want`
rows (one per requested partition, in request order); every later step
(:mod:`~agent.fetch.width`, :mod:`~agent.fetch.lookup`,
:mod:`~agent.fetch.plan`, :mod:`~agent.fetch.read`) fills in one
:class:`PartitionFetch` per want, and :mod:`agent.fetch.answer` turns each into
a response entry. No I/O here.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

from kafka_protocol.messages._runtime import BufferParts
from metastore.types import BatchLocation

__all__ = ["PartitionFetch", "Want"]


@dataclass(slots=True)
class Want:
    """One requested partition, resolved against the topic table."""

    topic_index: int
    partition: int
    fetch_offset: int
    max_bytes: int
    topic_id: uuid.UUID | None  # None: unknown topic or partition
    error: int = 0
    topic_partitions: int = 0  # the topic's partition count (0: not known)
    # cleanup.policy has compact: the compactor rewrites its batches, so this agent's
    # own copies (the tail index) may hold records that compaction has removed.
    compacted: bool = False


@dataclass(slots=True)
class PartitionFetch:
    """What one partition contributes to a Fetch response."""

    error: int
    log_start_offset: int = -1
    high_watermark: int = -1
    batches: list[BatchLocation] = field(default_factory=list)
    records: bytes | BufferParts = b""  # BufferParts: views into cached blocks (agent.fetch.read)
    # read_committed only: the last stable offset (-1: the high watermark) and the
    # aborted transactions from the fetch offset on, as (producer id, first offset,
    # marker offset).
    last_stable_offset: int = -1
    aborted: list[tuple[int, int, int]] = field(default_factory=list)
    # read_committed: every batch is below the high watermark of a read that saw
    # the topic free of transaction state (no stable_offsets needed).
    stable: bool = False

    @property
    def lso(self) -> int:
        return self.high_watermark if self.last_stable_offset < 0 else self.last_stable_offset

    @property
    def nbytes(self) -> int:
        return sum(b.byte_len for b in self.batches)

    def offsets_sent(self) -> tuple[int, int, int]:
        """High watermark, last stable offset and log start offset as the response sends them."""
        if self.error:
            return -1, -1, -1
        return self.high_watermark, self.lso, self.log_start_offset
