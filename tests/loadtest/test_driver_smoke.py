"""Smoke test of the OMB-style driver: a ~10 s tiny workload against a `floe dev`
agent process; the JSON result must carry OMB's keys with sane values."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from loadtest.__main__ import main

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

WORKLOAD = Path(__file__).parents[2] / "loadtest" / "workloads" / "smoke.yaml"

OMB_SERIES = [
    "publishRate", "consumeRate", "backlog", "publishErrorRate",
    "publishLatency50pct", "publishLatency99pct", "publishLatency999pct", "publishLatencyMax",
    "publishDelayLatency50pct", "publishDelayLatency99pct",
    "endToEndLatency50pct", "endToEndLatency99pct", "endToEndLatency999pct", "endToEndLatencyMax",
]
OMB_AGGREGATED = [
    "aggregatedPublishLatency50pct", "aggregatedPublishLatency99pct",
    "aggregatedPublishLatency999pct", "aggregatedPublishLatencyMax",
    "aggregatedPublishDelayLatency50pct", "aggregatedPublishDelayLatency99pct",
    "aggregatedEndToEndLatency50pct", "aggregatedEndToEndLatency99pct",
    "aggregatedEndToEndLatency999pct", "aggregatedEndToEndLatencyMax",
]


def test_smoke_run_against_dev(tmp_path: Path) -> None:
    out = tmp_path / "out"
    assert main(["run", str(WORKLOAD), "--backend", "dev", "--out", str(out), "--quiet"]) == 0
    r = json.loads((out / "result.json").read_text())
    assert (out / "result.png").stat().st_size > 1000

    n = len(r["timeSeconds"])
    assert n >= 5
    for key in OMB_SERIES:
        assert len(r[key]) == n, key
    for key in OMB_AGGREGATED:
        assert isinstance(r[key], float) and not math.isnan(r[key]), key

    rate = r["workload"]["producerRate"]
    assert 0.7 * rate <= r["aggregatedPublishRate"] <= 1.3 * rate
    assert r["aggregatedConsumeRate"] >= 0.7 * rate
    assert r["aggregatedPublishErrors"] == 0
    # Acknowledged only after a 250 ms flush + PUT + commit; well under 10 s on any box.
    assert 50 <= r["aggregatedPublishLatency50pct"] <= 10_000
    assert r["aggregatedPublishLatency50pct"] <= r["aggregatedPublishLatency99pct"]
    assert r["aggregatedPublishLatency99pct"] <= r["aggregatedPublishLatencyMax"]
    assert r["aggregatedEndToEndLatency50pct"] >= r["aggregatedPublishLatency50pct"] * 0.5

    # Baselines from the same run and the agent's counters.
    assert r["baselines"]["objectstore"]["put"]["MBps"] > 0
    assert r["baselines"]["loopback_tcp"]["MBps"] > 0
    d = r["agentMetrics"]["diff"]
    assert d["floe_object_puts_total"] >= 1
    # One transaction per object at most: the committer may take several finished
    # uploads in one group commit (more often on a busy box), never split one.
    assert 0 < r["ratios"]["metastore_transactions_per_flushed_object"] <= 1.0
    assert r["ratios"]["puts_per_GiB_produced"] > 0
    assert "produce_MBps_over_raw_put_MBps" in r["ratios"]


def test_produce_shape_sees_one_partition_per_librdkafka_request() -> None:
    """loadtest.produce_shape (issue 13): librdkafka puts one partition in each Produce
    request, and the tool reports it (with the seals and delivery latency)."""
    import argparse

    from loadtest.produce_shape import run

    out = run(argparse.Namespace(idempotent=True, rate=500.0, seconds=2.0, partitions=4, size=256,
                                 workers=1, flush_min_interval_ms=None))  # fmt: skip
    assert out["records"] >= 900
    assert out["partitions_per_request_mean"] == 1.0
    assert out["produce_requests_per_s"] > 0 and out["seals_per_s"] > 0
    assert out["delivery_ms"]["p50"] > 0


JAVA_WORKLOAD = WORKLOAD.with_name("smoke-java.yaml")


def test_smoke_run_with_java_clients(tmp_path: Path) -> None:
    """``producerClient: java`` and ``consumerClient: java``: KafkaProducer and
    KafkaConsumer 4.1 as the load, the same result keys; the consumers read every
    record through fetch sessions (incremental Fetches, not librdkafka's sessionless)."""
    out = tmp_path / "out"
    assert main(["run", str(JAVA_WORKLOAD), "--backend", "dev", "--out", str(out), "--quiet", "--no-baselines"]) == 0
    r = json.loads((out / "result.json").read_text())
    assert r["config"]["producer_client"] == r["config"]["consumer_client"] == "java"
    rate = r["workload"]["producerRate"]
    assert 0.7 * rate <= r["aggregatedPublishRate"] <= 1.3 * rate
    assert r["aggregatedConsumeRate"] >= 0.7 * rate
    assert r["aggregatedPublishErrors"] == 0 and r["aggregatedConsumeErrors"] == 0
    assert 0 < r["aggregatedEndToEndLatency50pct"] <= r["aggregatedEndToEndLatency99pct"]
    forms = {
        k: v for k, v in r["agentMetrics"]["diff"].items() if k.startswith("floe_fetch_forms_total")
    }
    incremental = forms.get('floe_fetch_forms_total{form="incremental"}', 0)
    full = forms.get('floe_fetch_forms_total{form="full"}', 0)
    closing = forms.get('floe_fetch_forms_total{form="sessionless"}', 0)  # epoch -1 on close()
    assert full <= 4 and closing <= 2 and incremental > 10 * (full + closing), forms
