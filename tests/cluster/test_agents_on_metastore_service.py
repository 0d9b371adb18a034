"""Two agents on ``floe metastore serve``, holding no database credentials.

The topology operations.md describes for agents that must not reach the
database: a ``floe metastore serve`` process on Postgres, and two ``floe
agent`` processes (zones a and b) given ``--metastore http://...`` and the
internal token, nothing else of the database (issue 42: the agent refused an
``http://`` metastore URL). A confluent-kafka producer hinted to zone a writes
through agent a only; a consumer group hinted to zone b reads everything back
through agent b only, so every record crosses from one agent to the other
through the served metastore and the object store; the group's committed
offsets are read back through agent a. Afterwards neither agent holds a
connection to Postgres; the service does.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from sqlalchemy.engine import make_url

from metastore.pgserver import start_on_free_ports
from tests.cluster.helpers import create_topic, leaders, node_of, start_cluster, wait_for
from tests.fixtures.agent_process import REPO_ROOT, Backend
from tests.fixtures.s3 import free_port

pytestmark = [pytest.mark.slow, pytest.mark.postgres, pytest.mark.s3, pytest.mark.interop]

TOKEN = "served-metastore-test-token"
RECORDS = 3000
PARTITIONS = 6


@dataclass
class MetastoreService:
    proc: subprocess.Popen[bytes]
    port: int
    log_path: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def log_tail(self, chars: int = 4000) -> str:
        return self.log_path.read_text(errors="replace")[-chars:]


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/healthz", timeout=1) as r:
            return r.status == 200
    except (OSError, urllib.error.URLError):
        return False


def _start_service(database_url: str, log_path: Path) -> MetastoreService:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLOE_")}
    env.update(FLOE_INTERNAL_TOKEN=TOKEN, PYTHONUNBUFFERED="1", PYTHONPATH=str(REPO_ROOT))
    with open(log_path, "ab") as log:  # the child keeps its own copy of the descriptor
        proc = subprocess.Popen(
            [sys.executable, "-m", "floe_cli.main", "metastore", "serve", "--metastore", database_url,
             "--host", "127.0.0.1", "--port", str(port)],
            stdout=log, stderr=subprocess.STDOUT, env=env, cwd=log_path.parent,
        )  # fmt: skip
    service = MetastoreService(proc, port, log_path)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"metastore service exited (rc={proc.returncode}):\n{service.log_tail()}")
        if _answers(service.url):
            return service
        time.sleep(0.05)  # bounded poll on a real condition (the port answers)
    proc.kill()
    raise RuntimeError(f"metastore service not up after 60 s:\n{service.log_tail()}")


@pytest.fixture
def metastore_service(tmp_path: Path, postgres_url: str) -> Iterator[MetastoreService]:
    service = start_on_free_ports(lambda: _start_service(postgres_url, tmp_path / "metastore.log"))
    try:
        yield service
    finally:
        service.proc.terminate()
        try:
            service.proc.wait(30)
        except subprocess.TimeoutExpired:
            service.proc.kill()
            service.proc.wait(30)


def tcp_peer_ports(pid: int) -> set[int]:
    """Remote ports of the established TCP connections the process ``pid`` holds
    (its socket inodes matched against /proc/net/tcp*)."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue  # closed meanwhile
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    ports = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as f:
            next(f)
            for line in f:
                cols = line.split()
                if cols[3] == "01" and cols[9] in inodes:  # 01: ESTABLISHED
                    ports.add(int(cols[2].rsplit(":", 1)[1], 16))
    return ports


