"""Prometheus metrics of an agent, served on the admin port's /metrics.

Counters the benchmarks read before and after a run: PUTs, GETs, bytes, commit
latency, cache hits.
"""

from __future__ import annotations

from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram


@dataclass
class AgentMetrics:
    registry: CollectorRegistry
    requests: Counter
    puts: Counter
    put_bytes: Counter
    put_seconds: Histogram
    gets: Counter
    get_bytes: Counter
    commits: Counter
    commit_seconds: Histogram
    committed_objects: Counter
    commit_failures: Counter
    upload_failures: Counter
    produce_timeouts: Counter
    produce_aborted: Counter
    seals: Counter
    produced_bytes: Counter
    fetched_bytes: Counter
    watermark_reads: Counter
    fetch_forms: Counter
    cache_hits: Gauge
    cache_misses: Gauge
    connections: Gauge
    journal_objects: Counter
    journal_puts: Counter
    journal_fallbacks: Counter
    consolidations: Counter
    consolidated_bytes: Counter
    journal_unconsolidated_bytes: Gauge
    consolidation_swap_seconds: Histogram
    producer_epoch_bumps: Counter
    readahead_bytes: Counter
    readahead_used_bytes: Counter
    readahead_wasted_bytes: Counter
    readahead_window: Gauge


def _make() -> AgentMetrics:
    r = CollectorRegistry()
    lat = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)
    return AgentMetrics(
        registry=r,
        requests=Counter("floe_requests", "Kafka requests handled", ["api"], registry=r),
        puts=Counter("floe_object_puts", "Object PUTs (segments uploaded)", registry=r),
        put_bytes=Counter("floe_object_put_bytes", "Bytes PUT to the object store", registry=r),
        put_seconds=Histogram("floe_object_put_seconds", "PUT latency", buckets=lat, registry=r),
        gets=Counter("floe_object_gets", "Ranged GETs from the object store", registry=r),
        get_bytes=Counter("floe_object_get_bytes", "Bytes read from the object store", registry=r),
        commits=Counter("floe_metastore_commits", "Metastore commit transactions", registry=r),
        commit_seconds=Histogram("floe_metastore_commit_seconds", "Commit latency", buckets=lat, registry=r),
        committed_objects=Counter(
            "floe_metastore_committed_objects", "Objects committed (a group commit holds several)", registry=r
        ),
        commit_failures=Counter("floe_metastore_commit_failures", "Failed commits", registry=r),
        upload_failures=Counter("floe_upload_failures", "Segments whose upload failed", registry=r),
        produce_timeouts=Counter(
            "floe_produce_timeouts",
            "Produce requests answered REQUEST_TIMED_OUT: not committed within their timeout_ms",
            registry=r,
        ),
        produce_aborted=Counter(
            "floe_produce_aborted",
            "Produce requests answered NOT_ENOUGH_REPLICAS (not persisted, retriable) because"
            " their segment was aborted before its commit started, by reason (stalled_upload:"
            " the oldest uncommitted segment waited past produce_abort_ms)",
            ["reason"],
            registry=r,
        ),
        seals=Counter(
            "floe_segment_seals",
            "Segments sealed, by reason (size, interval, blocked, idle, drain)",
            ["reason"],
            registry=r,
        ),
        produced_bytes=Counter("floe_produced_bytes", "Record batch bytes accepted", registry=r),
        fetched_bytes=Counter("floe_fetched_bytes", "Record batch bytes served", registry=r),
        watermark_reads=Counter(
            "floe_fetch_watermark_reads",
            "Topic watermarks wanted by wide Fetches, by outcome (read: a metastore query; shared: another Fetch's)",
            ["outcome"],
            registry=r,
        ),
        fetch_forms=Counter(
            "floe_fetch_forms",
            "Fetch requests by form (sessionless; full: opens or resets a fetch session; incremental: KIP-227)",
            ["form"],
            registry=r,
        ),
        cache_hits=Gauge("floe_cache_hits", "Block cache hits", registry=r),
        cache_misses=Gauge("floe_cache_misses", "Block cache misses", registry=r),
        connections=Gauge("floe_connections", "Open Kafka connections", registry=r),
        journal_objects=Counter(
            "floe_journal_objects", "Journal objects written (each to every journal bucket)", registry=r
        ),
        journal_puts=Counter(
            "floe_journal_puts",
            "PUTs to journal buckets, by bucket index and outcome (ok, failed, skipped: bucket stalled, abandoned)",
            ["bucket", "outcome"],
            registry=r,
        ),
        journal_fallbacks=Counter(
            "floe_journal_fallbacks",
            "Journal objects written to the standard bucket instead: the journal quorum was lost",
            registry=r,
        ),
        consolidations=Counter(
            "floe_consolidations",
            "Journal consolidations into standard objects, by outcome (ok, conflict, failed)",
            ["outcome"],
            registry=r,
        ),
        consolidated_bytes=Counter(
            "floe_consolidated_bytes", "Journal bytes rewritten into standard objects", registry=r
        ),
        consolidation_swap_seconds=Histogram(
            "floe_consolidation_swap_seconds",
            "Consolidation's metastore swap (commits to its partitions wait for it)",
            buckets=lat,
            registry=r,
        ),
        journal_unconsolidated_bytes=Gauge(
            "floe_journal_unconsolidated_bytes",
            "Committed journal bytes this agent holds for consolidation",
            registry=r,
        ),
        producer_epoch_bumps=Counter(
            "floe_producer_epoch_bumps",
            "InitProducerId requests (v3+, KIP-360) that named a producer and got a new epoch"
            " or id, by kind (idempotent, transactional)",
            ["kind"],
            registry=r,
        ),
        readahead_bytes=Counter(
            "floe_readahead_bytes", "Bytes read ahead into the block cache (agent.fetch.readahead)", registry=r
        ),
        readahead_used_bytes=Counter(
            "floe_readahead_used_bytes", "Read-ahead bytes a Fetch then read from the cache", registry=r
        ),
        readahead_wasted_bytes=Counter(
            "floe_readahead_wasted_bytes",
            "Read-ahead bytes evicted or expired unread (each halves its partitions' windows)",
            registry=r,
        ),
        readahead_window=Gauge(
            "floe_readahead_window_bytes", "Read-ahead windows of the partitions read, summed", registry=r
        ),
    )


METRICS = _make()
