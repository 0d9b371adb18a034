"""Two agents on ``floe metastore serve`` over TLS, peers over TLS, no database
credentials in the agents (issue 42, must-show 3).

The topology docs/operations.md ("TLS between agents and for the metastore
service") describes: a ``floe metastore serve --tls-cert/--tls-key`` process on
Postgres, and two ``floe agent`` processes given ``--metastore https://...``,
the CA that signed the service's certificate (``FLOE_METASTORE_CA``), their own
credentials, and ``FLOE_ADMIN_TLS`` so that their admin/peer port (``/blocks``,
``/kafka``, /metrics) is HTTPS too, verified against the same private CA
generated here. Nothing of the database is in their environment.

Real clients (confluent-kafka) then produce idempotently, consume in a group and
commit, and run a transaction (committed and aborted; a read_committed consumer
sees the committed records only). The service is then killed with SIGKILL
(records are produced meanwhile) and started again on the same port: every
acknowledged record reads back exactly once with its value, the group's
offsets are still there, and a new produce succeeds within a deadline.
"""

from __future__ import annotations

import json
import os
import signal
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from sqlalchemy.engine import make_url

from metastore.pgserver import start_on_free_ports
from tests.cluster.helpers import brokers, create_topic, wait_for
from tests.cluster.test_agents_on_metastore_service import environment_of, tcp_peer_ports
from tests.fixtures.agent_process import REPO_ROOT, AgentProcess, Backend
from tests.fixtures.pki import TestCA
from tests.fixtures.s3 import free_port

pytestmark = [pytest.mark.slow, pytest.mark.postgres, pytest.mark.s3, pytest.mark.interop]

META_TOKEN = "tls-served-metastore-token-0123"
PEER_TOKEN = "tls-peer-token-0123456789abcdef"
RECORDS = 2000
OUTAGE_RECORDS = 200
PARTITIONS = 6
TOPIC, TXN_TOPIC, GROUP = "tls-across", "tls-txn", "tls-group"


def _https_json(url: str, ca: Path, timeout: float = 2) -> Any:
    with urllib.request.urlopen(url, timeout=timeout, context=ssl.create_default_context(cafile=str(ca))) as r:
        return r.read() if url.endswith("/metrics") else json.loads(r.read())


@dataclass
class TlsService:
    database_url: str
    ca: Path
    cert: Path
    key: Path
    log_path: Path
    port: int = field(default_factory=free_port)
    proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    def log_tail(self, chars: int = 4000) -> str:
        return self.log_path.read_text(errors="replace")[-chars:]

    def _answers(self) -> bool:
        try:
            return bool(_https_json(f"{self.url}/healthz", self.ca, timeout=1)["status"] == "ok")
        except (OSError, ValueError, urllib.error.URLError):
            return False

    def start(self) -> TlsService:
        env = {k: v for k, v in os.environ.items() if not k.startswith("FLOE_")}
        env.update(FLOE_METASTORE_TOKEN=META_TOKEN, PYTHONUNBUFFERED="1", PYTHONPATH=str(REPO_ROOT))
        with open(self.log_path, "ab") as log:  # the child keeps its own copy of the descriptor
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "floe_cli.main", "metastore", "serve", "--metastore", self.database_url,
                 "--host", "127.0.0.1", "--port", str(self.port),
                 "--tls-cert", str(self.cert), "--tls-key", str(self.key)],
                stdout=log, stderr=subprocess.STDOUT, env=env, cwd=self.log_path.parent,
            )  # fmt: skip
        proc = self.proc
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(f"metastore service exited (rc={proc.returncode}):\n{self.log_tail()}")
            if self._answers():
                return self
            time.sleep(0.05)  # bounded poll on a real condition (the port answers https)
        proc.kill()
        raise RuntimeError(f"metastore service not up after 60 s:\n{self.log_tail()}")

    def kill9(self) -> None:
        assert self.proc is not None
        os.kill(self.proc.pid, signal.SIGKILL)
        assert self.proc.wait(30) == -signal.SIGKILL

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(30)


@dataclass
class TlsAgent(AgentProcess):
    """An agent whose admin port answers https only (FLOE_ADMIN_TLS)."""

    ca: Path = Path()

    def healthz(self) -> dict[str, Any] | None:
        try:
            return dict(_https_json(f"https://127.0.0.1:{self.admin_port}/healthz", self.ca, timeout=1))
        except (OSError, ValueError, urllib.error.URLError):
            return None

    def metric(self, name: str, labels: str = "") -> float:
        text = _https_json(f"https://127.0.0.1:{self.admin_port}/metrics", self.ca, timeout=30).decode()
        total = 0.0
        for line in text.splitlines():
            head, _, value = line.rpartition(" ")
            metric, _, label_text = head.partition("{")
            if not line.startswith("#") and metric == name and labels in label_text:
                total += float(value)
        return total


