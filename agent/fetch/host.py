"""What the Fetch path needs of its agent, as an interface (the Broker provides it).

Where it sits: every step of :mod:`agent.fetch` that needs the agent takes a
:class:`FetchHost`, not the :class:`~agent.broker.Broker` class, so the read side
sits below the broker in the import graph: the broker builds the read side's
state (:attr:`FetchHost.fetch_reader`, :attr:`FetchHost.fetch_sessions`) and the
read side never imports the broker back.
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from agent.clock import Clock
    from agent.config import AgentConfig
    from agent.fetch.reader import FetchReader
    from agent.fetch.session import FetchSessionCache
    from agent.notify import CommitNotifier
    from agent.security.authorizer import Authorizer
    from metastore import TopicInfo


class FetchHost(Protocol):
    """The agent as the Fetch path sees it."""

    @property
    def config(self) -> AgentConfig: ...

    @property
    def clock(self) -> Clock: ...

    @property
    def notifier(self) -> CommitNotifier: ...

    @property
    def authorizer(self) -> Authorizer | None: ...

    @property
    def fetch_reader(self) -> FetchReader: ...

    @property
    def fetch_sessions(self) -> FetchSessionCache: ...

    async def topic(self, name: str) -> TopicInfo | None: ...

    async def topic_by_id(self, topic_id: uuid.UUID) -> TopicInfo | None: ...
