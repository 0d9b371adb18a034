"""Step 3 of a Fetch: its KIP-227 session, the state that lets a consumer send and receive only changes.

Where it sits: after :mod:`agent.fetch.resolve` (the request's wants) and before
:mod:`agent.fetch.poll` (the long-poll). :mod:`agent.fetch.request` keeps one
:class:`FetchSessionCache` per agent (``host.fetch_sessions``). A full fetch with
``session_epoch`` 0 creates a :class:`FetchSession` holding every requested
partition (:func:`hold`: its fetch offset and byte limit, and the high
watermark, last stable offset and log start offset last sent for it); the
response carries the session id. Later requests of that session (epoch 1, 2,
...) name only the partitions whose fetch position changed and the ones to
forget (:func:`update`), and the response holds only the partitions that have
something to say: records, a changed watermark or log start offset, or an
error.

What makes an idle session cheap whatever its size: the session subscribes to
the agent's :class:`~agent.notify.CommitNotifier`, so a commit (local, or
another agent's through ``agent.cluster``) marks just that partition
*changed*. An incremental fetch looks up only the partitions that changed,
that still have data the consumer has not fetched (``ready``), or that
answered an error; with none of those it waits on the session's one event
until a commit or ``max_wait_ms``. No per-request work walks the session.

Epochs and ids follow Kafka's ``FetchSession``/``FetchManager``: epoch 0 (with
or without a session id) starts a new session (closing the named one), -1
closes it and fetches without a session, a session id with any other epoch
must be the session's next epoch (else INVALID_FETCH_SESSION_EPOCH) and must
exist (else FETCH_SESSION_ID_NOT_FOUND, and the client starts over with a full
fetch). The cache holds ``slots`` sessions; a new one evicts the least
recently used session idle for ``min_eviction_s`` (120 s), else the least
recently used one with fewer partitions, else it is not cached (session id
0: the client keeps sending full requests).
"""

from __future__ import annotations

import asyncio
import itertools
import random
import uuid
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from agent.fetch.model import Want
from agent.notify import CommitNotifier, PartitionKey

if TYPE_CHECKING:
    from kafka_protocol.messages import FetchRequest

INITIAL_EPOCH = 0
FINAL_EPOCH = -1
INT32_MAX = 2**31 - 1
MIN_EVICTION_S = 120.0

# (topic id or name as the client addresses it, partition)
SessionKey = tuple[object, int]


def next_epoch(epoch: int) -> int:
    return epoch if epoch < 0 else 1 if epoch == INT32_MAX else epoch + 1


@dataclass(slots=True)
class SessionPartition:
    """One partition of a session: what the client asked and what we last sent."""

    topic: str  # name (responses before v13)
    topic_ref: uuid.UUID  # the id the client used (v13+), else ZERO_UUID
    topic_id: uuid.UUID | None  # None: unknown topic (``error`` says which)
    partition: int
    fetch_offset: int
    max_bytes: int
    error: int = 0
    order: int = 0  # position in the session (rotated: partitions with data go last)
    high_watermark: int = -1  # as last sent
    log_start_offset: int = -1
    last_stable_offset: int = -1
    topic_partitions: int = 0  # the topic's partition count when the session took it
    compacted: bool = False  # its cleanup.policy had compact then (agent.fetch.model.Want)


class FetchSession:
    def __init__(self, session_id: int, by_id: bool, notifier: CommitNotifier, now: float) -> None:
        self.id = session_id
        self.epoch = next_epoch(INITIAL_EPOCH)  # the epoch the next request must carry
        self.by_id = by_id
        self.notifier = notifier
        self.partitions: dict[SessionKey, SessionPartition] = {}
        self._by_tp: dict[PartitionKey, SessionKey] = {}
        self.changed_keys: set[SessionKey] = set()  # committed to since last looked at
        self.ready: set[SessionKey] = set()  # data below the high watermark not fetched yet
        self.errored: set[SessionKey] = set()
        self.event = asyncio.Event()
        self.last_used = now
        self._order = itertools.count()
        self.busy = False  # a fetch of this session is being answered
        self.size_hint = 0  # partitions of the request that created it

    def __len__(self) -> int:
        return max(len(self.partitions), self.size_hint)

    # -- CommitNotifier subscriber --------------------------------------------------

    def changed(self, key: PartitionKey) -> None:
        skey = self._by_tp.get(key)
        if skey is not None:
            self.changed_keys.add(skey)
            self.event.set()

    # -- membership -----------------------------------------------------------------

    def upsert(self, key: SessionKey, part: SessionPartition) -> None:
        """Add a partition or take the client's new fetch offset / limit for it."""
        old = self.partitions.get(key)
        if old is not None:
            old.fetch_offset, old.max_bytes = part.fetch_offset, part.max_bytes
            if old.topic_id == part.topic_id and old.error == part.error:
                self.changed_keys.add(key)
                return
            self.remove(key)  # the topic behind the name changed: start it afresh
        part.order = next(self._order)
        self.partitions[key] = part
        if part.topic_id is not None:
            tp = (part.topic_id, part.partition)
            self._by_tp[tp] = key
            self.notifier.subscribe(self, (tp,))
        self.changed_keys.add(key)

    def remove(self, key: SessionKey) -> None:
        part = self.partitions.pop(key, None)
        if part is None:
            return
        if part.topic_id is not None:
            tp = (part.topic_id, part.partition)
            self._by_tp.pop(tp, None)
            self.notifier.unsubscribe(self, (tp,))
        self.changed_keys.discard(key)
        self.ready.discard(key)
        self.errored.discard(key)

    def close(self) -> None:
        self.notifier.unsubscribe(self, list(self._by_tp))
        self._by_tp.clear()
        self.partitions.clear()

    # -- per fetch ------------------------------------------------------------------

    def take_candidates(self) -> list[tuple[SessionKey, SessionPartition]]:
        """The partitions worth a look, in session order; clears the change marks."""
        keys = self.changed_keys | self.ready | self.errored
        self.changed_keys = set()
        self.event.clear()
        parts = self.partitions
        found = [(k, parts[k]) for k in keys if k in parts]
        found.sort(key=lambda kp: kp[1].order)
        return found

    def observed(self, key: SessionKey, error: int, high_watermark: int) -> None:
        """After a lookup: remember whether the partition has unfetched data or an error."""
        part = self.partitions.get(key)
        if part is None:
            return
        if error:
            self.errored.add(key)
            self.ready.discard(key)
            return
        self.errored.discard(key)
        if part.fetch_offset < high_watermark:
            self.ready.add(key)
        else:
            self.ready.discard(key)

    def must_respond(
        self, part: SessionPartition, error: int, hwm: int, lso: int, log_start: int, nbytes: int
    ) -> bool:
        return bool(
            nbytes
            or error
            or hwm != part.high_watermark
            or lso != part.last_stable_offset
            or log_start != part.log_start_offset
        )

    def sent(self, key: SessionKey, hwm: int, lso: int, log_start: int, had_records: bool) -> None:
        part = self.partitions.get(key)
        if part is None:
            return
        part.high_watermark, part.last_stable_offset, part.log_start_offset = hwm, lso, log_start
        if had_records:  # fairness: partitions that got data go to the back
            part.order = next(self._order)


