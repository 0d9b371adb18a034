"""The Fetch width path and the read_committed cut (below :mod:`agent.fetch_answer`).

Where it sits: :func:`agent.fetch_answer.fetch_once` asks :func:`caught_up`
first, for every topic requested at ``BULK_MIN`` partitions or more: one
watermark query per topic settles the partitions read up to their high
watermark and those read at offsets this agent has just committed (its tail
index). librdkafka has no fetch sessions, so each of its Fetches names every
partition it is assigned; this keeps that at one query per topic, not one
lookup per partition. For read_committed the same query says whether the topic
holds any transaction state; if not, those answers are stable up to its high
watermarks. :func:`stable` then cuts what is left at each partition's last
stable offset and lists the aborted transactions (``stable_offsets``, one query
per answer).
"""

from __future__ import annotations

import logging
import uuid
from collections import Counter
from typing import TYPE_CHECKING

from agent.fetch import FetchReader, PartitionFetch
from kafka_protocol.errors import ErrorCode
from metastore.types import MetastoreError, PartitionOffsets

if TYPE_CHECKING:
    from agent.fetch_answer import Want

log = logging.getLogger(__name__)

# A topic asked for at this many partitions: caught-up ones answered from one
# watermark query (caught_up).
BULK_MIN = 8


async def _watermarks(
    reader: FetchReader, tid: uuid.UUID, read_committed: bool
) -> tuple[dict[int, PartitionOffsets], bool]:
    """A topic's offsets by partition and, for read_committed, whether it held no
    transaction state when they were read (``topic_offsets``; else False)."""
    if not read_committed:
        return {o.partition: o for o in await reader.meta.partition_offsets(tid)}, False
    got = await reader.meta.topic_offsets(tid)
    return {o.partition: o for o in got.partitions}, got.txn_free


async def caught_up(
    reader: FetchReader, wants: list[Want], max_bytes: int, read_committed: bool = False
) -> dict[int, PartitionFetch]:
    """The answers that one watermark query per topic asked at >= ``BULK_MIN``
    partitions settles, by index in ``wants``: partitions read up to their high
    watermark (a consumer of 10,000 mostly idle partitions - librdkafka sends every
    assigned partition in every Fetch: no sessions - costs one query, not 10,000
    batch lookups), and partitions read at offsets this agent has just committed,
    answered from its own commits (:meth:`FetchReader.find_tail`) with the log
    start and high watermark just read. The others are left to :func:`agent.fetch_answer.fetch_once`'s lookups.

    read_committed: when the same query saw the topic free of transaction state,
    everything below those high watermarks is stable and nothing is aborted, so a
    tail answer is cut there and settled (``stable``): :func:`stable` asks the
    metastore nothing for it. Batches committed after the query wait for the next
    Fetch, as they would for a last stable offset read then."""
    per_topic = Counter(w.topic_id for w in wants if w.topic_id is not None)
    states: dict[uuid.UUID, dict[int, PartitionOffsets]] = {}
    txn_free: set[uuid.UUID] = set()
    for tid, n in per_topic.items():
        if tid is None or n < BULK_MIN:
            continue
        try:
            states[tid], free = await _watermarks(reader, tid, read_committed)
        except MetastoreError as e:
            log.warning("fetch: watermarks of %s failed: %s", tid, e)
            continue
        if free:
            txn_free.add(tid)
    out: dict[int, PartitionFetch] = {}
    if not states:
        return out
    for i, w in enumerate(wants):
        topic = states.get(w.topic_id) if w.topic_id is not None else None
        o = topic.get(w.partition) if topic is not None else None
        if o is None or w.topic_id is None:
            continue
        if o.log_start_offset <= w.fetch_offset == o.high_watermark:
            out[i] = PartitionFetch(ErrorCode.NONE, o.log_start_offset, o.high_watermark)
            continue
        limit = max(1, min(w.max_bytes, max_bytes))  # the first batch is always sent
        found = reader.find_tail(w.topic_id, w.partition, w.fetch_offset, limit, o.log_start_offset)
        if found is None:
            continue
        if w.topic_id in txn_free:
            # The batch holding the fetch offset starts below the high watermark.
            stable = [b for b in found if b.base_offset < o.high_watermark]
            out[i] = PartitionFetch(ErrorCode.NONE, o.log_start_offset, o.high_watermark, stable, stable=True)
        else:
            hw = max(o.high_watermark, found[-1].last_offset + 1)
            out[i] = PartitionFetch(ErrorCode.NONE, o.log_start_offset, hw, found)
    return out


async def stable(reader: FetchReader, wants: list[Want], found: list[PartitionFetch]) -> None:
    """read_committed: cut each partition's batches at its last stable offset and
    attach the aborted transactions (one metastore query for the whole answer)."""
    # Only partitions with data to cut: idle ones (at their high watermark) keep the
    # one-query-per-topic width path cheap and report LSO = high watermark.
    live = [
        (w, pf) for w, pf in zip(wants, found, strict=True) if pf.batches and w.topic_id is not None and not pf.stable
    ]
    if not live:
        return
    try:
        views = await reader.meta.stable_offsets([(w.topic_id, w.partition, w.fetch_offset) for w, _ in live])  # type: ignore[misc]
    except MetastoreError as e:
        log.warning("fetch: last stable offsets failed: %s", e)
        for _, pf in live:
            pf.error, pf.batches = ErrorCode.KAFKA_STORAGE_ERROR, []
        return
    for (_, pf), view in zip(live, views, strict=True):
        if view.error:
            pf.error, pf.batches = int(view.error), []
            continue
        lso = min(view.last_stable_offset, pf.high_watermark)
        pf.last_stable_offset = lso
        pf.aborted = [a for a in view.aborted if a[1] < lso]
        pf.batches = [b for b in pf.batches if b.base_offset < lso]
