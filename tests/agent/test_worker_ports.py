"""``floe agent --workers N --worker-port-base B``: worker ``i`` binds its own Kafka
port at ``B + i`` (issue 43, item 7), so firewall rules can name the range; without
it each worker binds any free port, as before."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient

from floe_cli.main import build_parser
from floe_cli.workers import check_port_base, worker_env
from loadtest.services import free_port_run
from tests.fixtures.agent_process import REPO_ROOT, healthz_at
from tests.fixtures.s3 import free_port

HOST = {"PATH": "/bin", "FLOE_METASTORE": "postgresql://db/floe", "FLOE_ADMIN_PORT": "9644"}


def test_worker_ports_are_pinned_from_the_base() -> None:
    ports = [worker_env({}, i, "h", 9092, environ=HOST, port_base=19100)["FLOE_PORT"] for i in range(3)]
    assert ports == ["19100", "19101", "19102"]
    # Without a base: any free port, as before.
    assert worker_env({}, 1, "h", 9092, environ=HOST)["FLOE_PORT"] == "0"
    # A shared listener (SASL/TLS, from FLOE_LISTENERS) gets the pinned port too.
    env = worker_env({"listeners": "SASL_SSL://0.0.0.0:0"}, 2, "h", 9093, environ=HOST, port_base=19100)
    assert env["FLOE_LISTENERS"] == "SASL_SSL://0.0.0.0:19102" and env["FLOE_SHARED_PORT"] == "9093"


def test_the_flag_and_its_environment_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("FLOE_WORKER_PORT_BASE", raising=False)
    assert build_parser().parse_args(["agent"]).worker_port_base == 0
    assert build_parser().parse_args(["agent", "--worker-port-base", "19100"]).worker_port_base == 19100
    monkeypatch.setenv("FLOE_WORKER_PORT_BASE", "19200")
    assert build_parser().parse_args(["agent"]).worker_port_base == 19200


def test_a_range_that_clashes_is_refused() -> None:
    check_port_base(0, 4, 9092, 9644)  # no base: nothing to check
    check_port_base(19100, 4, 9092, 9644)
    with pytest.raises(SystemExit, match="include \\[9092\\]"):
        check_port_base(9090, 4, 9092, 9644)
    with pytest.raises(SystemExit, match="include \\[9645\\]"):
        check_port_base(9645, 2, 9092, 9644)  # the admin ports are 9644..9645
    with pytest.raises(SystemExit, match="out of range"):
        check_port_base(65535, 2, 9092, 9644)


@pytest.mark.slow
@pytest.mark.interop
def test_workers_bind_and_advertise_the_pinned_ports(tmp_path: Path) -> None:
    """Two real workers: each binds base + i and Metadata leads clients there."""
    port, admin, base = free_port(), free_port_run(2), free_port_run(2)
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLOE_")}
    env["PYTHONPATH"] = str(REPO_ROOT)
    log = open(tmp_path / "agent.log", "wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "floe_cli.main", "agent", "--workers", "2", "--host", "127.0.0.1",
         "--port", str(port), "--admin-port", str(admin), "--worker-port-base", str(base),
         "--cluster-id", "floe-test", "--metastore", f"sqlite:///{tmp_path / 'meta.db'}",
         "--objects", f"file://{tmp_path / 'objects'}"],
        stdout=log, stderr=subprocess.STDOUT, env=env, cwd=tmp_path,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while not (healthz_at(admin) and healthz_at(admin + 1)) and time.monotonic() < deadline:
            time.sleep(0.1)  # bounded poll on a real condition (both workers up)
        h0, h1 = healthz_at(admin), healthz_at(admin + 1)
        assert h0 and h1, (tmp_path / "agent.log").read_text()[-3000:]
        assert (h0["kafka_port"], h1["kafka_port"]) == (base, base + 1)
        ad = AdminClient({"bootstrap.servers": f"127.0.0.1:{port}"})
        while time.monotonic() < deadline:
            md = ad.list_topics(timeout=10)
            if len(md.brokers) == 2:
                break
            time.sleep(0.1)  # bounded poll: the workers see each other within a heartbeat
        assert {b.port for b in md.brokers.values()} == {base, base + 1}
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()
