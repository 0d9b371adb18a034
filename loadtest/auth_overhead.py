"""Produce throughput and latency over SASL_SSL vs PLAINTEXT (issue 15).

``python -m loadtest.auth_overhead [--records 60000] [--size 1024] [--rounds 2]``

One agent process (SQLite + ``file://`` in a temp dir) with two listeners:
PLAINTEXT and SASL_SSL (TLS 1.3 with a self-signed certificate from
``cryptography``, SASL SCRAM-SHA-512 with a user created by ``floe users add``).
The same driver (one confluent-kafka producer, acks=all, linger 5 ms, values of
``--size`` bytes) produces ``--records`` records to a fresh topic on each
listener, alternating PLAINTEXT / SASL_SSL ``--rounds`` times in the same run.
Latency per record = produce() to its delivery report. Prints one JSON object
per run; run it under ``box-bench`` and report the load average.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from loadtest.services import free_port, start_agent


def _produce(conf: dict[str, Any], topic: str, records: int, size: int) -> dict[str, Any]:
    from confluent_kafka import Producer

    p = Producer({**conf, "linger.ms": 5, "acks": "all", "queue.buffering.max.messages": 200_000})
    lat: list[float] = []
    value = os.urandom(size)
    p.produce(topic, b"warm-up")  # connect + authenticate + metadata outside the timing
    p.flush(60)

    def reporter(t0: float) -> Any:
        def report(err: Any, _msg: Any) -> None:
            if err is None:
                lat.append(time.perf_counter() - t0)

        return report

    start = time.perf_counter()
    for _ in range(records):
        t0 = time.perf_counter()
        while True:
            try:
                p.produce(topic, value, on_delivery=reporter(t0))
                break
            except BufferError:
                p.poll(0.01)
        p.poll(0)
    p.flush(120)
    elapsed = time.perf_counter() - start
    lat.sort()

    def q(x: float) -> float:
        return round(lat[min(len(lat) - 1, int(x * len(lat)))] * 1000, 1)

    return {
        "records": len(lat),
        "seconds": round(elapsed, 2),
        "records_per_s": round(len(lat) / elapsed),
        "mb_per_s": round(len(lat) * size / elapsed / 1e6, 2),
        "p50_ms": q(0.50),
        "p99_ms": q(0.99),
    }


def run(records: int, size: int, rounds: int) -> list[dict[str, Any]]:
    from floe_cli.dev_security import self_signed

    work = Path(tempfile.mkdtemp(prefix="floe-auth-bench-"))
    meta = f"sqlite:///{work / 'meta.db'}"
    cert, key = self_signed(work / "tls")
    env_add = {"FLOE_USER_PASSWORD": "bench-secret"}
    subprocess.run(
        [sys.executable, "-m", "floe_cli.main", "users", "--metastore", meta, "add", "bench", "-m", "SCRAM-SHA-512"],
        check=True, env={**os.environ, **env_add}, capture_output=True,
    )  # fmt: skip
    plain_port, sasl_port = free_port(), free_port()
    os.environ.update(
        FLOE_LISTENERS=f"PLAINTEXT://127.0.0.1:{plain_port},SASL_SSL://127.0.0.1:{sasl_port}",
        FLOE_SSL_CERTFILE=str(cert),
        FLOE_SSL_KEYFILE=str(key),
    )
    agent = start_agent(meta, f"file://{work / 'objects'}", work)
    confs = {
        "PLAINTEXT": {"bootstrap.servers": f"127.0.0.1:{plain_port}"},
        "SASL_SSL": {
            "bootstrap.servers": f"127.0.0.1:{sasl_port}",
            "security.protocol": "SASL_SSL",
            "ssl.ca.location": str(cert),
            "sasl.mechanism": "SCRAM-SHA-512",
            "sasl.username": "bench",
            "sasl.password": "bench-secret",
        },
    }
    out = []
    try:
        for r in range(rounds):
            for name, conf in confs.items():
                res = {"listener": name, "round": r, "size": size, **_produce(conf, f"bench-{name}-{r}", records, size)}
                print(json.dumps(res), flush=True)
                out.append(res)
    finally:
        agent.stop()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--records", type=int, default=60_000)
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--rounds", type=int, default=2)
    a = ap.parse_args()
    run(a.records, a.size, a.rounds)


if __name__ == "__main__":
    main()
