"""CloudWatch Embedded Metric Format lines: what the Terraform module scales and
alarms on. The EMF document must be valid (CloudWatch drops invalid lines
silently) and its numbers must be the agent's own Prometheus counters."""

from __future__ import annotations

import io
import json
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from agent.emf import METRICS, EmfReporter


class Clock:
    def __init__(self) -> None:
        self.ms = 1_800_000_000_000

    def __call__(self) -> int:
        return self.ms


def _registry() -> tuple[CollectorRegistry, dict[str, Any]]:
    r = CollectorRegistry()
    lat = (0.001, 0.01, 0.1, 1)
    m = {
        "requests": Counter("floe_requests", "", ["api"], registry=r),
        "produced": Counter("floe_produced_bytes", "", registry=r),
        "uploads": Counter("floe_upload_failures", "", registry=r),
        "commits": Counter("floe_metastore_commit_failures", "", registry=r),
        "latency": Histogram("floe_metastore_commit_seconds", "", buckets=lat, registry=r),
        "conns": Gauge("floe_connections", "", registry=r),
    }
    return r, m


def _check_emf(doc: dict[str, Any], namespace: str) -> None:
    """The EMF specification's rules for one document."""
    aws = doc["_aws"]
    assert isinstance(aws["Timestamp"], int)
    (directive,) = aws["CloudWatchMetrics"]
    assert directive["Namespace"] == namespace
    for dims in directive["Dimensions"]:
        assert 1 <= len(dims) <= 30 and all(isinstance(doc[d], str) for d in dims)
    for m in directive["Metrics"]:
        assert m["Name"] in METRICS and m["Unit"] == METRICS[m["Name"]][0]
        assert isinstance(doc[m["Name"]], int | float)


def test_emf_line_reports_rates_failures_and_commit_p99() -> None:
    r, m = _registry()
    clock, out = Clock(), io.StringIO()
    emf = EmfReporter(r, namespace="Floe", dimensions={"ClusterId": "prod", "Zone": "eu-west-1a"},
                      interval_s=60, now_ms=clock, out=out)  # fmt: skip
    m["requests"].labels("Produce").inc(600)
    m["requests"].labels("Fetch").inc(120)
    m["produced"].inc(6_000_000)
    m["uploads"].inc(2)
    m["commits"].inc(1)
    m["conns"].set(7)
    for _ in range(98):
        m["latency"].observe(0.005)  # <= 10 ms
    m["latency"].observe(0.05)  # two slow commits: the 99th percentile is in (10, 100] ms
    m["latency"].observe(0.05)
    clock.ms += 60_000
    emf.report()
    doc = json.loads(out.getvalue())
    _check_emf(doc, "Floe")
    assert (doc["ClusterId"], doc["Zone"]) == ("prod", "eu-west-1a")
    assert doc["ProduceRequestsPerSecond"] == 10.0 and doc["FetchRequestsPerSecond"] == 2.0
    assert doc["ProducedBytesPerSecond"] == 100_000.0
    assert doc["ProduceFailures"] == 3 and doc["Connections"] == 7
    assert doc["CommitLatencyP99"] == 100.0

    # The next line covers only the next interval; no commits, no latency metric.
    m["requests"].labels("Produce").inc(30)
    clock.ms += 30_000
    emf.report()
    doc = json.loads(out.getvalue().splitlines()[1])
    _check_emf(doc, "Floe")
    assert doc["ProduceRequestsPerSecond"] == 1.0 and doc["ProduceFailures"] == 0
    assert "CommitLatencyP99" not in doc


def test_agent_emf_counts_real_produce_requests(agent_factory: Any) -> None:
    """An agent with cloudwatch_emf_interval_s reports the Produce requests a real
    client sent (its reporter reads the agent's own registry)."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    agent = agent_factory(cloudwatch_emf_interval_s=3600, zone="z1")
    emf = agent.server.emf
    assert emf is not None
    admin = AdminClient({"bootstrap.servers": agent.bootstrap})
    admin.create_topics([NewTopic("emf-topic", 1, 1)])["emf-topic"].result(30)
    clock = Clock()
    emf.now_ms = clock
    emf.values()  # start a fresh window, on the test's clock
    p = Producer({"bootstrap.servers": agent.bootstrap, "linger.ms": 0})
    for i in range(5):
        p.produce("emf-topic", value=b"v%d" % i)
        assert p.flush(30) == 0
    clock.ms += 1000  # a one-second window: the rate is the count
    doc = json.loads(emf.line())
    _check_emf(doc, "Floe")
    assert doc["Zone"] == "z1" and doc["ClusterId"] == agent.server.broker.config.cluster_id
    assert doc["ProduceRequestsPerSecond"] == 5.0
    assert doc["ProduceFailures"] == 0 and "CommitLatencyP99" in doc