@pytest.fixture
def pki(tmp_path: Path) -> tuple[TestCA, Any, Any]:
    ca = TestCA(tmp_path / "pki")
    return (
        ca,
        ca.issue("metastore", dns=("localhost",), ips=("127.0.0.1",)),
        ca.issue("agent", dns=("localhost",), ips=("127.0.0.1",)),
    )


@pytest.fixture
def service(tmp_path: Path, postgres_url: str, pki: tuple[TestCA, Any, Any]) -> Iterator[TlsService]:
    ca, cert, _ = pki

    def first() -> TlsService:
        return TlsService(postgres_url, ca.cert, cert.cert, cert.key, tmp_path / "metastore.log").start()

    svc = start_on_free_ports(first)
    try:
        yield svc
    finally:
        svc.stop()


def _values(consumer: Consumer, want: int, deadline_s: float) -> list[str]:
    """Values read until ``want`` arrived and every assigned partition reached its end."""
    out: list[str] = []
    at_end: set[int] = set()
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline and not (len(out) >= want and len(at_end) >= len(consumer.assignment())):
        for m in consumer.consume(500, 0.5):
            err = m.error()
            if err is not None and err.code() == KafkaError._PARTITION_EOF:
                at_end.add(m.partition())
                continue
            assert err is None, err
            at_end.discard(m.partition())
            out.append(m.value().decode())
    return out


def _reader(bootstrap: str, topic: str, partitions: int, **conf: Any) -> Consumer:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "tls-reader-unused", "enable.auto.commit": False,
                  "enable.partition.eof": True, "auto.offset.reset": "earliest", **conf})  # fmt: skip
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    return c


