"""What one client's Produce requests look like to an agent (issue 13).

    python -m loadtest.produce_shape [--idempotent] [--rate 2500] [--seconds 10]
        [--partitions 16] [--flush-min-interval-ms N] [--workers 1]

Where it sits: a focused companion of ``python -m loadtest run`` for the sealing
rule (agent.produce.autobatch). It starts ``floe dev`` (SQLite + ``file://``) as its own
process with the Produce handler wrapped to log, per request, its arrival time,
connection and partitions; drives it from this process with one confluent-kafka
producer on librdkafka's defaults (linger 5 ms), records round-robin over the
partitions at ``--rate``; then reports the agent's Produce requests per second,
partitions per request, the gap between two requests carrying the same partition
(how long a partition's records wait for a request slot), the seals by reason and
the producer's delivery latency.

What it shows: librdkafka puts ONE partition in each Produce request, and an
idempotent producer has at most 5 requests in flight per connection, so with 16
partitions on one agent a partition gets a slot about every 16/5 seal cycles,
and its records wait that long before they are even sent.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

_SERVE = """
import dataclasses, sys, time
import agent.handlers.produce  # noqa: F401 (registers the handler)
from agent.handlers import registry
spec = registry.REGISTRY[0]
orig = spec.func
log = open(sys.argv[1], "a", buffering=1)
async def logged(broker, ctx, req):
    parts = " ".join(str(p.index) for t in req.topic_data for p in t.partition_data)
    log.write(f"{time.monotonic():.4f} {id(ctx.conn)} {parts}\\n")
    return await orig(broker, ctx, req)
registry.REGISTRY[0] = dataclasses.replace(spec, func=logged)
from floe_cli.main import main
sys.exit(main(sys.argv[2:]))
"""


def _pct(xs: list[float], q: float) -> float:
    if not xs:
        return 0.0
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def _seals(admin: int) -> dict[str, float]:
    out: dict[str, float] = {}
    with urllib.request.urlopen(f"http://127.0.0.1:{admin}/metrics", timeout=5) as r:
        for line in r.read().decode().splitlines():
            if line.startswith("floe_segment_seals_total{"):
                reason = line.split('reason="', 1)[1].split('"', 1)[0]
                out[reason] = float(line.rsplit(" ", 1)[1])
    return out


def _wait_ready(admin: int, deadline: float) -> None:
    """Bounded poll until the agent's /healthz answers."""
    while True:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{admin}/healthz", timeout=2):
                return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def run(args: argparse.Namespace) -> dict[str, Any]:
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    from loadtest.services import free_port, free_port_run

    tmp = Path(tempfile.mkdtemp(prefix="floe-shape-"))
    port, admin = free_port(), free_port_run(args.workers)
    log_path = tmp / "produce.log"
    cmd = [sys.executable, "-c", _SERVE, str(log_path), "dev", "--data-dir", str(tmp / "data"),
           "--port", str(port), "--admin-port", str(admin), "--workers", str(args.workers), "--no-compactor"]
    if args.flush_min_interval_ms is not None:
        cmd += ["--flush-min-interval-ms", str(args.flush_min_interval_ms)]
    agent_log = open(tmp / "agent.log", "wb")
    proc = subprocess.Popen(cmd, stdout=agent_log, stderr=subprocess.STDOUT)
    bootstrap = f"127.0.0.1:{port}"
    try:
        _wait_ready(admin, time.monotonic() + 60)
        topic = f"shape-{os.getpid()}"
        ac = AdminClient({"bootstrap.servers": bootstrap})
        ac.create_topics([NewTopic(topic, args.partitions)])[topic].result(30)
        seals0 = sum(_seals(admin + i).get(r, 0.0) for i in range(args.workers) for r in ("blocked", "idle", "interval", "size"))
        lat: list[float] = []

        def on_delivery(err: Any, msg: Any) -> None:
            if err is None:
                lat.append(time.monotonic() - float(msg.key()))

        p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": args.idempotent})
        body = os.urandom(args.size)
        log_path.write_text("")  # count only the run's requests (the log is line-buffered, appended)
        t0 = time.monotonic()
        n = 0
        while (now := time.monotonic()) < t0 + args.seconds:
            due = t0 + n / args.rate
            if due > now:
                p.poll(min(due - now, 0.01))
                continue
            p.produce(topic, body, key=repr(due).encode(), partition=n % args.partitions, on_delivery=on_delivery)
            n += 1
        p.flush(60)
        elapsed = time.monotonic() - t0
        seals: dict[str, float] = {}
        for i in range(args.workers):
            for r, v in _seals(admin + i).items():
                seals[r] = seals.get(r, 0.0) + v
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
        agent_log.close()
    rows = [line.split() for line in log_path.read_text().splitlines() if len(line.split()) >= 3]
    last: dict[int, float] = {}
    gaps: list[float] = []
    parts_per_req: list[int] = []
    for row in rows:
        t, parts = float(row[0]), [int(x) for x in row[2:]]
        parts_per_req.append(len(parts))
        for q in parts:
            if q in last:
                gaps.append(t - last[q])
            last[q] = t
    total_seals = sum(v for k, v in seals.items() if k != "drain") - seals0
    return {
        "idempotent": args.idempotent, "rate": args.rate, "partitions": args.partitions,
        "flush_min_interval_ms": args.flush_min_interval_ms, "workers": args.workers,
        "records": n, "produce_requests_per_s": round(len(rows) / elapsed, 1),
        "partitions_per_request_mean": round(sum(parts_per_req) / max(1, len(parts_per_req)), 2),
        "partition_gap_ms": {q: round(1000 * _pct(gaps, v), 1) for q, v in (("p50", 0.5), ("p99", 0.99), ("max", 1.0))},
        "seals_per_s": round(total_seals / elapsed, 2),
        "seals_by_reason": seals,
        "delivery_ms": {q: round(1000 * _pct(lat, v), 1) for q, v in (("p50", 0.5), ("p99", 0.99))},
        "load_avg": os.getloadavg(),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m loadtest.produce_shape", description=__doc__.split("\n\n")[0])
    ap.add_argument("--idempotent", action="store_true", help="enable.idempotence=true")
    ap.add_argument("--rate", type=float, default=2500.0, help="records/s (default 2500: one of the 5k workload's two producers)")
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--partitions", type=int, default=16)
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--flush-min-interval-ms", type=int)
    args = ap.parse_args(argv)
    print(json.dumps(run(args), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
