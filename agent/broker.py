"""The Broker: one agent's state, shared by every connection and handler.

It owns the metastore handle, the object store, the produce pipeline, the
fetch block cache, the commit notifier, the group and transaction coordinators and a
short-lived topic cache. Handlers
get it as their first argument; nothing here speaks the wire protocol.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
import time
import uuid
from dataclasses import dataclass

from agent.cache import BlockCache
from agent.clock import Clock, SystemClock
from agent.cluster import Cluster, ClusteredGroupCoordinator, ClusterSettings, Peer, node_id_for
from agent.cluster.isolation import IsolationSettings
from agent.config import AgentConfig
from agent.fetch.reader import FetchReader, make_reader
from agent.fetch.session import FetchSessionCache
from agent.fetch.tail_index import TailIndex
from agent.groups import GroupConfig
from agent.groups.consumer import ConsumerGroupConfig, ConsumerGroupCoordinator
from agent.groups.consumer.migration import MigrationPolicy
from agent.metadata_cache import MetadataCache
from agent.metrics import METRICS
from agent.notify import CommitNotifier
from agent.produce import ProducePipeline
from agent.produce.admission import cache_bytes_of
from agent.produce.consolidate import Consolidator
from agent.security.authorizer import Authorizer, parse_super_users
from agent.security.tls import PeerTls
from agent.txn import TxnCoordinator
from metastore import Metastore, TopicInfo, open_metastore
from metastore.internal_auth import metastore_token, peer_token
from metastore.types import ErrorCode as MetaError
from objectstore.base import ObjectStore
from objectstore.journal import JOURNAL_PREFIX, open_journaled_store, parse_journal_urls

log = logging.getLogger(__name__)

DEFAULT_MAX_MESSAGE_BYTES = 1048588


@dataclass(frozen=True, slots=True)
class NodeInfo:
    node_id: int
    host: str
    port: int
    rack: str | None


def _count_journal_put(bucket: int, outcome: str, _seconds: float) -> None:
    METRICS.journal_puts.labels(str(bucket), outcome).inc()


class ClusterIdError(RuntimeError):
    """The cluster id is missing (first start on this metastore) or differs from the
    one the metastore holds: refuse to start, with one line saying which."""


async def resolve_cluster_id(config: AgentConfig, meta: Metastore) -> AgentConfig:
    """The config with the cluster's id: the configured one, stored in the metastore
    by the first agent; or, when none is configured, the stored one."""
    stored = await meta.claim_cluster_id(config.cluster_id or None)
    if stored is None:
        raise ClusterIdError(
            "no cluster id: set FLOE_CLUSTER_ID (or --cluster-id) for the first agent of a"
            " deployment; later agents may omit it and use the one stored in the metastore"
        )
    if config.cluster_id and stored != config.cluster_id:
        raise ClusterIdError(
            f"cluster id {config.cluster_id!r} does not match {stored!r}, the cluster id stored"
            " in this metastore: is this agent pointed at another deployment's metastore?"
        )
    return config if config.cluster_id == stored else config.model_copy(update={"cluster_id": stored})


class Broker:
    def __init__(
        self,
        config: AgentConfig,
        metastore: Metastore,
        store: ObjectStore,
        *,
        clock: Clock | None = None,
        owns_resources: bool = True,
    ) -> None:
        self.config = config
        self.meta = metastore
        self.store = store
        self.clock = clock or SystemClock()
        self.notifier = CommitNotifier()
        port = config.advertised_port or config.port
        self.node_id = node_id_for(config.agent_id)  # identity, not address
        self.advertised = NodeInfo(self.node_id, config.advertised_host, port, config.zone)
        # listener name -> advertised (host, port), set by the server once bound.
        self.endpoints: dict[str, tuple[str, int]] = {}
        self.primary_listener = "PLAINTEXT"
        # Where this agent's own commits put the latest batches (agent.fetch.tail_index).
        self.tail = TailIndex(self.clock, ttl_ms=config.tail_index_ms)
        self.cache = BlockCache(self._load_range, capacity_bytes=cache_bytes_of(config), block_size=config.fetch_block_bytes)
        journal = bool(parse_journal_urls(config.journal))
        write_through = self.cache.put_object if config.fetch_cache_writes else None
        self.pipeline = ProducePipeline(
            store,
            metastore,
            agent_id=config.agent_id,
            flush_bytes=config.flush_bytes,
            # With a journal tier: small journal objects sealed every few ms (issue 40).
            flush_interval_ms=config.journal_interval_ms if journal else config.flush_interval_ms,
            flush_min_interval_ms=config.journal_seal_ms if journal else config.flush_min_interval_ms,
            key_prefix=JOURNAL_PREFIX if journal else "segments/",
            consolidator=Consolidator(
                store,
                metastore,
                agent_id=config.agent_id,
                interval_ms=config.consolidate_interval_ms,
                max_bytes=config.consolidate_bytes,
                clock=self.clock,
                on_uploaded=write_through,
            )
            if journal
            else None,
            # journal objects are small and frequent: more of them in flight at once
            upload_concurrency=max(config.upload_concurrency, 16) if journal else config.upload_concurrency,
            max_buffered_bytes=config.max_buffered_bytes,
            abort_ms=config.produce_abort_ms,
            clock=self.clock,
            on_commit=self._on_commit,
            on_committed=self.tail.committed,
            on_uploaded=write_through,
        )
        self._topics_by_name: dict[str, tuple[float, TopicInfo | None]] = {}
        self._topics_by_id: dict[uuid.UUID, tuple[float, TopicInfo | None]] = {}
        self._topic_ttl = 1.0
        self.metadata = MetadataCache(self._topic_ttl)
        self._owns = owns_resources
        self._create_lock = asyncio.Lock()
        self.groups = ClusteredGroupCoordinator(
            metastore,
            self.clock,
            GroupConfig(
                initial_rebalance_delay_ms=config.group_initial_rebalance_delay_ms,
                min_session_timeout_ms=config.group_min_session_timeout_ms,
                max_session_timeout_ms=config.group_max_session_timeout_ms,
                agent_id=config.agent_id,
            ),
        )
        # Membership, rings, peer cache and cross-agent wake-ups (agent.cluster);
        # this agent alone until the server starts it.
        self.cluster = Cluster(
            metastore,
            Peer(config.agent_id, config.advertised_host, port, config.zone, None, None),
            self.clock,
            self._store_range,
            self.notifier,
            metastore_url=config.metastore,
            settings=ClusterSettings(
                heartbeat_s=config.cluster_heartbeat_ms / 1000,
                dead_after_s=config.cluster_dead_after_ms / 1000,
                peer_cache=config.peer_cache,
                peer_token=peer_token(config.peer_token, config.internal_token),
                virtual_brokers=config.virtual_brokers,
                peer_tls=PeerTls.from_config(config),
                isolation=IsolationSettings(
                    enabled=config.isolation,
                    slow_ms=config.isolate_slow_ms,
                    factor=config.isolate_slow_factor,
                    isolate_for_s=config.isolate_for_s,
                    max_fraction=config.isolate_max_fraction,
                    probe_timeout_s=config.isolate_probe_timeout_ms / 1000,
                ),
            ),
        )
        self.cluster.attach_groups(self.groups)
        # KIP-848 consumer groups beside the classic ones (same ring owner).
        self.consumer_groups = ConsumerGroupCoordinator(
            metastore,
            self.clock,
            metastore.list_topics,
            ConsumerGroupConfig(
                session_timeout_ms=config.consumer_group_session_timeout_ms,
                heartbeat_interval_ms=config.consumer_group_heartbeat_interval_ms,
                agent_id=config.agent_id,
                migration_policy=MigrationPolicy(config.consumer_group_migration_policy),
            ),
            owns=lambda gid: self.cluster.owns_group(gid),
            classic=self.groups,  # online upgrade/downgrade between the two protocols
        )
        self.cluster.ring_listeners = [self.consumer_groups.release_unowned]
        # ACLs (agent.security.authorizer); None: everyone may do everything.
        self.authorizer: Authorizer | None = None
        if config.authorizer == "acl":
            self.authorizer = Authorizer(
                metastore,
                super_users=parse_super_users(config.super_users),
                allow_everyone_if_no_acl_found=config.allow_everyone_if_no_acl_found,
                refresh_s=config.acl_refresh_ms / 1000,
            )
        # Transactions: the ids this agent owns on the ring (like groups), state in
        # the metastore, markers through the pipeline (agent.txn).
        self.txn = TxnCoordinator(
            metastore,
            self.pipeline,
            self.clock,
            owns=lambda tid: self.cluster.owns_group(tid),
            on_complete=self._on_txn_complete,
            check_interval_ms=config.transaction_check_interval_ms,
            recovery_ms=config.transaction_recovery_ms,
        )

    # -- the read side's state (agent.fetch), built on first use ----------------------

    @functools.cached_property
    def fetch_reader(self) -> FetchReader:
        """Lookup cache, block cache reads, leases and watermark views of every Fetch."""
        return make_reader(self.meta, self.cache, self.clock, self.config, self.tail, self.notifier)

    @functools.cached_property
    def fetch_sessions(self) -> FetchSessionCache:
        """The KIP-227 fetch sessions of this agent."""
        return FetchSessionCache(self.notifier, self.clock.monotonic, slots=self.config.fetch_session_cache_slots)

    @classmethod
    async def open(cls, config: AgentConfig, *, clock: Clock | None = None) -> Broker:
        meta = await open_metastore(
            config.metastore,
            internal_token=metastore_token(config.metastore_token, config.internal_token),
            admin_token=config.metastore_admin_token,
            ca_file=config.metastore_ca or None,
        )
        try:
            config = await resolve_cluster_id(config, meta)
        except BaseException:
            await meta.close()
            raise
        store = open_journaled_store(
            config.objects,
            parse_journal_urls(config.journal),
            quorum=config.journal_quorum,
            on_put=_count_journal_put,
        )
        return cls(config, meta, store, clock=clock)

    def start(self, *, ticker: bool = True) -> None:
        self.pipeline.start(ticker=ticker)
        self.groups.start()
        self.consumer_groups.start()
        self.txn.start()
        if self.authorizer is not None:
            self.authorizer.start()

    def set_endpoints(self, endpoints: dict[str, tuple[str, int]], primary: str) -> None:
        """The advertised endpoint of every listener (agent.security.listeners) once
        bound; the primary one is this agent's address in the ring."""
        self.endpoints = dict(endpoints)
        self.primary_listener = primary
        host, port = endpoints[primary]
        self.advertised = NodeInfo(self.node_id, host, port, self.advertised.rack)
        self.cluster.set_me(
            dataclasses.replace(self.cluster.me, host=host, port=port, endpoints=self._endpoint_text())
        )

    def _endpoint_text(self) -> str | None:
        if len(self.endpoints) <= 1:
            return None
        return ",".join(f"{n}://{h}:{p}" for n, (h, p) in self.endpoints.items())

    def set_port(self, port: int) -> None:
        """Record the bound port (when configured with port 0) for Metadata answers."""
        if not self.config.advertised_port:
            self.advertised = NodeInfo(self.node_id, self.advertised.host, port, self.advertised.rack)
            self.cluster.set_me(dataclasses.replace(self.cluster.me, port=port))

    async def close(self) -> None:
        if self.authorizer is not None:
            await self.authorizer.stop()
        await self.txn.close()
        await self.cluster.stop()
        await self.consumer_groups.close()
        await self.groups.close()
        await self.pipeline.close()
        if self._owns:
            await self.meta.close()
            await self.store.close()

    # -- topics ---------------------------------------------------------------------

    def _on_commit(self, partitions: object) -> None:
        self.notifier.notify(partitions)  # type: ignore[arg-type]
        self.cluster.committed(partitions)  # type: ignore[arg-type]

    def partitions_changed(self, partitions: list[tuple[uuid.UUID, int]]) -> None:
        """Announce a change to these partitions' offsets that no commit carries (their
        log start moved): this agent's and the cluster's waiting Fetches look again."""
        self._on_commit(partitions)

    def _on_txn_complete(self, partitions: list[tuple[uuid.UUID, int]]) -> None:
        # The last stable offsets moved: cached lookups (taken while the transaction
        # was open) must not delay read_committed readers, who are woken up now.
        reader = self.fetch_reader
        for topic_id, partition in partitions:
            reader.forget(topic_id, partition, tail=False)  # its batches did not move
        self._on_commit(partitions)

    def invalidate_topics(self) -> None:
        self._topics_by_name.clear()
        self._topics_by_id.clear()
        self.metadata.invalidate()

    def cached_topic(self, name: str | None, topic_id: uuid.UUID | None = None) -> TopicInfo | bool | None:
        """The cached answer of :meth:`topic` (or :meth:`topic_by_id` when ``topic_id``
        is given) without a coroutine, or ``False`` when it must be looked up."""
        hit = self._topics_by_id.get(topic_id) if topic_id is not None else self._topics_by_name.get(name or "")
        if hit is not None and self.clock.monotonic() - hit[0] < self._topic_ttl:
            return hit[1]
        return False

    async def topic(self, name: str) -> TopicInfo | None:
        now = self.clock.monotonic()
        hit = self._topics_by_name.get(name)
        if hit is not None and now - hit[0] < self._topic_ttl:
            return hit[1]
        info = await self.meta.get_topic(name)
        self._remember(name, info, now)
        return info

    async def topic_by_id(self, topic_id: uuid.UUID) -> TopicInfo | None:
        now = self.clock.monotonic()
        hit = self._topics_by_id.get(topic_id)
        if hit is not None and now - hit[0] < self._topic_ttl:
            return hit[1]
        info = await self.meta.get_topic(topic_id)
        if info is not None:
            self._remember(info.name, info, now)
        else:
            self._topics_by_id[topic_id] = (now, None)
        return info

    def _remember(self, name: str, info: TopicInfo | None, now: float) -> None:
        # A name that does not exist is not remembered: another agent may create it
        # the next moment, and a client told "unknown" after its CreateTopics
        # succeeded elsewhere would fail (ids are never reused, so by-id misses are).
        if info is None:
            self._topics_by_name.pop(name, None)
            return
        self._topics_by_name[name] = (now, info)
        self._topics_by_id[info.id] = (now, info)

    async def auto_create(self, name: str) -> TopicInfo | None:
        """Create ``name`` with the default partition count (racing creators agree)."""
        async with self._create_lock:
            res = await self.meta.create_topic(name, self.config.default_partitions)
            if res.error not in (MetaError.NONE, MetaError.TOPIC_ALREADY_EXISTS):
                log.info("auto-create of %r refused: %s %s", name, res.error.name, res.message)
                return None
            self._topics_by_name.pop(name, None)
            self.metadata.invalidate()
            return await self.topic(name)

    @staticmethod
    def max_message_bytes(topic: TopicInfo) -> int:
        try:
            return int(topic.config.get("max.message.bytes", DEFAULT_MAX_MESSAGE_BYTES))
        except ValueError:
            return DEFAULT_MAX_MESSAGE_BYTES

    # -- reads ----------------------------------------------------------------------

    async def _load_range(self, key: str, start: int, end: int) -> bytes:
        return await self.cluster.load(key, start, end)  # the ring owner's cache, or _store_range

    async def _store_range(self, key: str, start: int, end: int) -> bytes:
        t0 = time.perf_counter()
        data = await self.store.get(key, start, end)
        METRICS.gets.inc()
        METRICS.get_bytes.inc(len(data))
        log.debug("GET %s [%d,%d) %.1f ms", key, start, end, (time.perf_counter() - t0) * 1000)
        return data
