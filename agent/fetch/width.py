"""Step 6 of a Fetch: the width shortcut, one watermark query per topic instead of a lookup per partition.

Where it sits: the first thing :func:`agent.fetch.plan.fetch_once` does, for
every topic requested at ``BULK_MIN`` partitions or more, or of at most
``SMALL_TOPIC`` partitions, before :mod:`agent.fetch.lookup`. One watermark query per topic (shared between the
Fetches planned between two commits, :mod:`agent.fetch.watermark_views`)
settles the partitions read up to their high watermark, and those read at
offsets this agent has just committed (its tail index,
:mod:`agent.fetch.tail_index`). librdkafka has no fetch sessions, so each of its
Fetches names every partition it is assigned; this keeps that at one query per
topic, not one lookup per partition. For read_committed the same query says
whether the topic holds any transaction state; if not, those answers are stable
up to its high watermarks (the plan's read_committed cut skips them).

A small topic takes the shortcut at any width: its watermark query reads no
more rows than a lookup of a few partitions, and a Java consumer of a
6-partition topic on two workers names 3 partitions per Fetch, each of which
otherwise cost a batch lookup and, read_committed, a stable-offsets query
(issue 40: the Fetch path was ~11% of the agents' CPU at 5 MB/s).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Sequence
from typing import TYPE_CHECKING

from agent.fetch.model import PartitionFetch, Want
from kafka_protocol.errors import ErrorCode
from metastore.types import MetastoreError, PartitionOffsets

if TYPE_CHECKING:
    from agent.fetch.reader import FetchReader

log = logging.getLogger(__name__)

# A topic asked for at this many partitions: caught-up ones answered from one
# watermark query (caught_up).
BULK_MIN = 8
# A topic of at most this many partitions: answered by the shortcut at any width.
SMALL_TOPIC = 32


def _small(w: Want) -> bool:
    """Is ``w``'s topic one of at most ``SMALL_TOPIC`` partitions?"""
    return 0 < w.topic_partitions <= SMALL_TOPIC


def worth_it(wants: list[Want]) -> bool:
    """Whether :func:`caught_up` may settle any of ``wants``."""
    return len(wants) >= BULK_MIN or any(map(_small, wants))


async def _watermarks(reader: FetchReader, tid: uuid.UUID) -> tuple[Sequence[PartitionOffsets | None], bool]:
    """A topic's offsets indexed by partition (None: no row) and whether it held no
    transaction state when they were read (``topic_offsets``, through the reader's
    watermark views when it has them)."""
    views = reader.views
    got = await (views.topic_offsets(tid) if views is not None else reader.meta.topic_offsets(tid))
    parts = got.partitions
    if parts and parts[0].partition == 0 and parts[-1].partition == len(parts) - 1:
        return parts, got.txn_free  # every partition, in order (no copy: views share it)
    by_index: list[PartitionOffsets | None] = [None] * (max((o.partition for o in parts), default=-1) + 1)
    for o in parts:
        by_index[o.partition] = o
    return by_index, got.txn_free


async def caught_up(
    reader: FetchReader, wants: list[Want], max_bytes: int, read_committed: bool = False
) -> dict[int, PartitionFetch]:
    """The answers that one watermark query per topic asked at >= ``BULK_MIN``
    partitions (or of at most ``SMALL_TOPIC``) settles, by index in ``wants``: partitions read up to their high
    watermark (a consumer of 10,000 mostly idle partitions - librdkafka sends every
    assigned partition in every Fetch: no sessions - costs one query, not 10,000
    batch lookups), and partitions read at offsets this agent has just committed,
    answered from its own commits (:meth:`FetchReader.find_tail`) with the log
    start and high watermark just read (at most ``metadata_cache_ms`` old:
    :mod:`agent.fetch.watermark_views`). The others are left to the lookups of
    :mod:`agent.fetch.lookup`.

    read_committed: when the same query saw the topic free of transaction state,
    everything below those high watermarks is stable and nothing is aborted, so a
    tail answer is cut there and settled (``stable``): :func:`stable` asks the
    metastore nothing for it. Batches committed after the query wait for the next
    Fetch, as they would for a last stable offset read then."""
    states: dict[uuid.UUID, Sequence[PartitionOffsets | None]] = {}
    txn_free: set[uuid.UUID] = set()
    for topic_id, n in _per_topic(wants).items():
        if n < BULK_MIN:
            continue
        try:
            states[topic_id], free = await _watermarks(reader, topic_id)
        except MetastoreError as e:
            log.warning("fetch: watermarks of %s failed: %s", topic_id, e)
            continue
        if free and read_committed:
            txn_free.add(topic_id)
    out: dict[int, PartitionFetch] = {}
    if not states:
        return out
    none = ErrorCode.NONE
    prev: object = _UNSET
    topic: Sequence[PartitionOffsets | None] | None = None
    free = False
    for i, w in enumerate(wants):
        tid = w.topic_id
        if tid is not prev:  # wants come topic by topic: look the topic up once per run
            prev = tid
            topic = states.get(tid) if tid is not None else None
            free = tid in txn_free
        if topic is None or tid is None:
            continue
        p = w.partition
        o = topic[p] if 0 <= p < len(topic) else None
        if o is None:
            continue
        if o.log_start_offset <= w.fetch_offset == o.high_watermark:
            out[i] = PartitionFetch(none, o.log_start_offset, o.high_watermark)
            continue
        if w.compacted:
            continue  # the compactor rewrites its batches: the metastore says what is left
        limit = max(1, min(w.max_bytes, max_bytes))  # the first batch is always sent
        found = reader.find_tail(tid, p, w.fetch_offset, limit, o.log_start_offset)
        if found is None:
            continue
        if free:
            # The batch holding the fetch offset starts below the high watermark.
            stable = [b for b in found if b.base_offset < o.high_watermark]
            out[i] = PartitionFetch(none, o.log_start_offset, o.high_watermark, stable, stable=True)
        else:
            hw = max(o.high_watermark, found[-1].last_offset + 1)
            out[i] = PartitionFetch(none, o.log_start_offset, hw, found)
    return out


_UNSET = object()


def _per_topic(wants: list[Want]) -> dict[uuid.UUID, int]:
    """How many of ``wants`` name each known topic, counted run by run (a request
    names a topic's partitions together; one hash per run, not per partition); a
    topic of at most ``SMALL_TOPIC`` partitions counts as ``BULK_MIN`` at least."""
    counts: dict[uuid.UUID, int] = {}
    prev: uuid.UUID | None = None
    n = 0
    for w in wants:
        if w.topic_id is prev:
            n += 1
            continue
        if prev is not None:
            counts[prev] = counts.get(prev, 0) + n
        prev, n = w.topic_id, 1
        if _small(w):
            n = BULK_MIN
    if prev is not None:
        counts[prev] = counts.get(prev, 0) + n
    return counts
