"""Share sessions (KIP-932): which share partitions a member fetches from this agent.

Where it sits: ShareFetch and ShareAcknowledge open, advance and close them;
they live in this agent's memory only (a client that reaches another agent, or
this one after a restart, gets SHARE_SESSION_NOT_FOUND and opens a new session
with epoch 0, as Kafka's client does). Epoch 0 opens (replacing any previous
session of the member), -1 closes, anything else must be the session's current
epoch, which then advances (wrapping to 1 after 2^31 - 1).
"""

from __future__ import annotations

import uuid
import weakref
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

    def add(self, tps: list[TP]) -> None:
        for tp in tps:
            if tp not in self.partitions:
                self.partitions.append(tp)

    def remove(self, tps: list[TP]) -> None:
        self.partitions = [tp for tp in self.partitions if tp not in tps]


class ShareSessionCache:
    def __init__(self) -> None:
        self._sessions: dict[tuple[str, str], ShareSession] = {}

    def open(self, group_id: str, member_id: str) -> ShareSession | None:
        key = (group_id, member_id)
        if key not in self._sessions and len(self._sessions) >= MAX_SESSIONS:
            return None
        s = self._sessions[key] = ShareSession(group_id, member_id)
        return s

    def check(self, group_id: str, member_id: str, epoch: int) -> tuple[int, ShareSession | None]:
        """The session for a request with ``epoch`` (not 0): (error code, session)."""
        s = self._sessions.get((group_id, member_id))
        if s is None:
            return int(ErrorCode.SHARE_SESSION_NOT_FOUND), None
        if epoch != FINAL_EPOCH and epoch != s.epoch:
            return int(ErrorCode.INVALID_SHARE_SESSION_EPOCH), None
        return 0, s

    def advance(self, s: ShareSession) -> None:
        s.epoch = 1 if s.epoch >= 2**31 - 1 else s.epoch + 1

    def close(self, s: ShareSession) -> None:
        self._sessions.pop((s.group_id, s.member_id), None)

    def get(self, group_id: str, member_id: str) -> ShareSession | None:
        return self._sessions.get((group_id, member_id))

    def __len__(self) -> int:
        return len(self._sessions)


_CACHES: weakref.WeakKeyDictionary[Any, ShareSessionCache] = weakref.WeakKeyDictionary()


def sessions_for(broker: Any) -> ShareSessionCache:
    c = _CACHES.get(broker)
    if c is None:
        c = _CACHES[broker] = ShareSessionCache()
    return c
