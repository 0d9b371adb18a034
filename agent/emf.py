"""CloudWatch metrics without an agent or an API call: Embedded Metric Format lines.

Where it sits: beside ``/metrics`` (Prometheus, agent.metrics). When
``cloudwatch_emf_interval_s`` is set (the Terraform module sets it), every
interval the agent writes one JSON line to stdout in CloudWatch's Embedded
Metric Format; ECS ships stdout to CloudWatch Logs (awslogs), which turns the
line into metrics in ``cloudwatch_namespace`` with the dimensions ClusterId and
Zone. The module scales agents on ``ProduceRequestsPerSecond`` (average per
task) and alarms on ``ProduceFailures`` and ``CommitLatencyP99``.

Values are taken from the agent's Prometheus registry as differences between
two reports, so the two views always agree: rates are per second over the
interval, ``CommitLatencyP99`` is the upper bound of the histogram bucket that
holds the interval's 99th percentile commit (milliseconds).
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Callable
from typing import Any, TextIO

from prometheus_client import CollectorRegistry

from agent.tasks import cancel_and_wait

# name -> (CloudWatch unit, meaning); the Terraform module refers to these names.
METRICS: dict[str, tuple[str, str]] = {
    "ProduceRequestsPerSecond": ("Count/Second", "Produce requests handled"),
    "FetchRequestsPerSecond": ("Count/Second", "Fetch requests handled"),
    "ProducedBytesPerSecond": ("Bytes/Second", "record batch bytes accepted"),
    "ProduceFailures": ("Count", "segments whose upload or metastore commit failed (their produce requests failed)"),
    "CommitLatencyP99": ("Milliseconds", "99th percentile metastore commit latency over the interval"),
    "Connections": ("Count", "open Kafka connections"),
}


def _samples(registry: CollectorRegistry) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
    for family in registry.collect():
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def _p99_ms(buckets: list[tuple[float, float]]) -> float | None:
    """Upper bound (ms) of the bucket holding the 99th percentile of cumulative
    ``(le, count)`` deltas; None when nothing was observed."""
    total = buckets[-1][1] if buckets else 0.0
    if total <= 0:
        return None
    for le, count in buckets:
        if count >= 0.99 * total:
            # Beyond the largest finite bucket: report that bound (a lower bound).
            return (le if le != float("inf") else buckets[-2][0]) * 1000.0
    return None


class EmfReporter:
    """Writes one EMF line per :meth:`report` (a loop calls it every ``interval_s``)."""

    def __init__(
        self,
        registry: CollectorRegistry,
        *,
        namespace: str,
        dimensions: dict[str, str],
        interval_s: float,
        now_ms: Callable[[], int],
        out: TextIO | None = None,
    ) -> None:
        self.registry = registry
        self.namespace = namespace
        self.dimensions = dict(dimensions)
        self.interval_s = interval_s
        self.now_ms = now_ms
        self.out = out
        self._last = _samples(registry)
        self._last_ms = now_ms()
        self._task: asyncio.Task[None] | None = None

    def _delta(self, now: dict[Any, float], name: str, **labels: str) -> float:
        key = (name, tuple(sorted(labels.items())))
        return now.get(key, 0.0) - self._last.get(key, 0.0)

    def values(self) -> dict[str, float]:
        """The metrics since the previous call (and resets the window)."""
        now, now_ms = _samples(self.registry), self.now_ms()
        secs = max((now_ms - self._last_ms) / 1000.0, 1e-3)
        buckets = sorted(
            (float(dict(labels)["le"]), value - self._last.get((name, labels), 0.0))
            for (name, labels), value in now.items()
            if name == "floe_metastore_commit_seconds_bucket"
        )
        vals = {
            "ProduceRequestsPerSecond": self._delta(now, "floe_requests_total", api="Produce") / secs,
            "FetchRequestsPerSecond": self._delta(now, "floe_requests_total", api="Fetch") / secs,
            "ProducedBytesPerSecond": self._delta(now, "floe_produced_bytes_total") / secs,
            "ProduceFailures": self._delta(now, "floe_upload_failures_total")
            + self._delta(now, "floe_metastore_commit_failures_total"),
            "Connections": now.get(("floe_connections", ()), 0.0),
        }
        p99 = _p99_ms(buckets)
        if p99 is not None:
            vals["CommitLatencyP99"] = p99
        self._last, self._last_ms = now, now_ms
        return vals

    def line(self) -> str:
        vals = self.values()
        doc: dict[str, Any] = {
            "_aws": {
                "Timestamp": self._last_ms,
                "CloudWatchMetrics": [
                    {
                        "Namespace": self.namespace,
                        "Dimensions": [sorted(self.dimensions)],
                        "Metrics": [{"Name": n, "Unit": METRICS[n][0]} for n in vals],
                    }
                ],
            },
            **self.dimensions,
            **{n: round(v, 3) for n, v in vals.items()},
        }
        return json.dumps(doc, separators=(",", ":"))

    def report(self) -> None:
        out = self.out or sys.stdout
        out.write(self.line() + "\n")
        out.flush()

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._loop(), name="cloudwatch-emf")

    async def _loop(self) -> None:
        while True:
            await asyncio.sleep(self.interval_s)  # a reporting period, not synchronisation
            self.report()

    async def stop(self) -> None:
        await cancel_and_wait(self._task)
        self._task = None
