"""Prometheus metrics of the compactor (its own registry; ``floe compactor run
--metrics-port N`` serves it at ``/metrics``).

Where it sits: :class:`~compactor.runner.Compactor` updates these after every
phase and pass, beside the per-pass summary it logs.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge

REGISTRY = CollectorRegistry()

TASKS = Counter(
    "floe_compactor_tasks",
    "Compaction tasks by phase and outcome",
    ["phase", "outcome"],
    registry=REGISTRY,
)
POISONED = Counter(
    "floe_compactor_poisoned_batches",
    "Batches the compactor could not decode (carried over undecoded / quarantined)",
    ["topic"],
    registry=REGISTRY,
)
DELETED = Counter(
    "floe_compactor_objects_deleted", "Objects deleted from storage by the GC", registry=REGISTRY
)
LEASED = Gauge(
    "floe_compactor_objects_leased",
    "Retired objects the GC keeps because a live read lease holds them",
    registry=REGISTRY,
)
PASSES = Counter("floe_compactor_passes", "Completed compactor passes", registry=REGISTRY)
PASS_FAILURES = Counter(
    "floe_compactor_pass_failures", "Compactor passes that raised (the loop goes on)", registry=REGISTRY
)
# Liveness: `floe compactor health` (the ECS health check) fails when this stops moving.
LAST_PROGRESS = Gauge(
    "floe_compactor_last_progress_seconds",
    "Unix time the compactor started, finished a task or finished a pass",
    registry=REGISTRY,
)
