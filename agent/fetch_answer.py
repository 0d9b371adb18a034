"""One Fetch answer: the wanted partitions -> lookups -> read_committed cut -> budget -> bytes.

Where it sits: below the Fetch handler (:mod:`agent.handlers.fetch`: request
forms, long-poll, responses) and the incremental fetch of a session
(:mod:`agent.fetch_incremental`); above the reader (:mod:`agent.fetch`: batch
lookups, the tail index, the block cache). :func:`resolve` turns a request's
topics into :class:`Want` rows, :func:`fetch_once` plans and reads one answer
for them, and :func:`partition_data` builds every partition entry of every
response.

As Kafka:

- Records: the whole batch holding the fetch offset first (clients skip the
  leading records), then the following batches while they fit in
  ``min(partition_max_bytes, bytes left of max_bytes)``. The first partition
  with data always gets at least one whole batch, however large (KIP-74).
- ``isolation_level`` 1 (read_committed): one metastore query per answer
  (``stable_offsets``) gives each partition's last stable offset and the
  aborted transactions from the fetch offset on; only batches below the LSO
  are returned, ``last_stable_offset`` is the LSO and ``aborted_transactions``
  lists (producer id, first offset). Records are never decoded for this.
- Width: at ``BULK_MIN`` partitions of a topic, partitions already read to
  their high watermark are answered from one watermark query per topic
  (:mod:`agent.fetch_width`), and partitions read at offsets this agent has just
  committed from its own commits (:mod:`agent.tail_index`) with that query's
  log start and high watermark. For read_committed the same query says whether
  the topic holds any transaction state; if not, those answers are stable up to
  its high watermarks and skip ``stable_offsets``.
- A storage failure while reading a partition answers KAFKA_STORAGE_ERROR for
  that partition (retriable) instead of closing the connection.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING

from agent import fetch_width
from agent.fetch import FetchReader, PartitionFetch, select_batches
from agent.security.authorizer import RT, Op, allowed
from kafka_protocol.errors import ErrorCode
from kafka_protocol.messages import FetchRequest, FetchResponse
from kafka_protocol.messages._runtime import ZERO_UUID
from metastore.types import ErrorCode as MetaError
from metastore.types import MetastoreError

if TYPE_CHECKING:
    from agent.broker import Broker
    from agent.connection import RequestContext
    from metastore import TopicInfo

log = logging.getLogger(__name__)

PartitionData = FetchResponse.FetchableTopicResponse.PartitionData
Aborted = PartitionData.AbortedTransaction

# This many partitions left to look up: one metastore call for all of them
# (_lookup_many). A Fetch reaching one worker of several names only that worker's
# partitions (4 of a consumer's 8 with two workers): one lookup each cost a
# connection, BEGIN and COMMIT apiece, 2.3x the agent CPU of one worker at 5 MB/s.
LOOKUP_MANY_MIN = 2


@dataclass(slots=True)
class Want:
    """One requested partition, resolved against the topic table."""

    topic_index: int
    partition: int
    fetch_offset: int
    max_bytes: int
    topic_id: uuid.UUID | None  # None: unknown topic or partition
    error: int = 0


async def resolve(broker: Broker, ctx: RequestContext, req: FetchRequest, by_id: bool) -> list[Want]:
    """The request's partitions in order, each with its topic id or its error (READ checked)."""
    wants: list[Want] = []
    for ti, t in enumerate(req.topics):
        info: TopicInfo | None
        if by_id:
            info = await broker.topic_by_id(t.topic_id) if t.topic_id != ZERO_UUID else None
        else:
            info = await broker.topic(t.topic)
        # READ on the topic (a name is checked whether or not it exists; an id only once known).
        name = info.name if info is not None else (None if by_id else t.topic)
        denied = name is not None and not allowed(broker, ctx, Op.READ, RT.TOPIC, name)
        for p in t.partitions:
            w = Want(ti, p.partition, p.fetch_offset, max(0, p.partition_max_bytes), None)
            if denied:
                w.error = ErrorCode.TOPIC_AUTHORIZATION_FAILED
            elif info is None:
                w.error = ErrorCode.UNKNOWN_TOPIC_ID if by_id else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            elif not 0 <= p.partition < info.partitions:
                w.error = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            else:
                w.topic_id = info.id
            wants.append(w)
    return wants


def _limit(w: Want, max_bytes: int) -> int:
    """The bytes a lookup of ``w`` may return: its partition's limit within the
    request's, and at least 1 (the first batch is always sent)."""
    return max(1, min(w.max_bytes, max_bytes))


async def _lookup(reader: FetchReader, w: Want, limit: int, fresh: bool) -> PartitionFetch:
    if w.topic_id is None:
        return PartitionFetch(w.error)
    try:
        res = await reader.find(w.topic_id, w.partition, w.fetch_offset, limit, fresh=fresh)
    except MetastoreError as e:
        log.warning("fetch: batch lookup of %s/%d failed: %s", w.topic_id, w.partition, e)
        return PartitionFetch(ErrorCode.KAFKA_STORAGE_ERROR)
    if res.error != MetaError.NONE:
        return PartitionFetch(int(res.error))
    return PartitionFetch(ErrorCode.NONE, res.log_start_offset, res.high_watermark, list(res.batches))


