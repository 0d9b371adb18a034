"""Three agents behind ONE advertised address (a load balancer), as the Terraform
module deploys a zone: identity is not address.

One Postgres, one moto S3, a round-robin TCP balancer (tests.fixtures.tcp_lb)
in front of three agent processes that all advertise the balancer's address,
each with its own ``--agent-id``. Through that single address:

* Metadata lists three brokers with distinct, stable node ids;
* a fourth agent started with an id already in use is refused at start with a
  one-line message (no traceback);
* confluent-kafka and the Java client (kafka-clients 3.9.1) produce and consume
  in consumer groups for ``FLOE_SOAK_S`` seconds (default 8; the issue's
  Must-show runs it for 300 through box-bench) while the test samples the
  registry (rows with a fresh heartbeat) and every agent's ring view once a
  second: the ring stays at three, no agent is ever evicted. Group requests
  that land on an agent other than the group's coordinator are relayed to it
  (agent.cluster.forward), which the metrics show;
* kill -9 of one agent leaves a ring of two in the registry and in both
  survivors' views within the dead-agent timeout (+ one heartbeat), and the
  clients carry on: every acknowledged record is consumed.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import socket
import struct
import subprocess
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

import asyncpg
import pytest
from confluent_kafka import Consumer, KafkaError, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from metastore.engine import asyncpg_dsn
from tests.cluster.helpers import wait_for
from tests.fixtures.agent_process import AgentGroup, AgentProcess, Backend
from tests.fixtures.java import SLF4J_SIMPLE, compile_java, java_binary, maven_classpath
from tests.fixtures.tcp_lb import TcpBalancer

SOAK_S_ = float(os.environ.get("FLOE_SOAK_S", "8"))
pytestmark = [
    pytest.mark.slow, pytest.mark.postgres, pytest.mark.s3, pytest.mark.interop,
    pytest.mark.timeout(int(SOAK_S_) + 240),  # the soak itself may run for minutes
]  # fmt: skip

LEFT = re.compile(r"membership changed: .* left \[[^\]]")  # someone left the ring
SOAK_S = float(os.environ.get("FLOE_SOAK_S", "8"))
HEARTBEAT_MS, DEAD_AFTER_MS = 500, 5000  # the default dead-agent timeout

JAVA = r"""
import java.time.Duration;
import java.util.*;
import java.util.concurrent.atomic.AtomicLong;
import org.apache.kafka.clients.consumer.*;
import org.apache.kafka.clients.producer.*;
import org.apache.kafka.common.serialization.*;

public class SharedAddress {
    public static void main(String[] a) throws Exception {
        String bootstrap = a[0], topic = a[1], group = a[2];
        long until = System.currentTimeMillis() + Long.parseLong(a[3]);
        Properties pp = new Properties();
        pp.put("bootstrap.servers", bootstrap);
        pp.put("key.serializer", StringSerializer.class.getName());
        pp.put("value.serializer", StringSerializer.class.getName());
        pp.put("linger.ms", "5");
        pp.put("delivery.timeout.ms", "60000");
        pp.put("metadata.max.age.ms", "1000");
        Set<String> acked = Collections.synchronizedSet(new HashSet<>());
        AtomicLong failed = new AtomicLong();
        Properties cp = new Properties();
        cp.put("bootstrap.servers", bootstrap);
        cp.put("group.id", group);
        cp.put("key.deserializer", StringDeserializer.class.getName());
        cp.put("value.deserializer", StringDeserializer.class.getName());
        cp.put("auto.offset.reset", "earliest");
        cp.put("enable.auto.commit", "false");
        cp.put("metadata.max.age.ms", "1000");
        Set<String> seen = new HashSet<>();
        try (KafkaProducer<String, String> p = new KafkaProducer<>(pp);
             KafkaConsumer<String, String> c = new KafkaConsumer<>(cp)) {
            c.subscribe(List.of(topic));
            int i = 0;
            while (System.currentTimeMillis() < until) {
                for (int k = 0; k < 20; k++, i++) {
                    final String v = "java-" + i;
                    p.send(new ProducerRecord<>(topic, v, v), (md, e) -> {
                        if (e == null) acked.add(v); else failed.incrementAndGet();
                    });
                }
                for (ConsumerRecord<String, String> r : c.poll(Duration.ofMillis(100)))
                    if (r.value().startsWith("java-")) seen.add(r.value());
                c.commitSync();
            }
            p.flush();
            long deadline = System.currentTimeMillis() + 60000;
            while (!seen.containsAll(acked) && System.currentTimeMillis() < deadline) {
                for (ConsumerRecord<String, String> r : c.poll(Duration.ofMillis(200)))
                    if (r.value().startsWith("java-")) seen.add(r.value());
                c.commitSync();
            }
            Set<String> missing = new HashSet<>(acked);
            missing.removeAll(seen);
            System.out.println("RESULT acked=" + acked.size() + " failed=" + failed.get()
                + " consumed=" + seen.size() + " missing=" + missing.size());
        }
    }
}
"""


@pytest.fixture
def pg_s3(postgres_url: str, s3_url: str) -> Backend:
    return Backend("postgres-s3", postgres_url, s3_url)


def _ring(a: AgentProcess) -> list[str] | None:
    """The agent's own membership view (its /healthz), patient with a loaded box."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{a.admin_port}/healthz", timeout=10) as r:
            ring = json.loads(r.read()).get("ring")
            return list(ring) if ring is not None else None
    except (OSError, ValueError):
        return None