def environment_of(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    return dict(item.decode(errors="replace").partition("=")[::2] for item in raw if item)


def test_two_agents_on_served_metastore_produce_and_consume_across(
    tmp_path: Path, postgres_url: str, s3_url: str, metastore_service: MetastoreService
) -> None:
    backend = Backend("served-postgres", metastore_service.url, s3_url)
    group, (zone_a, zone_b) = start_cluster(tmp_path, backend, ["a", "b"], internal_token=TOKEN)
    try:
        # -- the agents know the service, not the database -------------------------------
        pg_port = make_url(postgres_url).port
        assert pg_port is not None
        for agent in (zone_a, zone_b):
            assert agent.pid is not None
            env = environment_of(agent.pid)
            assert not [k for k, v in env.items() if "postgres://" in v or "postgresql" in v], env
            assert env["FLOE_INTERNAL_TOKEN"] == TOKEN
            cmdline = Path(f"/proc/{agent.pid}/cmdline").read_bytes().decode()
            assert metastore_service.url in cmdline and "postgresql" not in cmdline

        create_topic(zone_a, "across", PARTITIONS)
        assert set(leaders(zone_a, "across", "p floe_az=a").values()) == {node_of(zone_a)}
        assert set(leaders(zone_b, "across", "c floe_az=b").values()) == {node_of(zone_b)}

        # -- a consumer group in zone b, waiting before anything is produced -------------
        consumer = Consumer(
            {
                "bootstrap.servers": zone_b.bootstrap,
                "client.id": "consumer floe_az=b",
                "group.id": "across-group",
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
                "fetch.wait.max.ms": 500,
            }
        )
        assigned: list[TopicPartition] = []
        consumer.subscribe(["across"], on_assign=lambda _c, parts: assigned.extend(parts))
        wait_for(lambda: consumer.poll(0.2) is None and len(assigned) == PARTITIONS,
                 what="the group to assign every partition")  # fmt: skip

        # -- an idempotent producer in zone a -------------------------------------------
        producer = Producer(
            {
                "bootstrap.servers": zone_a.bootstrap,
                "client.id": "producer floe_az=a",
                "enable.idempotence": True,
                "linger.ms": 5,
            }
        )
        acked: dict[str, tuple[int, int]] = {}
        errors: list[str] = []

        def delivered(err: object, msg: object) -> None:
            if err is not None:
                errors.append(str(err))
            else:
                acked[msg.value().decode()] = (msg.partition(), msg.offset())  # type: ignore[attr-defined]

        for i in range(RECORDS):
            producer.produce("across", f"v{i}".encode(), key=f"k{i}".encode(), on_delivery=delivered)
            producer.poll(0)
        assert producer.flush(60) == 0
        assert not errors and len(acked) == RECORDS

        # -- everything comes back through agent b, at the offsets it was acked at ------
        seen: dict[str, tuple[int, int]] = {}
        deadline = time.monotonic() + 60
        while len(seen) < RECORDS and time.monotonic() < deadline:
            for m in consumer.consume(500, 0.5):
                assert m.error() is None, m.error()
                seen[m.value().decode()] = (m.partition(), m.offset())
        assert seen == acked
        consumer.commit(asynchronous=False)
        consumer.close()

        ends = {p: 1 + max(o for q, o in acked.values() if q == p) for p in {q for q, _ in acked.values()}}
        check = Consumer({"bootstrap.servers": zone_a.bootstrap, "group.id": "across-group"})
        committed = check.committed([TopicPartition("across", p) for p in ends], timeout=30)
        check.close()
        assert {tp.partition: tp.offset for tp in committed} == ends

        # Produce went through agent a only, fetches through agent b only.
        assert zone_a.metric("floe_produced_bytes_total") > 0
        assert zone_b.metric("floe_produced_bytes_total") == 0
        assert zone_b.metric("floe_fetched_bytes_total") > 0
        assert zone_a.metric("floe_fetched_bytes_total") == 0

        # -- only the service talks to Postgres ------------------------------------------
        assert pg_port in tcp_peer_ports(metastore_service.proc.pid)
        for agent in (zone_a, zone_b):
            assert agent.pid is not None and agent.running()
            assert pg_port not in tcp_peer_ports(agent.pid), agent.log_tail()
        problems = [line for a in (zone_a, zone_b) for line in a.problems()]
        assert not problems, problems
    except BaseException:
        for agent in group.agents:
            print(agent.log_tail())
        print(metastore_service.log_tail())
        raise
    finally:
        group.close(show_logs=False)
