"""Is this exception the metastore being unreachable (not a business outcome, not a bug)?

Where it sits: consulted by the agent's dispatcher (``agent.handlers``) when a
handler fails, so that a lost database (Postgres down, restarting, a network
partition, ``floe metastore serve`` unreachable) is answered with retriable
Kafka errors instead of closing the client's connection with a traceback.
Looks through the cause chain for connection-level failures of asyncpg,
SQLAlchemy, aiosqlite's OS errors and :mod:`metastore.remote`.
"""

from __future__ import annotations

import asyncio

from metastore.types import MetastoreError

_NAMES = frozenset(
    (
        # asyncpg
        "PostgresConnectionError",
        "ConnectionDoesNotExistError",
        "ConnectionFailureError",
        "CannotConnectNowError",
        "InterfaceError",
        "InternalClientError",
        "TooManyConnectionsError",
        "AdminShutdownError",
        "CrashShutdownError",
        # SQLAlchemy
        "OperationalError",
        "DisconnectionError",
        "TimeoutError",
    )
)


def metastore_unavailable(e: BaseException) -> bool:
    """True when ``e`` (or what caused it) is a connection-level metastore failure."""
    seen: set[int] = set()
    cur: BaseException | None = e
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        if isinstance(cur, (OSError, TimeoutError, asyncio.TimeoutError, ConnectionError)):
            return True
        if type(cur).__name__ in _NAMES:
            return True
        if getattr(cur, "connection_invalidated", False):  # SQLAlchemy DBAPIError
            return True
        if isinstance(cur, MetastoreError) and (
            "unreachable" in str(cur) or "cannot connect" in str(cur)
        ):
            return True
        cur = cur.__cause__ or cur.__context__
    return False