async def _lookup_many(
    reader: FetchReader, wants: list[Want], max_bytes: int, fresh: bool
) -> list[PartitionFetch]:
    """:func:`_lookup` of many partitions in one metastore call."""
    keys = [
        (w.topic_id, w.partition, w.fetch_offset, _limit(w, max_bytes))
        for w in wants
        if w.topic_id is not None
    ]
    try:
        found = iter(await reader.find_many(keys, fresh=fresh))
    except MetastoreError as e:
        log.warning("fetch: batch lookup of %d partitions failed: %s", len(keys), e)
        return [PartitionFetch(w.error or ErrorCode.KAFKA_STORAGE_ERROR) for w in wants]
    out: list[PartitionFetch] = []
    for w in wants:
        if w.topic_id is None:
            out.append(PartitionFetch(w.error))
            continue
        res = next(found)
        if res.error != MetaError.NONE:
            out.append(PartitionFetch(int(res.error)))
        else:
            out.append(PartitionFetch(ErrorCode.NONE, res.log_start_offset, res.high_watermark, list(res.batches)))
    return out


async def _read_all(reader: FetchReader, wants: list[Want], found: list[PartitionFetch]) -> None:
    """The bytes of every partition with batches to send, in one planned read."""
    todo = [(w, pf) for w, pf in zip(wants, found, strict=True) if pf.batches]
    if not todo:
        return
    datas = await reader.read_many([pf.batches for _, pf in todo])
    for (w, pf), data in zip(todo, datas, strict=True):
        if isinstance(data, Exception):
            # E.g. the compactor replaced the object after our (cached) lookup.
            log.warning("fetch: reading %s/%d at %d failed: %s", w.topic_id, w.partition, w.fetch_offset, data)
            if w.topic_id is not None:
                reader.forget(w.topic_id, w.partition)
            pf.error = ErrorCode.KAFKA_STORAGE_ERROR
            pf.batches = []
            pf.records = b""
        else:
            pf.records = data


async def fetch_once(
    reader: FetchReader,
    wants: list[Want],
    max_bytes: int,
    *,
    fresh: bool = False,
    read_committed: bool = False,
) -> list[PartitionFetch]:
    """Plan and read one answer for ``wants`` (in request order)."""
    idle = {}
    if len(wants) >= fetch_width.BULK_MIN:
        idle = await fetch_width.caught_up(reader, wants, max_bytes, read_committed)
    rest = [(i, w) for i, w in enumerate(wants) if i not in idle]
    if len(rest) >= LOOKUP_MANY_MIN:
        looked = iter(await _lookup_many(reader, [w for _, w in rest], max_bytes, fresh))
    else:
        looked = iter(
            await asyncio.gather(
                *(_lookup(reader, w, _limit(w, max_bytes), fresh) for _, w in rest)
            )
        )
    found = [idle[i] if i in idle else next(looked) for i in range(len(wants))]
    if read_committed:
        await fetch_width.stable(reader, wants, found)
    # Budget the response in request order, like Kafka: each partition gets at most
    # min(partition_max_bytes, what is left), and the first one with data at least
    # one whole batch.
    left = max(0, max_bytes)
    min_one = True
    for w, pf in zip(wants, found, strict=True):
        if pf.error or not pf.batches:
            continue
        pf.batches = select_batches(pf.batches, min(w.max_bytes, left), min_one=min_one)
        if pf.batches:
            min_one = False
            left = max(0, left - pf.nbytes)
    await _read_all(reader, wants, found)
    return list(found)


# The tagged fields' defaults, one instance each for every entry: the fetch path
# never sets or mutates them, and three fresh objects per partition were half the
# cost of building a response of 500 partitions (a sessionless consumer at width).
_NO_EPOCH = PartitionData.EpochEndOffset()
_NO_LEADER = PartitionData.LeaderIdAndEpoch()
_NO_SNAPSHOT = PartitionData.SnapshotId()


def partition_data(partition: int, pf: PartitionFetch) -> PartitionData:
    """The response entry of one partition (every Fetch response is built here)."""
    if pf.error:
        return PartitionData(
            partition_index=partition, error_code=pf.error,
            high_watermark=-1, last_stable_offset=-1, log_start_offset=-1,
            diverging_epoch=_NO_EPOCH, current_leader=_NO_LEADER, snapshot_id=_NO_SNAPSHOT,
            aborted_transactions=[], preferred_read_replica=-1, records=b"",
        )  # fmt: skip
    return PartitionData(
        partition_index=partition, error_code=0,
        high_watermark=pf.high_watermark, last_stable_offset=pf.lso,
        log_start_offset=pf.log_start_offset,
        diverging_epoch=_NO_EPOCH, current_leader=_NO_LEADER, snapshot_id=_NO_SNAPSHOT,
        aborted_transactions=[Aborted(producer_id=a[0], first_offset=a[1]) for a in pf.aborted],
        preferred_read_replica=-1, records=pf.records,
    )  # fmt: skip


def offsets_sent(pf: PartitionFetch) -> tuple[int, int, int]:
    """High watermark, last stable offset and log start offset as sent."""
    if pf.error:
        return -1, -1, -1
    return pf.high_watermark, pf.lso, pf.log_start_offset


def enough(results: list[PartitionFetch], min_bytes: int) -> bool:
    # Kafka answers at once on any partition error or with min_bytes gathered.
    return any(r.error for r in results) or sum(len(r.records) for r in results) >= min_bytes
