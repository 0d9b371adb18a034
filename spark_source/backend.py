"""What a planning backend is, and what it answers: the driver's vocabulary.

Where it sits: below :mod:`spark_source.driver` (which plans over a backend)
and the two backends, :mod:`spark_source.agents` (the agents' planning API) and
:mod:`spark_source.direct` (the metastore itself). All three share these
types, so they live here and the backends never import the driver.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

from metastore.types import BatchLocation
from spark_source.offsets import TopicPartition
from spark_source.options import SourceOptions
from spark_source.plan import ObjectRef

log = logging.getLogger("spark_source")


class DataLossError(RuntimeError):
    """Offsets the query needs are gone (retention, DeleteRecords, deleted topic)."""


class PlanningError(RuntimeError):
    """The planning backend failed (unreachable agents or metastore, a bad answer)."""


@dataclass(frozen=True, slots=True)
class PartitionState:
    """``high_watermark`` is the last stable offset under read_committed, and
    ``aborted`` the aborted transactions there as (producer id, first offset,
    marker offset): what executors must skip."""

    topic_id: uuid.UUID
    log_start: int
    high_watermark: int
    aborted: tuple[tuple[int, int, int], ...] = ()


State = dict[TopicPartition, PartitionState]


@dataclass(frozen=True, slots=True)
class LeaseSpec:
    """Register the planned objects under read lease ``lease_id`` for ``ttl_ms``."""

    lease_id: str
    ttl_ms: int
    owner: str = ""


@dataclass(slots=True)
class ReadPlan:
    """The batches of each planned range, the objects they live in, the lease held."""

    batches: dict[TopicPartition, list[BatchLocation]] = field(default_factory=dict)
    objects: dict[str, ObjectRef] = field(default_factory=dict)
    starts: dict[TopicPartition, int] = field(default_factory=dict)
    objects_url: str | None = None  # where executors read (None: the source's 'objects')
    journal_urls: tuple[str, ...] = ()  # the journal buckets, for ``journal/`` keys
    lease_expires_ms: int | None = None


class Backend(Protocol):
    async def partition_state(self, opts: SourceOptions) -> State: ...
    async def offsets_for_times(
        self, queries: Mapping[TopicPartition, tuple[uuid.UUID, int]]
    ) -> dict[TopicPartition, int]: ...
    async def read_plan(
        self,
        ranges: Mapping[TopicPartition, tuple[uuid.UUID, int, int]],
        *,
        fail_on_data_loss: bool,
        lease: LeaseSpec | None,
    ) -> ReadPlan: ...
    async def renew_lease(
        self, lease: LeaseSpec, keys: list[str]
    ) -> tuple[list[str], dict[str, str]]: ...
    async def release_lease(self, lease_id: str) -> None: ...
    async def close(self) -> None: ...


def data_loss(msg: str, fail: bool) -> None:
    if fail:
        raise DataLossError(
            msg + ". Set failOnDataLoss=false to skip lost offsets with a warning instead."
        )
    log.warning("data loss: %s", msg)
