"""Step 5 of a Fetch, one look: width -> lookup -> read_committed cut -> byte budget -> read.

Where it sits: :mod:`agent.fetch.poll` calls :func:`fetch_once` for every look at
the wanted partitions (once, or again after each commit while long-polling). One
look takes the steps below in this order, each its own module or function:

1. :func:`agent.fetch.width.caught_up` settles, from one watermark query per
   topic, the partitions of topics asked at width that are caught up or at this
   agent's own tail;
2. :func:`agent.fetch.lookup.lookup` asks the metastore's index for the rest;
3. read_committed (``isolation_level`` 1): :func:`_stable` cuts each partition
   at its last stable offset and lists the aborted transactions from the fetch
   offset on (one ``stable_offsets`` query per look; records are never decoded
   for this);
4. the byte budget, in request order as Kafka: each partition gets at most
   ``min(partition_max_bytes, bytes left of max_bytes)`` (and of what the agent's
   memory budget has left: the planned bytes are reserved in it, :class:`Reservation`,
   until the response is handed to the connection), the whole batch
   holding the fetch offset first (clients skip the leading records), and the
   first partition with data at least one whole batch, however large (KIP-74,
   :func:`select_batches`);
5. :func:`agent.fetch.read.read_all` reads the chosen batches' bytes;
6. :meth:`agent.fetch.readahead.ReadAhead.after_read` loads ahead of readers
   behind the tail (in the background).

A storage failure while looking up or reading a partition answers
KAFKA_STORAGE_ERROR for that partition (retriable) instead of closing the
connection.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

from agent.fetch import width
from agent.fetch.lookup import lookup
from agent.fetch.model import PartitionFetch, Want
from agent.fetch.read import read_all
from kafka_protocol.errors import ErrorCode
from metastore.types import BatchLocation, MetastoreError

if TYPE_CHECKING:
    from agent.fetch.reader import FetchReader

log = logging.getLogger(__name__)


class Budget(Protocol):
    """The agent's memory budget (:class:`agent.security.limits.ResponseBudget`): unread
    responses and request frames being received, all connections together."""

    capacity: int
    used: int

    def add(self, n: int) -> None: ...

    def sub(self, n: int) -> None: ...


# Fetch responses may plan into this share of the budget; the rest stays for request
# frames, so clients that fetch much and never read cannot make a producer's large
# request wait for the deadline that closes them (they hold at most this share, plus
# one batch each).
RESPONSE_SHARE = 0.75


def response_room(budget: Budget) -> int:
    """What a Fetch may still plan into the budget."""
    return max(0, int(budget.capacity * RESPONSE_SHARE) - budget.used)


class Reservation:
    """The bytes one Fetch has planned to read, counted in the agent's budget from
    the moment they are planned until the response is handed to the connection
    (which then counts what its client leaves unread). So Fetches built at the same
    time see each other's planned bytes: 32 of them asking 2^31-1 bytes share the
    budget instead of each taking all of it."""

    __slots__ = ("_budget", "held")

    def __init__(self, budget: Budget) -> None:
        self._budget = budget
        self.held = 0

    def available(self) -> int:
        return response_room(self._budget)

    def take(self, n: int) -> None:
        self._budget.add(n)
        self.held += n

    def release(self) -> None:
        if self.held:
            held, self.held = self.held, 0
            self._budget.sub(held)


async def fetch_once(
    reader: FetchReader,
    wants: list[Want],
    max_bytes: int,
    *,
    fresh: bool = False,
    read_committed: bool = False,
    reservation: Reservation | None = None,
) -> list[PartitionFetch]:
    """Plan and read one answer for ``wants`` (in request order). With a
    ``reservation``, the bytes planned are at most what the agent's budget has left
    (one batch still goes, KIP-74) and are added to it before they are read."""
    idle: dict[int, PartitionFetch] = {}
    if width.worth_it(wants):
        idle = await width.caught_up(reader, wants, max_bytes, read_committed)
    rest = [w for i, w in enumerate(wants) if i not in idle]
    looked = iter(await lookup(reader, rest, max_bytes, fresh))
    found = [idle[i] if i in idle else next(looked) for i in range(len(wants))]
    if read_committed:
        await _stable(reader, wants, found)
    # Budget the response in request order, like Kafka: each partition gets at most
    # min(partition_max_bytes, what is left), and the first one with data at least
    # one whole batch.
    left = max(0, max_bytes)
    if reservation is not None:  # read now, after the lookups: no await until take()
        left = min(left, reservation.available())
    min_one = True
    for w, pf in zip(wants, found, strict=True):
        if pf.error or not pf.batches:
            continue
        pf.batches = select_batches(pf.batches, min(w.max_bytes, left), min_one=min_one)
        if pf.batches:
            min_one = False
            left = max(0, left - pf.nbytes)
    if reservation is not None:
        reservation.take(sum(pf.nbytes for pf in found))
    await read_all(reader, wants, found)
    if reader.readahead is not None:
        reader.readahead.after_read(wants, found)
    return found


def select_batches(
    batches: Sequence[BatchLocation], limit: int, *, min_one: bool
) -> list[BatchLocation]:
    """The leading batches whose total size stays within ``limit``; if none fits and
    ``min_one``, the first batch alone (Kafka returns it whole so that large
    messages make progress)."""
    out: list[BatchLocation] = []
    total = 0
    for b in batches:
        if total + b.byte_len > limit:
            break
        out.append(b)
        total += b.byte_len
    if not out and min_one and batches:
        out.append(batches[0])
    return out


async def _stable(reader: FetchReader, wants: list[Want], found: list[PartitionFetch]) -> None:
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
