"""Step 4 of a Fetch: the long-poll, looking again on each commit until enough or ``max_wait_ms``.

Where it sits: after :mod:`agent.fetch.session` and before the look itself
(:func:`agent.fetch.plan.fetch_once`, which it calls once per look); its results
go to :mod:`agent.fetch.answer`. With fewer than ``min_bytes`` and
``max_wait_ms > 0`` a Fetch waits until a commit to one of the requested
partitions (this agent's, or another's through ``agent.cluster``) or
``max_wait_ms``, then looks again. Any partition error answers at once.

- :func:`until_enough`, for sessionless and full requests, registers a commit
  watch on the wanted partitions before its first look, so a look that found
  nothing was already current and the wait starts at once (a consumer caught up
  on many partitions pays one look per commit, not two).
- :func:`until_news`, for the incremental requests of a session, looks only at
  the session's candidates (partitions that changed, have unfetched data or an
  error) and keeps only the answers the client must hear; it waits on the
  session's one event, which its commit subscription sets.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from agent.fetch.model import PartitionFetch, Want
from agent.fetch.plan import Reservation, fetch_once

if TYPE_CHECKING:
    from agent.fetch.host import FetchHost
    from agent.fetch.session import FetchSession, SessionKey
    from kafka_protocol.messages import FetchRequest


def enough(results: list[PartitionFetch], min_bytes: int) -> bool:
    # Kafka answers at once on any partition error or with min_bytes gathered.
    return any(r.error for r in results) or sum(len(r.records) for r in results) >= min_bytes


async def until_enough(
    host: FetchHost, req: FetchRequest, wants: list[Want], *, fresh: bool, reservation: Reservation | None = None
) -> list[PartitionFetch]:
    """One answer for ``wants``, long-polling (re-planned on commits to the wanted
    partitions) until enough or ``max_wait_ms``.

    Only answers with batches are ever served from the lookup cache, so a first
    look that found data but not ``min_bytes`` is repeated fresh before waiting."""
    reader, clock = host.fetch_reader, host.clock
    committed = req.isolation_level == 1
    deadline = clock.monotonic() + req.max_wait_ms / 1000.0
    keys = [(w.topic_id, w.partition) for w in wants if w.topic_id is not None]
    if not keys or req.max_wait_ms <= 0:
        return await fetch_once(
            reader, wants, req.max_bytes, fresh=fresh, read_committed=committed, reservation=reservation
        )
    with host.notifier.watch(keys) as ev:
        results = await fetch_once(
            reader, wants, req.max_bytes, fresh=fresh, read_committed=committed, reservation=reservation
        )
        again = not fresh and any(r.records for r in results)
        while not enough(results, req.min_bytes):
            if not again:
                remaining = deadline - clock.monotonic()
                if remaining <= 0:
                    break
                try:
                    await asyncio.wait_for(ev.wait(), timeout=remaining)
                except TimeoutError:
                    break
            again = False
            ev.clear()  # before looking: a commit landing during the look wakes the next wait
            if reservation is not None:
                reservation.release()  # what the previous look read is dropped
            results = await fetch_once(
                reader, wants, req.max_bytes, fresh=True, read_committed=committed, reservation=reservation
            )
    return results


async def until_news(
    host: FetchHost, req: FetchRequest, session: FetchSession, reservation: Reservation | None = None
) -> dict[SessionKey, PartitionFetch]:
    """Look only at the partitions that changed, have unfetched data or an error;
    keep the answers with something to say, until enough or ``max_wait_ms``."""
    reader, clock = host.fetch_reader, host.clock
    deadline = clock.monotonic() + req.max_wait_ms / 1000.0
    answer: dict[SessionKey, PartitionFetch] = {}
    session.busy = True
    try:
        while True:
            candidates = session.take_candidates()
            topic_refs: dict[object, int] = {}
            wants = []
            for key, part in candidates:
                ti = topic_refs.setdefault(key[0], len(topic_refs))
                w = Want(
                    ti, part.partition, part.fetch_offset, part.max_bytes, part.topic_id, part.error,
                    part.topic_partitions, part.compacted,
                )  # fmt: skip
                wants.append(w)
            results = await fetch_once(
                reader, wants, req.max_bytes, fresh=True, read_committed=req.isolation_level == 1,
                reservation=reservation,
            )  # fmt: skip
            for (key, part), pf in zip(candidates, results, strict=True):
                hwm, lso, log_start = pf.offsets_sent()
                session.observed(key, pf.error, hwm)
                if session.must_respond(part, pf.error, hwm, lso, log_start, len(pf.records)):
                    answer[key] = pf
            if enough(list(answer.values()), req.min_bytes):
                break
            remaining = deadline - clock.monotonic()
            if remaining <= 0 or not session.partitions:
                break
            if not session.changed_keys:
                try:
                    await asyncio.wait_for(session.event.wait(), timeout=remaining)
                except TimeoutError:
                    break
    finally:
        session.busy = False
    return answer