class FetchSessionCache:
    def __init__(
        self,
        notifier: CommitNotifier,
        clock: Callable[[], float],
        *,
        slots: int,
        min_eviction_s: float = MIN_EVICTION_S,
    ) -> None:
        self.notifier = notifier
        self.clock = clock
        self.slots = slots
        self.min_eviction_s = min_eviction_s
        self._sessions: OrderedDict[int, FetchSession] = OrderedDict()  # least recently used first
        self._rng = random.Random()
        self.evictions = 0

    def __len__(self) -> int:
        return len(self._sessions)

    def get(self, session_id: int) -> FetchSession | None:
        session = self._sessions.get(session_id)
        if session is not None:
            session.last_used = self.clock()
            self._sessions.move_to_end(session_id)
        return session

    def remove(self, session_id: int) -> None:
        session = self._sessions.pop(session_id, None)
        if session is not None:
            session.close()

    def create(self, partitions: int, by_id: bool) -> FetchSession | None:
        """A new session for a full request of ``partitions`` partitions, or None
        when the cache is full and nothing may be evicted for it."""
        if self.slots <= 0:
            return None
        now = self.clock()
        if len(self._sessions) >= self.slots and not self._evict_for(partitions, now):
            return None
        while True:
            session_id = self._rng.randint(1, INT32_MAX)
            if session_id not in self._sessions:
                break
        session = FetchSession(session_id, by_id, self.notifier, now)
        session.size_hint = partitions
        self._sessions[session_id] = session
        return session

    def _evict_for(self, partitions: int, now: float) -> bool:
        victim = None
        for sid, session in self._sessions.items():  # least recently used first
            if now - session.last_used >= self.min_eviction_s:
                victim = sid
                break
        if victim is None:
            victim = next((sid for sid, s in self._sessions.items() if len(s) < partitions), None)
        if victim is None:
            return False
        self.remove(victim)
        self.evictions += 1
        return True

    def sessions(self) -> Iterable[FetchSession]:
        return self._sessions.values()


# -- applying a request to a session --------------------------------------------------


def session_key(t: Any, partition: int, by_id: bool) -> SessionKey:
    """A partition's key in a session: its topic as the client addresses it."""
    return (t.topic_id if by_id else t.topic, partition)


def session_partition(t: Any, w: Want) -> SessionPartition:
    """What a session keeps of one requested partition."""
    return SessionPartition(
        topic=t.topic, topic_ref=t.topic_id, topic_id=w.topic_id, partition=w.partition,
        fetch_offset=w.fetch_offset, max_bytes=w.max_bytes, error=w.error,
        topic_partitions=w.topic_partitions, compacted=w.compacted,
    )  # fmt: skip


def hold(session: FetchSession, req: FetchRequest, wants: list[Want], by_id: bool) -> list[SessionKey]:
    """A new session takes every partition of its full request (their keys, in
    request order). Subscribed before the fresh lookups: a commit landing meanwhile
    stays marked, so the next incremental fetch looks again."""
    keys: list[SessionKey] = []
    for w in wants:
        t = req.topics[w.topic_index]
        key = session_key(t, w.partition, by_id)
        session.upsert(key, session_partition(t, w))
        keys.append(key)
    session.take_candidates()
    return keys


def update(session: FetchSession, req: FetchRequest, wants: list[Want], by_id: bool) -> None:
    """Apply an incremental request: new or moved partitions, then forgotten ones."""
    for w in wants:
        t = req.topics[w.topic_index]
        session.upsert(session_key(t, w.partition, by_id), session_partition(t, w))
    for f in req.forgotten_topics_data:
        ref = f.topic_id if by_id else f.topic
        for p in f.partitions:
            session.remove((ref, p))