def test_two_agents_on_a_tls_metastore_service_survive_its_kill9(
    tmp_path: Path, postgres_url: str, s3_url: str, service: TlsService, pki: tuple[TestCA, Any, Any]
) -> None:
    ca, _, agent_cert = pki
    backend = Backend("served-tls", service.url, s3_url)
    settings = dict(
        metastore_token=META_TOKEN, peer_token=PEER_TOKEN, metastore_ca=ca.cert,
        admin_tls="true", ssl_certfile=agent_cert.cert, ssl_keyfile=agent_cert.key, peer_ssl_cafile=ca.cert,
        cluster_heartbeat_ms=300, cluster_dead_after_ms=2500,
        # Blocks of an object another agent owns come through that agent's /blocks
        # (over https) instead of this agent's own write cache.
        fetch_cache_writes="false",
    )  # fmt: skip
    agents = [
        TlsAgent(backend, tmp_path / f"agent{i}.log", env_overrides={k: str(v) for k, v in settings.items()}, ca=ca.cert)
        for i in range(2)
    ]
    try:
        for a in agents:
            a.start()
        for a in agents:
            wait_for(lambda a=a: len(brokers(a)) == 2, what=f"{a.bootstrap} to see 2 agents")
        a, b = agents

        # -- the agents know the service (https, its CA), not the database ------------
        pg_port = make_url(postgres_url).port
        for agent in agents:
            assert agent.pid is not None
            env = environment_of(agent.pid)
            assert not [k for k, v in env.items() if "postgres" in v.lower() or k.startswith("PG")], env
            assert env["FLOE_METASTORE_CA"] == str(ca.cert) and env["FLOE_ADMIN_TLS"] == "true"
            cmdline = Path(f"/proc/{agent.pid}/cmdline").read_bytes().decode()
            assert service.url in cmdline and "postgres" not in cmdline
            assert agent.healthz() is not None  # https
            with pytest.raises(OSError):  # not in clear (the connection is dropped)
                urllib.request.urlopen(f"http://127.0.0.1:{agent.admin_port}/healthz", timeout=5)

        create_topic(a, TOPIC, PARTITIONS)
        create_topic(a, TXN_TOPIC, 3)

        # -- a consumer group, then an idempotent producer ----------------------------
        consumer = Consumer({"bootstrap.servers": b.bootstrap, "group.id": GROUP, "auto.offset.reset": "earliest",
                             "enable.auto.commit": False, "fetch.wait.max.ms": 200})  # fmt: skip
        assigned: list[TopicPartition] = []
        consumer.subscribe([TOPIC], on_assign=lambda _c, parts: assigned.extend(parts))
        wait_for(lambda: consumer.poll(0.2) is None and len(assigned) == PARTITIONS,
                 what="the group to assign every partition")  # fmt: skip

        acked: dict[str, tuple[int, int]] = {}
        errors: list[str] = []

        def delivered(err: Any, msg: Any) -> None:
            if err is not None:
                errors.append(str(err))
            else:
                acked[msg.value().decode()] = (msg.partition(), msg.offset())

        producer = Producer({"bootstrap.servers": a.bootstrap, "enable.idempotence": True, "linger.ms": 5,
                             "message.timeout.ms": 120_000})  # fmt: skip
        for i in range(RECORDS):
            producer.produce(TOPIC, f"v{i}".encode(), key=f"k{i}".encode(), on_delivery=delivered)
            producer.poll(0)
        assert producer.flush(60) == 0
        assert not errors and len(acked) == RECORDS

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

        def committed() -> dict[int, int]:
            check = Consumer({"bootstrap.servers": a.bootstrap, "group.id": GROUP})
            try:
                tps = check.committed([TopicPartition(TOPIC, p) for p in ends], timeout=30)
            finally:
                check.close()
            return {tp.partition: tp.offset for tp in tps}

        assert committed() == ends

        # -- a transaction committed, one aborted; read_committed sees the first only --
        txn = Producer({"bootstrap.servers": a.bootstrap, "transactional.id": "tls-txn-producer"})
        txn.init_transactions(30)
        txn.begin_transaction()
        for i in range(100):
            txn.produce(TXN_TOPIC, f"committed-{i}".encode(), partition=i % 3)
        txn.commit_transaction(30)
        txn.begin_transaction()
        for i in range(50):
            txn.produce(TXN_TOPIC, f"aborted-{i}".encode(), partition=i % 3)
        txn.flush(30)
        txn.abort_transaction(30)
        reader = _reader(b.bootstrap, TXN_TOPIC, 3, **{"isolation.level": "read_committed"})
        try:
            got = _values(reader, 100, 60)
        finally:
            reader.close()
        assert sorted(got) == sorted(f"committed-{i}" for i in range(100))

        # Peer traffic went over https and none of it failed.
        peer_gets = sum(x.metric("floe_peer_gets_total") for x in agents)
        assert peer_gets > 0
        assert sum(x.metric("floe_peer_get_failures_total") for x in agents) == 0
        problems = [line for x in agents for line in x.problems()]
        assert not problems, problems
        assert pg_port not in tcp_peer_ports(a.pid or 0) and pg_port not in tcp_peer_ports(b.pid or 0)

        # -- kill -9 of the service while records are being produced ------------------
        service.kill9()
        for i in range(OUTAGE_RECORDS):
            producer.produce(TOPIC, f"outage{i}".encode(), key=f"o{i}".encode(), on_delivery=delivered)
            producer.poll(0)
        service.start()  # the same port, the same certificate

        # The agents recover: a new producer's record is acknowledged within a deadline.
        fresh = Producer({"bootstrap.servers": b.bootstrap, "enable.idempotence": True, "message.timeout.ms": 10_000})
        recovered_at = time.monotonic()

        probes: list[str] = []

        def one_acked() -> bool:
            done: list[Any] = []
            probes.append(value := f"after-restart-{len(probes)}")
            fresh.produce(TOPIC, value.encode(), on_delivery=lambda err, msg: done.append(err))
            fresh.flush(12)
            if done and done[0] is None:
                acked[value] = (-1, -1)
                return True
            return False

        wait_for(one_acked, timeout=90, what="a produce to succeed after the service restarted", every=0.5)
        recovery_s = time.monotonic() - recovered_at
        assert producer.flush(120) == 0
        assert not errors, errors[:5]
        assert len(acked) == RECORDS + OUTAGE_RECORDS + 1

        # -- nothing acknowledged is lost, nothing is duplicated ------------------------
        reader = _reader(a.bootstrap, TOPIC, PARTITIONS)
        try:
            values = _values(reader, len(acked), 90)
        finally:
            reader.close()
        assert len(values) == len(set(values)), "a record was written twice"
        assert set(values) >= set(acked), sorted(set(acked) - set(values))[:10]
        assert set(values) - set(acked) <= set(probes)  # a probe that timed out may have landed
        assert committed() == ends
        print(f"{peer_gets:.0f} peer block reads over https; produce acknowledged {recovery_s:.1f} s"
              " after the service came back")  # fmt: skip
    except BaseException:
        for x in agents:
            print(x.log_tail())
        print(service.log_tail())
        raise
    finally:
        for x in agents:
            try:
                x.stop(10)
            except Exception as e:  # still kill it
                print(f"stopping agent failed: {e}")
            finally:
                x.kill()
