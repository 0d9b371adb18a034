"""SIGTERM ends `floe dev` within ``shutdown_timeout_ms``, drained or not (issue 43).

A `floe dev --workers 2` under produce load whose object store stops answering
(``latency_stall_file``: every call waits while the file exists, as a stopped
endpoint would) cannot drain: its segments never upload, its producers' requests
are never answered. Before the bound, a worker waited for that drain without
limit (the broker's close drained the pipeline again), the supervisor SIGKILLed
it only after 60 s, and the admin ports stayed taken meanwhile. Now each worker
gives up at ``FLOE_SHUTDOWN_TIMEOUT_MS``, the supervisor's compactor gets
``COMPACTOR_STOP_S``, and every port is free again once the command returns.
A drain that can finish (the store answering) still exits 0 with everything
acknowledged committed (tests/interop/test_restart.py).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest

from floe_cli.main import COMPACTOR_STOP_S
from loadtest.services import free_port_run
from metastore.pgserver import free_port

pytestmark = [pytest.mark.interop, pytest.mark.slow, pytest.mark.timeout(240)]

ROOT = Path(__file__).resolve().parents[1]
SHUTDOWN_S = 3.0
# Process start-up and teardown on a busy 2-core box, beyond the bounds themselves.
SLACK_S = 6.0


def _healthz(port: int) -> dict[str, object] | None:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2) as r:
            return json.loads(r.read())  # type: ignore[no-any-return]
    except OSError:
        return None


def _metric(port: int, name: str) -> float:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        for line in r.read().decode().splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
    return 0.0


def _bindable(port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the agent binds
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _produce_until(bootstrap: str, stop: threading.Event) -> None:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5, "message.timeout.ms": 60_000})
    try:
        while not stop.is_set():
            for _ in range(200):
                try:
                    p.produce("load", b"x" * 512)
                except BufferError:
                    break
            p.poll(0.05)
    finally:
        p.purge()  # the answers will never come: the store is stalled


def test_sigterm_exits_within_the_bound_under_load(tmp_path: Path) -> None:
    stall = tmp_path / "stall"
    port, admin = free_port(), free_port_run(2)
    objects = f"file://{tmp_path / 'objects'}?latency_stall_file={stall}"
    (tmp_path / "objects").mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLOE_")}
    env["FLOE_SHUTDOWN_TIMEOUT_MS"] = str(int(SHUTDOWN_S * 1000))
    log = (tmp_path / "dev.log").open("wb")
    proc = subprocess.Popen(
        [
            sys.executable, "-m", "floe_cli.main", "dev", "--data-dir", str(tmp_path / "data"),
            "--objects", objects, "--port", str(port), "--admin-port", str(admin), "--workers", "2",
            "--cluster-id", "floe-test", "--log-level", "INFO",
        ],
        cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, env=env,
    )  # fmt: skip
    stop = threading.Event()
    producer = threading.Thread(target=_produce_until, args=(f"127.0.0.1:{port}", stop), daemon=True)
    try:
        deadline = time.monotonic() + 90
        health = [None, None]
        while time.monotonic() < deadline and not all(health) and proc.poll() is None:
            health = [_healthz(admin), _healthz(admin + 1)]
            time.sleep(0.2)  # bounded poll on a real condition (both workers up)
        assert all(health), (tmp_path / "dev.log").read_text()[-3000:]
        workers = [int(h["pid"]) for h in health if h]  # type: ignore[call-overload]
        own_ports = [int(h["kafka_port"]) for h in health if h]  # type: ignore[call-overload]

        stall.touch()  # from now on no segment uploads: the drain cannot finish
        producer.start()
        deadline = time.monotonic() + 60
        while sum(_metric(a, "floe_produced_bytes_total") for a in (admin, admin + 1)) < 64 * 1024:
            assert time.monotonic() < deadline, "the workers did not take produce requests"
            time.sleep(0.1)  # bounded poll on a real condition (bytes buffered)

        t0 = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        try:
            rc = proc.wait(SHUTDOWN_S + COMPACTOR_STOP_S + 60)
        except subprocess.TimeoutExpired:
            rc = None
        took = time.monotonic() - t0
        text = (tmp_path / "dev.log").read_text()
        print(f"floe dev exited {took:.1f} s after SIGTERM (status {rc}, bound {SHUTDOWN_S} s per agent)")
        assert rc is not None, f"floe dev still running {took:.0f} s after SIGTERM:\n{text[-3000:]}"
        assert took < SHUTDOWN_S + COMPACTOR_STOP_S + SLACK_S, f"exit took {took:.1f} s:\n{text[-3000:]}"
        assert "shutdown did not finish within" in text or "took longer than" in text, text[-3000:]
        # Everything is gone and every port can be bound again.
        assert not [pid for pid in workers if _alive(pid)]
        assert [p for p in (port, admin, admin + 1, *own_ports) if not _bindable(p)] == []
    finally:
        stop.set()
        stall.unlink(missing_ok=True)
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        log.close()
