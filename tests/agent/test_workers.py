"""``floe agent --workers 2``: two agent processes share the Kafka port; killing
one (kill -9) while an idempotent producer and a consumer run loses nothing
acknowledged and duplicates nothing; the supervisor restarts it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from loadtest.services import free_port_run
from tests.fixtures.agent_process import REPO_ROOT, healthz_at
from tests.fixtures.s3 import free_port

pytestmark = [pytest.mark.interop]


def wait(cond, timeout: float, what: str):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = cond()
        if v:
            return v
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture
def workers(tmp_path: Path):  # type: ignore[no-untyped-def]
    # Below the ephemeral range: a worker's own Kafka port (bound to port 0) must
    # not be able to take admin + 1 before worker 1 binds it.
    port, admin = free_port(), free_port_run(2)
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLOE_")}
    env["PYTHONPATH"] = str(REPO_ROOT)
    log = open(tmp_path / "agent.log", "wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "floe_cli.main", "agent", "--workers", "2", "--host", "127.0.0.1",
         "--port", str(port), "--admin-port", str(admin), "--flush-interval-ms", "50", "--cluster-id", "floe-test",
         "--auto-create-topics", "--metastore", f"sqlite:///{tmp_path / 'meta.db'}", "--objects", f"file://{tmp_path / 'objects'}"],
        stdout=log, stderr=subprocess.STDOUT, env=env, cwd=tmp_path,
    )  # fmt: skip
    try:
        wait(lambda: healthz_at(admin) and healthz_at(admin + 1), 60, "both workers")
        yield port, admin, proc
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()
        print((tmp_path / "agent.log").read_text()[-3000:])


@pytest.mark.slow
def test_kill_one_worker_loses_nothing_acknowledged(workers) -> None:  # type: ignore[no-untyped-def]
    port, admin, _proc = workers
    bootstrap = f"127.0.0.1:{port}"
    h0, h1 = healthz_at(admin), healthz_at(admin + 1)
    assert h0 and h1 and h0["agent_id"] != h1["agent_id"] and h0["shared_port"] == h1["shared_port"] == port
    # Both workers are in the ring: Metadata lists two brokers, on their own ports.
    topic = f"w-{uuid.uuid4().hex[:8]}"
    admin_client = AdminClient({"bootstrap.servers": bootstrap})
    admin_client.create_topics([NewTopic(topic, 4)])[topic].result(30)
    md = wait(lambda: (m := admin_client.list_topics(timeout=10)) and len(m.brokers) == 2 and m, 30, "2 brokers")
    assert {b.port for b in md.brokers.values()} == {h0["kafka_port"], h1["kafka_port"]}

    acked: list[bytes] = []
    errors: list[str] = []
    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5,
                  "message.timeout.ms": 60000})

    def on_delivery(err, msg) -> None:  # type: ignore[no-untyped-def]
        if err is None:
            acked.append(msg.value())
        else:
            errors.append(str(err))

    consumed: list[bytes] = []
    done = threading.Event()

    def consume() -> None:
        c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{topic}", "auto.offset.reset": "earliest",
                      "enable.auto.commit": False, "fetch.wait.max.ms": 100})
        c.assign([TopicPartition(topic, i, 0) for i in range(4)])
        idle_since = None
        while True:
            m = c.poll(0.2)
            if m is not None and m.error() is None:
                consumed.append(m.value())
                idle_since = None
            elif done.is_set():
                idle_since = idle_since or time.monotonic()
                if len(consumed) >= len(acked) or time.monotonic() - idle_since > 15:
                    break
        c.close()

    t = threading.Thread(target=consume)
    t.start()
    n = 3000
    for i in range(n):
        p.produce(topic, f"m{i}".encode(), partition=i % 4, on_delivery=on_delivery)
        if i % 100 == 0:
            p.poll(0.02)
        if i == n // 2:
            p.flush(30)
            os.kill(h1["pid"], signal.SIGKILL)  # mid-run, with requests in flight to it
    assert p.flush(90) == 0
    done.set()
    t.join(90)
    assert not t.is_alive()
    # Every acknowledged record is in the log, once (idempotence survives the kill).
    assert len(acked) + len(errors) == n
    assert set(acked) <= set(consumed)
    assert len(consumed) == len(set(consumed))
    # The supervisor brought the worker back under the same id.
    h1b = wait(lambda: (h := healthz_at(admin + 1)) and h["pid"] != h1["pid"] and h, 60, "worker restart")
    assert h1b["agent_id"] == h1["agent_id"]


def test_worker_env_keeps_the_hosts_floe_environment() -> None:
    """Workers get the supervisor's FLOE_* environment (how the Terraform module and
    Docker configure an agent), flags over it, and their own identity and ports;
    a configured advertised port (a proxy or balancer in front) is kept."""
    from floe_cli.workers import worker_env

    host = {"PATH": "/bin", "FLOE_METASTORE": "postgresql://db/floe", "FLOE_CLUSTER_ID": "prod",
            "FLOE_ADMIN_PORT": "9644", "FLOE_ZONE": "eu-1a"}  # fmt: skip
    env = worker_env({"flush_interval_ms": 50, "zone": None}, 1, "host-a", 9092, environ=host)
    assert env["FLOE_METASTORE"] == "postgresql://db/floe" and env["FLOE_CLUSTER_ID"] == "prod"
    assert env["FLOE_ZONE"] == "eu-1a" and env["FLOE_FLUSH_INTERVAL_MS"] == "50" and env["PATH"] == "/bin"
    assert (env["FLOE_AGENT_ID"], env["FLOE_SHARED_PORT"], env["FLOE_PORT"]) == ("host-a-w1", "9092", "0")
    assert env["FLOE_ADMIN_PORT"] == "9645" and env["FLOE_ADVERTISED_PORT"] == "0"
    # FLOE_WORKERS (the Terraform module sets it) must not make a worker a supervisor.
    assert worker_env({}, 0, "host-a", 9092, environ={**host, "FLOE_WORKERS": "4"})["FLOE_WORKERS"] == "1"
    behind = worker_env({}, 0, "host-a", 9092, environ={**host, "FLOE_ADVERTISED_PORT": "19092"})
    assert behind["FLOE_ADVERTISED_PORT"] == "19092"


def test_workers_share_the_one_configured_listener(monkeypatch: pytest.MonkeyPatch) -> None:
    """``floe agent`` runs one worker per CPU by default; with FLOE_LISTENERS (how the
    Terraform module configures SASL/TLS) the workers share that listener's port and
    each binds its own; several listeners or port 0 leave one agent."""
    import argparse

    from agent.config import AgentConfig
    from floe_cli.main import _workers, build_parser
    from floe_cli.workers import shared_listener

    for name in ("FLOE_WORKERS", "FLOE_LISTENERS", "FLOE_PORT"):
        monkeypatch.delenv(name, raising=False)
    assert build_parser().parse_args(["agent"]).workers == "auto"
    cpus = os.cpu_count() or 1
    auto = argparse.Namespace(workers="auto")
    assert _workers(auto, {}) == cpus
    assert _workers(auto, {"port": 0}) == 1
    assert _workers(auto, {"listeners": "SASL_SSL://0.0.0.0:9093"}) == cpus
    assert _workers(auto, {"listeners": "PLAINTEXT://:9092,SSL://:9093"}) == 1
    assert _workers(argparse.Namespace(workers="3"), {"port": 0}) == 3
    cfg = AgentConfig(listeners="SASL_SSL://0.0.0.0:9093", advertised_listeners="SASL_SSL://lb:19093")
    assert shared_listener(cfg) == ("SASL_SSL://0.0.0.0:0", 9093)
    assert shared_listener(AgentConfig(listeners="SSL://[::1]:9094")) == ("SSL://[::1]:0", 9094)
    with pytest.raises(ValueError, match="one listener"):
        shared_listener(AgentConfig(listeners="PLAINTEXT://:9092,SSL://:9093"))
