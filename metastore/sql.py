"""``SqlMetastore``: the complete metastore on SQLAlchemy Core (the SQLite default).

Composed of the transaction, topic, log, registry and group mixins; the same code runs on Postgres,
where ``PostgresMetastore`` replaces the two hot paths with raw asyncpg.
"""

from __future__ import annotations

from metastore.acls import AclsMixin
from metastore.compaction import CompactionMixin
from metastore.consumer_groups import ConsumerGroupsMixin
from metastore.leases import LeasesMixin
from metastore.log import LogMixin
from metastore.registry import RegistryMixin
from metastore.scram import ScramMixin
from metastore.share import ShareMixin
from metastore.topics import TopicsMixin
from metastore.txn import TxnMixin


class SqlMetastore(
    TxnMixin, TopicsMixin, LogMixin, RegistryMixin, ConsumerGroupsMixin, CompactionMixin, LeasesMixin, ShareMixin,
    ScramMixin,
    AclsMixin,
):
    """All operations over one SQLAlchemy async engine."""
