"""OMB workload files (the same YAML fields as OpenMessaging Benchmark's ``workloads/``).

Fields (OMB names; minutes may be fractional here, e.g. ``0.5``)::

    name: 1-topic-16-partitions-1kb-2p-2c-4k
    topics: 1
    partitionsPerTopic: 16
    messageSize: 1024
    payloadFile: ...            # accepted and ignored: payloads are random bytes
    keyDistributor: NO_KEY      # NO_KEY (round robin over partitions) | RANDOM_NANO
    producersPerTopic: 2
    subscriptionsPerTopic: 1
    consumerPerSubscription: 2
    producerRate: 4000          # messages/s over all producers; 0 = as fast as possible
    consumerBacklogSizeGB: 0    # > 0: consumers pause until the backlog reaches it
    testDurationMinutes: 1
    warmupDurationMinutes: 0.25

Floe extensions (optional): ``idempotentProducer`` (bool, default false),
``producerConfig`` / ``consumerConfig`` (extra client settings),
``producerClient``: ``confluent-kafka`` (default; the driver's tuned settings
unless ``producerDefaults: true``, which keeps librdkafka's own defaults) or
``java`` (``KafkaProducer`` 4.1 with Java's defaults, :mod:`loadtest.java_driver`);
``consumerClient``: ``confluent-kafka`` (default; sessionless Fetches) or ``java``
(``KafkaConsumer`` 4.1, which uses fetch sessions, :mod:`loadtest.java_consumer`;
no backlog mode); ``storeLatency``: simulated object-store latency for the Floe
backends (a profile, ``s3-standard`` | ``s3-express`` | ``none``, or latency URL
options such as ``latency=none&latency_put_p50_ms=20``; :mod:`objectstore.latency`).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import yaml

_ALIASES = {
    "name": "name",
    "topics": "topics",
    "partitionsPerTopic": "partitions_per_topic",
    "messageSize": "message_size",
    "payloadFile": "payload_file",
    "keyDistributor": "key_distributor",
    "producersPerTopic": "producers_per_topic",
    "subscriptionsPerTopic": "subscriptions_per_topic",
    "consumerPerSubscription": "consumer_per_subscription",
    "producerRate": "producer_rate",
    "consumerBacklogSizeGB": "consumer_backlog_size_gb",
    "testDurationMinutes": "test_duration_minutes",
    "warmupDurationMinutes": "warmup_duration_minutes",
    "idempotentProducer": "idempotent_producer",
    "producerConfig": "producer_config",
    "consumerConfig": "consumer_config",
    "producerClient": "producer_client",
    "producerDefaults": "producer_defaults",
    "consumerClient": "consumer_client",
    "storeLatency": "store_latency",
}


@dataclass
class Workload:
    name: str = "workload"
    topics: int = 1
    partitions_per_topic: int = 1
    message_size: int = 1024
    payload_file: str | None = None
    key_distributor: str = "NO_KEY"
    producers_per_topic: int = 1
    subscriptions_per_topic: int = 1
    consumer_per_subscription: int = 1
    producer_rate: float = 0.0
    consumer_backlog_size_gb: float = 0.0
    test_duration_minutes: float = 1.0
    warmup_duration_minutes: float = 0.0
    idempotent_producer: bool = False
    producer_config: dict[str, Any] = field(default_factory=dict)
    consumer_config: dict[str, Any] = field(default_factory=dict)
    producer_client: str = "confluent-kafka"
    producer_defaults: bool = False
    consumer_client: str = "confluent-kafka"
    store_latency: str | None = None

    @property
    def test_seconds(self) -> float:
        return self.test_duration_minutes * 60.0

    @property
    def warmup_seconds(self) -> float:
        return self.warmup_duration_minutes * 60.0

    @property
    def backlog_bytes(self) -> int:
        return int(self.consumer_backlog_size_gb * (1 << 30))

    def validate(self) -> None:
        if self.message_size < 16:
            raise ValueError("messageSize must be >= 16 (timestamps travel in the payload)")
        for name in ("topics", "partitions_per_topic", "producers_per_topic"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1")
        if self.subscriptions_per_topic < 0 or self.consumer_per_subscription < 0:
            raise ValueError("subscriptionsPerTopic/consumerPerSubscription must be >= 0")
        if self.consumer_per_subscription > self.partitions_per_topic:
            raise ValueError("consumerPerSubscription > partitionsPerTopic leaves consumers idle")
        if self.test_seconds <= 0 or self.warmup_seconds < 0 or self.producer_rate < 0:
            raise ValueError("durations and producerRate must be positive")
        if self.producer_client not in ("confluent-kafka", "java"):
            raise ValueError(f"unknown producerClient {self.producer_client!r}: confluent-kafka | java")
        if self.consumer_client not in ("confluent-kafka", "java"):
            raise ValueError(f"unknown consumerClient {self.consumer_client!r}: confluent-kafka | java")
        if self.consumer_client == "java" and self.backlog_bytes > 0:
            raise ValueError("consumerBacklogSizeGB needs consumerClient confluent-kafka (the Java consumer has no backlog mode)")
        if self.key_distributor not in ("NO_KEY", "RANDOM_NANO", "KEY_ROUND_ROBIN"):
            raise ValueError(f"unknown keyDistributor {self.key_distributor!r}")
        if self.store_latency:
            from objectstore.latency import with_latency

            with_latency("memory://", self.store_latency)  # raises on a bad profile or option

    def as_omb(self) -> dict[str, Any]:
        names = {v: k for k, v in _ALIASES.items()}
        return {names[f.name]: getattr(self, f.name) for f in fields(self)}


def parse(data: dict[str, Any]) -> Workload:
    unknown = sorted(set(data) - set(_ALIASES))
    if unknown:
        raise ValueError(f"unknown workload fields: {', '.join(unknown)}")
    w = Workload(**{_ALIASES[k]: v for k, v in data.items()})
    w.validate()
    return w


def load(path: str | Path) -> Workload:
    data = yaml.safe_load(Path(path).read_text())
    if not isinstance(data, dict):
        raise ValueError(f"{path}: not a YAML mapping")
    data.setdefault("name", Path(path).stem)
    return parse(data)
