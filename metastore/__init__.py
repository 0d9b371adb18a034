"""Floe's metastore: topics, the sequencer (one transaction per object), batch lookup,
producer ids, the object and agent registries.

``await open_metastore(url)`` picks the implementation from the URL scheme
(``sqlite://`` / ``sqlite+aiosqlite://`` embedded, ``postgresql://`` /
``postgresql+asyncpg://``; ``sqlite:///:memory:`` for a throw-away one; ``http://``
for a metastore served by ``floe metastore serve``), migrates the schema unless told not to, and returns a
``Metastore``. Imports nothing else of Floe's.
"""

from __future__ import annotations

from metastore.base import Clock, system_clock_ms
from metastore.engine import (
    SQLITE_WAL_AUTOCHECKPOINT_PAGES,
    create_engine,
    create_read_engine,
    is_postgres,
    is_served,
    normalize_url,
)
from metastore.migrate import migrate, migrate_engine
from metastore.protocol import Metastore
from metastore.sql import SqlMetastore
from metastore.sqlite_checkpoint import WalCheckpointer
from metastore.types import (
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    MAX_TIMESTAMP,
    NO_PRODUCER_ID,
    AgentInfo,
    BatchLocation,
    BatchToCommit,
    CommitResult,
    ConfigEntry,
    DeleteRecordsResult,
    DescribeConfigResult,
    ErrorCode,
    FindResult,
    ListOffsetsResult,
    MetastoreError,
    ObjectAlreadyCommittedError,
    ObjectCommitResult,
    ObjectInfo,
    ObjectToCommit,
    ProducerIdResult,
    TopicInfo,
    TopicResult,
)


def safe_url(url: str) -> str:
    """``url`` without its password, for messages (:func:`metastore.redact.redact_url`)."""
    from metastore.redact import redact_url

    return redact_url(url)


async def open_metastore(
    url: str,
    *,
    now_ms: Clock | None = None,
    auto_migrate: bool = True,
    pool_size: int = 10,
    internal_token: str | None = None,
    admin_token: str | None = None,
    ca_file: str | None = None,
) -> Metastore:
    """Open the metastore at ``url`` (migrating it first unless ``auto_migrate`` is
    False); close it with ``await ms.close()`` or ``async with``. ``internal_token``
    (default env ``FLOE_METASTORE_TOKEN``, else ``FLOE_INTERNAL_TOKEN``) authenticates to a
    served metastore; ``admin_token`` (default env ``FLOE_METASTORE_ADMIN_TOKEN``) is sent
    for its admin methods (ACL and SCRAM changes); ``ca_file`` (default env
    ``FLOE_METASTORE_CA``, else the system trust store) verifies an ``https://`` one."""
    if is_served(url):  # served by `floe metastore serve`
        from metastore.remote import RemoteMetastore

        return await RemoteMetastore(url, token=internal_token, admin_token=admin_token, ca_file=ca_file).start()  # type: ignore[return-value]
    if is_postgres(url):
        from metastore.postgres import PostgresMetastore

        try:
            if auto_migrate:
                await migrate(url)
            return await PostgresMetastore(url, now_ms, pool_size).start()
        except (OSError, TimeoutError) as e:  # refused, unknown host, unreachable
            raise MetastoreError(f"cannot connect to the metastore at {safe_url(url)}: {e}") from e
    read_engine = create_read_engine(url)  # None unless a file-backed SQLite database
    file_backed = read_engine is not None
    engine = create_engine(
        normalize_url(url), wal_autocheckpoint=SQLITE_WAL_AUTOCHECKPOINT_PAGES if file_backed else None
    )
    if auto_migrate:
        await migrate_engine(engine)
    ms = SqlMetastore(engine, now_ms, read_engine=read_engine)
    if file_backed:
        ms.checkpointer = WalCheckpointer(str(normalize_url(url).database)).start()
    return ms


__all__ = [
    "EARLIEST_TIMESTAMP",
    "LATEST_TIMESTAMP",
    "MAX_TIMESTAMP",
    "NO_PRODUCER_ID",
    "AgentInfo",
    "BatchLocation",
    "BatchToCommit",
    "Clock",
    "CommitResult",
    "ConfigEntry",
    "DeleteRecordsResult",
    "DescribeConfigResult",
    "ErrorCode",
    "FindResult",
    "ListOffsetsResult",
    "Metastore",
    "MetastoreError",
    "ObjectAlreadyCommittedError",
    "ObjectCommitResult",
    "ObjectInfo",
    "ObjectToCommit",
    "ProducerIdResult",
    "SqlMetastore",
    "TopicInfo",
    "TopicResult",
    "is_postgres",
    "is_served",
    "migrate",
    "open_metastore",
    "system_clock_ms",
]