def _registry_live(url: str) -> list[str]:
    async def q() -> list[str]:
        con = await asyncpg.connect(asyncpg_dsn(url))
        try:
            rows = await con.fetch(
                "SELECT id FROM agents WHERE heartbeat_at >= "
                "(extract(epoch from clock_timestamp()) * 1000)::bigint - $1 ORDER BY id",
                DEAD_AFTER_MS,
            )
            return [r["id"] for r in rows]
        finally:
            await con.close()

    return asyncio.run(q())


def _heartbeat_v0(port: int, group: str) -> int:
    """Heartbeat v0 by hand for an unknown member; returns the error code."""
    gid, member = group.encode(), b"nobody"
    body = struct.pack(">hhih", 12, 0, 7, 5) + b"probe"
    body += struct.pack(">h", len(gid)) + gid + struct.pack(">ih", 1, len(member)) + member
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(struct.pack(">i", len(body)) + body)
        buf = b""
        while len(buf) < 10:
            chunk = s.recv(64)
            assert chunk, "connection closed"
            buf += chunk
    _size, corr, err = struct.unpack_from(">iih", buf)
    assert corr == 7
    return int(err)


class Clients(threading.Thread):
    """confluent-kafka: an idempotent producer and a group consumer through the balancer."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        super().__init__(daemon=True)
        common = {"bootstrap.servers": bootstrap, "topic.metadata.refresh.interval.ms": 1000}
        self.p = Producer({**common, "enable.idempotence": True, "linger.ms": 5})
        self.c = Consumer(
            {
                **common,
                "group.id": "py-group",
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
                "session.timeout.ms": 6000,
                "heartbeat.interval.ms": 500,
                "fetch.wait.max.ms": 200,
            }
        )
        self.topic = topic
        self.acked: set[str] = set()
        self.failed: list[str] = []
        self.seen: set[str] = set()
        self.errors: list[str] = []
        self.producing = threading.Event()
        self.producing.set()
        self.stop = threading.Event()
        self.drained = threading.Event()  # set once producing stopped and nothing is in flight

    def _cb(self, err: Any, msg: Any) -> None:
        (self.failed.append(str(err)) if err else self.acked.add(msg.value().decode()))

    def run(self) -> None:
        self.c.subscribe([self.topic])
        i = 0
        try:
            while not self.stop.is_set():
                if self.producing.is_set():
                    for _ in range(20):
                        self.p.produce(self.topic, f"py-{i}".encode(), on_delivery=self._cb)
                        i += 1
                elif len(self.p) == 0:  # producing stopped and every record delivered
                    self.drained.set()
                self.p.poll(0)
                for m in self.c.consume(200, 0.1):
                    if m.error():
                        if m.error().code() != KafkaError._PARTITION_EOF:
                            self.errors.append(str(m.error()))
                    elif m.value().startswith(b"py-"):
                        self.seen.add(m.value().decode())
                try:
                    self.c.commit(asynchronous=False)
                except Exception as e:  # nothing to commit yet, or a rebalance
                    self.errors.append(f"commit: {e}")
        finally:
            self.p.flush(60)
            self.c.close()


def test_three_agents_behind_one_address(tmp_path: Path, pg_s3: Backend) -> None:
    cp = maven_classpath(["org.apache.kafka:kafka-clients:3.9.1", SLF4J_SIMPLE])
    (tmp_path / "java").mkdir()
    java_cp = compile_java(JAVA, cp, tmp_path / "java")
    group = AgentGroup(tmp_path, pg_s3)
    agents: list[AgentProcess] = []
    lb = TcpBalancer(lambda: [a.port for a in agents if a.running()])
    env = {
        "advertised_port": lb.port,
        "zone": "a",
        "cluster_heartbeat_ms": HEARTBEAT_MS,
        "cluster_dead_after_ms": DEAD_AFTER_MS,
    }
    try:
        for i in range(3):
            agents.append(group.make(agent_id=f"agent-{i}", flush_interval_ms=20, **env))
        ids = [f"agent-{i}" for i in range(3)]
        wait_for(lambda: all(_ring(a) == ids for a in agents), what="ring of 3")
        ad = AdminClient({"bootstrap.servers": lb.address})
        md = ad.list_topics(timeout=10)
        assert {(b.host, b.port) for b in md.brokers.values()} == {("127.0.0.1", lb.port)}
        nodes = {a.healthz()["node_id"] for a in agents}  # type: ignore[index]
        assert set(md.brokers) == nodes and len(nodes) == 3

        # A duplicate id is refused at start, in one line.
        dup = group.make(agent_id="agent-1", start=False, **env)
        res = subprocess.run(dup.argv(), env=dup.env(), capture_output=True, text=True, timeout=60)
        assert res.returncode != 0 and "Traceback" not in res.stderr, res.stderr[-2000:]
        assert "agent id 'agent-1' is already used by a live agent" in res.stderr
        assert res.stderr.strip().splitlines()[-1].startswith("floe: agent id"), res.stderr

        ad.create_topics([NewTopic("shared", 6)])["shared"].result(30)
        clients = Clients(lb.address, "shared")
        clients.start()
        java = subprocess.Popen(
            [java_binary(), "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn", "-cp", java_cp,
             "SharedAddress", lb.address, "shared", "java-group", str(int(SOAK_S * 1000))],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        samples, t_end = 0, time.monotonic() + SOAK_S
        registry_counts: set[int] = set()
        while time.monotonic() < t_end:
            registry_counts.add(len(_registry_live(pg_s3.metastore)))
            views = [_ring(a) for a in agents]
            assert views == [ids] * 3, views
            samples += 1
            time.sleep(1.0)  # the sampling period of the soak, not a synchronisation
        assert registry_counts == {3}, registry_counts
        evictions = sum(a.healthz()["evictions"] for a in agents)  # type: ignore[index]
        log_evictions = sum(
            a.log_text().count("dropped from the registry") + len(LEFT.findall(a.log_text()))
            for a in agents
        )
        forwards = sum(a.metric("floe_group_forwards_total") for a in agents)
        assert evictions == 0 and log_evictions == 0
        # Deterministically: a Heartbeat sent to each agent directly is answered by
        # the group's coordinator (relayed), never NOT_COORDINATOR (16).
        before = sum(a.metric("floe_group_forwards_total") for a in agents)
        codes = [_heartbeat_v0(a.port, "py-group") for a in agents]
        assert 16 not in codes and len(set(codes)) == 1, codes
        assert sum(a.metric("floe_group_forwards_total") for a in agents) - before >= 2  # + the clients

        # kill -9 of one agent: a ring of two within the dead-agent timeout.
        victim, survivors = agents[2], agents[:2]
        t0 = time.monotonic()
        victim.kill()
        wait_for(
            lambda: all(_ring(a) == ids[:2] for a in survivors)
            and _registry_live(pg_s3.metastore) == ids[:2],
            timeout=30,
            what="a ring of two",
            every=0.05,
        )
        ring_of_two_s = time.monotonic() - t0
        out, err = java.communicate(timeout=SOAK_S + 120)
        clients.producing.clear()
        wait_for(lambda: clients.drained.is_set() and clients.acked
                 and clients.acked <= clients.seen, timeout=60,
                 what="every record delivered and every acknowledged one consumed",
                 every=0.2)  # fmt: skip
        clients.stop.set()
        clients.join(60)
        assert not clients.is_alive()
        assert clients.acked <= clients.seen, len(clients.acked - clients.seen)
        result = next((line for line in out.splitlines() if line.startswith("RESULT")), "")
        print(
            f"\nshared address: soak={SOAK_S:.0f}s samples={samples} registry={sorted(registry_counts)} "
            f"evictions={evictions}/{log_evictions} relayed group requests={forwards:.0f} "
            f"ring of two after kill -9 in {ring_of_two_s:.2f}s (dead after {DEAD_AFTER_MS} ms) "
            f"python acked={len(clients.acked)} consumed={len(clients.seen)} "
            f"failed={len(clients.failed)} java: {result} load={os.getloadavg()}"
        )
        assert java.returncode == 0 and result, f"java failed:\n{out[-2000:]}\n{err[-4000:]}"
        fields = dict(kv.split("=") for kv in result.split()[1:])
        assert int(fields["acked"]) > 0 and fields["missing"] == "0", result
        # Within the timeout and two heartbeats, plus 3 s for a loaded box's late ticks.
        assert ring_of_two_s <= (DEAD_AFTER_MS + 2 * HEARTBEAT_MS) / 1000 + 3.0, ring_of_two_s
    finally:
        lb.close()
        group.close(show_logs=False)
