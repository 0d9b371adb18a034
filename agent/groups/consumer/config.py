"""Settings of the KIP-848 consumer-group coordinator (Kafka's ``group.consumer.*``).

Where it sits: the broker builds one :class:`ConsumerGroupConfig` from the
agent's config and hands it to :class:`.coordinator.ConsumerGroupCoordinator`;
its classic-member base (:mod:`.classic`) reads the same object. It lives in
its own module so both can import it without importing each other.
"""

from __future__ import annotations

from dataclasses import dataclass

from agent.groups.consumer.migration import MigrationPolicy


@dataclass(frozen=True, slots=True)
class ConsumerGroupConfig:
    session_timeout_ms: int = 45_000  # group.consumer.session.timeout.ms
    heartbeat_interval_ms: int = 5_000  # group.consumer.heartbeat.interval.ms
    max_size: int = 2**31 - 1  # group.consumer.max.size
    agent_id: str | None = None
    metrics_interval_s: float = 10.0  # per-group lag on /metrics (0: off)
    migration_policy: MigrationPolicy = MigrationPolicy.BIDIRECTIONAL  # group.consumer.migration.policy
