"""Share sessions (KIP-932): which share partitions a member fetches from this agent.

Where it sits: ShareFetch and ShareAcknowledge open, advance and close them;
they live in this agent's memory only (a client that reaches another agent, or
this one after a restart, gets SHARE_SESSION_NOT_FOUND and opens a new session
with epoch 0, as Kafka's client does). Epoch 0 opens (replacing any previous
session of the member), -1 closes, anything else must be the session's current
epoch, which then advances (wrapping to 1 after 2^31 - 1).

A session is a member's *on one connection*: with ``virtual_brokers`` > 1
(agent.cluster.virtual) a share consumer reaches one agent process as several
node ids, one connection and one share session each (Kafka keys sessions by
member because a client has one connection per broker). Keyed by member alone,
the sessions of two such connections would replace each other at every epoch
0. A member's sessions whose connection has closed are dropped when it opens a
new one (the client opens one after a reconnect).
"""

from __future__ import annotations

import uuid
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kafka_protocol.errors import ErrorCode

INITIAL_EPOCH = 0
FINAL_EPOCH = -1
MAX_SESSIONS = 10_000

TP = tuple[uuid.UUID, int]


@dataclass(slots=True)
class ShareSession:
    group_id: str
    member_id: str
    epoch: int = 1
    partitions: list[TP] = field(default_factory=list)
    conn: int = 0  # id() of the connection the session lives on (0: none)
    alive: Callable[[], bool] = lambda: True  # is that connection still open

    def add(self, tps: list[TP]) -> None:
        for tp in tps:
            if tp not in self.partitions:
                self.partitions.append(tp)

    def remove(self, tps: list[TP]) -> None:
        self.partitions = [tp for tp in self.partitions if tp not in tps]


def _alive(conn: Any) -> Callable[[], bool]:
    if conn is None:
        return lambda: True
    ref = weakref.ref(conn)
    return lambda: (c := ref()) is not None and not getattr(c, "_closed", False)


class ShareSessionCache:
    def __init__(self) -> None:
        self._sessions: dict[tuple[str, str, int], ShareSession] = {}
        self._members: dict[tuple[str, str], set[int]] = {}  # (group, member) -> its connections

    def open(self, group_id: str, member_id: str, conn: Any = None) -> ShareSession | None:
        key = (group_id, member_id, id(conn) if conn is not None else 0)
        for c in list(self._members.get(key[:2], ())):  # the member's sessions on closed connections
            old = self._sessions.get((group_id, member_id, c))
            if old is not None and c != key[2] and not old.alive():
                self.close(old)
        if key not in self._sessions and len(self._sessions) >= MAX_SESSIONS:
            return None
        s = self._sessions[key] = ShareSession(group_id, member_id, conn=key[2], alive=_alive(conn))
        self._members.setdefault(key[:2], set()).add(key[2])
        return s

    def check(self, group_id: str, member_id: str, epoch: int, conn: Any = None) -> tuple[int, ShareSession | None]:
        """The session for a request with ``epoch`` (not 0): (error code, session)."""
        s = self.get(group_id, member_id, conn)
        if s is None:
            return int(ErrorCode.SHARE_SESSION_NOT_FOUND), None
        if epoch != FINAL_EPOCH and epoch != s.epoch:
            return int(ErrorCode.INVALID_SHARE_SESSION_EPOCH), None
        return 0, s

    def advance(self, s: ShareSession) -> None:
        s.epoch = 1 if s.epoch >= 2**31 - 1 else s.epoch + 1

    def close(self, s: ShareSession) -> None:
        if self._sessions.get((s.group_id, s.member_id, s.conn)) is s:
            del self._sessions[(s.group_id, s.member_id, s.conn)]
            conns = self._members.get((s.group_id, s.member_id))
            if conns is not None:
                conns.discard(s.conn)
                if not conns:
                    del self._members[(s.group_id, s.member_id)]

    def get(self, group_id: str, member_id: str, conn: Any = None) -> ShareSession | None:
        s = self._sessions.get((group_id, member_id, id(conn) if conn is not None else 0))
        return s if s is not None and s.alive() else None  # (a closed connection's id may be reused)

    def __len__(self) -> int:
        return len(self._sessions)


_CACHES: weakref.WeakKeyDictionary[Any, ShareSessionCache] = weakref.WeakKeyDictionary()


def sessions_for(broker: Any) -> ShareSessionCache:
    c = _CACHES.get(broker)
    if c is None:
        c = _CACHES[broker] = ShareSessionCache()
    return c
