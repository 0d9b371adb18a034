"""Real clients against an agent advertised as several brokers (``--virtual-brokers``).

One ``floe agent --workers 2 --virtual-brokers 3`` (six node ids, three at each
worker's own port). An idempotent confluent-kafka producer and the Java 4.1
producer with its defaults (idempotent, acks=all) write 16 partitions; each
client spreads its partitions over several connections to each worker (checked
from librdkafka's statistics: Produce requests went to more than one node id
per worker). Then a confluent-kafka group consumer and a Java group consumer
(KIP-848 protocol) read everything back: every acknowledged record exactly
once, per partition in offset order.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections import defaultdict
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer

from loadtest.services import free_port_run
from tests.fixtures.agent_process import AgentProcess, on_backend
from tests.fixtures.java import SLF4J_SIMPLE, compile_java, java_binary, maven_classpath
from tests.interop._clients import create_topic, unique_topic

pytestmark = [pytest.mark.interop, pytest.mark.slow, pytest.mark.timeout(300)]

PARTITIONS, N = 16, 3000

JAVA = r"""
import java.time.Duration;
import java.util.*;
import java.util.concurrent.Future;
import org.apache.kafka.clients.consumer.*;
import org.apache.kafka.clients.producer.*;
import org.apache.kafka.common.serialization.*;

public class VirtualBrokers {
    public static void main(String[] a) throws Exception {
        String bootstrap = a[0], topic = a[1];
        int n = Integer.parseInt(a[2]), expect = Integer.parseInt(a[3]);
        Properties pp = new Properties();
        pp.put("bootstrap.servers", bootstrap);
        pp.put("key.serializer", StringSerializer.class.getName());
        pp.put("value.serializer", StringSerializer.class.getName());
        try (KafkaProducer<String, String> p = new KafkaProducer<>(pp)) {  // defaults: idempotent, acks=all
            List<Future<RecordMetadata>> fs = new ArrayList<>();
            for (int i = 0; i < n; i++) fs.add(p.send(new ProducerRecord<>(topic, i % 16, null, "java-" + i)));
            p.flush();
            for (Future<RecordMetadata> f : fs) f.get();
            System.out.println("PRODUCED " + n + " NODES " + p.partitionsFor(topic).stream()
                .map(x -> x.leader().id()).distinct().count());
        }
        Properties cp = new Properties();
        cp.put("bootstrap.servers", bootstrap);
        cp.put("group.id", topic + "-java");
        cp.put("group.protocol", "consumer");
        cp.put("auto.offset.reset", "earliest");
        cp.put("key.deserializer", StringDeserializer.class.getName());
        cp.put("value.deserializer", StringDeserializer.class.getName());
        try (KafkaConsumer<String, String> c = new KafkaConsumer<>(cp)) {
            c.subscribe(List.of(topic));
            int got = 0;
            long deadline = System.currentTimeMillis() + 90000;
            while (got < expect && System.currentTimeMillis() < deadline) {
                for (ConsumerRecord<String, String> r : c.poll(Duration.ofMillis(500))) {
                    System.out.println("REC " + r.partition() + " " + r.offset() + " " + r.value());
                    got++;
                }
            }
        }
    }
}
"""


@pytest.fixture
def agent(tmp_path: Any, backend: Any) -> Any:
    a = AgentProcess(backend, tmp_path / "agent.log", admin_port=free_port_run(2), workers=2,
                     env_overrides={"virtual_brokers": "3"})  # fmt: skip
    a.start()
    yield a
    try:
        a.stop(10)
    finally:
        a.kill()


def _confluent_produce(bootstrap: str, topic: str) -> dict[str, int]:
    stats: list[dict[str, Any]] = []
    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "statistics.interval.ms": 200,
                  "stats_cb": lambda s: stats.append(json.loads(s))})  # fmt: skip
    errors: list[Any] = []
    for i in range(N):
        p.produce(topic, f"ck-{i}".encode(), partition=i % PARTITIONS,
                  on_delivery=lambda e, _m: errors.append(e) if e is not None else None)  # fmt: skip
        p.poll(0)
    assert p.flush(60) == 0 and not errors, errors[:3]
    deadline = time.monotonic() + 10
    n_stats = len(stats)
    while len(stats) == n_stats and time.monotonic() < deadline:
        p.poll(0.1)  # one more statistics callback, after the last delivery
    brokers = stats[-1]["brokers"]
    # Produce requests per node id (its broker name is host:port/nodeid).
    return {b["name"]: b["req"].get("Produce", 0) for b in brokers.values() if b["nodeid"] >= 0}


def _confluent_consume(bootstrap: str, topic: str, expect: int) -> list[tuple[int, int, str]]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"{topic}-ck", "auto.offset.reset": "earliest"})
    c.subscribe([topic])
    out: list[tuple[int, int, str]] = []
    deadline = time.monotonic() + 90
    try:
        while len(out) < expect and time.monotonic() < deadline:
            for m in c.consume(1000, 1.0):
                assert m.error() is None, m.error()
                out.append((m.partition(), m.offset(), m.value().decode()))
    finally:
        c.close()
    return out


def _check(records: list[tuple[int, int, str]], expected: set[str]) -> None:
    values = [v for _, _, v in records]
    assert len(values) == len(set(values)), "a record was read twice"
    assert set(values) == expected, f"missing {sorted(expected - set(values))[:5]}"
    by_part: dict[int, list[int]] = defaultdict(list)
    for p, o, _ in records:
        by_part[p].append(o)
    assert all(offs == sorted(offs) for offs in by_part.values())


def _wait_for_both_workers(bootstrap: str, topic: str) -> None:
    """The fixture is ready once the port answers; the second worker joins the live
    set a moment later. Wait until each worker (asked on its own port) lists all six
    ids and leads the topic from both workers, as an operator would before a load test."""
    from confluent_kafka.admin import AdminClient

    def view(address: str) -> tuple[int, set[int]]:
        md = AdminClient({"bootstrap.servers": address}).list_topics(topic, timeout=10)
        leaders = {p.leader for p in md.topics[topic].partitions.values()}
        ports = {md.brokers[n].port for n in leaders if n in md.brokers}
        return len(md.brokers), ports | ({-1} if len(ports) < 2 else set())

    host = bootstrap.rsplit(":", 1)[0]
    deadline = time.monotonic() + 60
    while True:
        count, ports = view(bootstrap)
        if count == 6 and -1 not in ports and all(view(f"{host}:{p}") == (6, ports) for p in ports):
            return
        assert time.monotonic() < deadline, f"a worker still lists {count} node ids"
        time.sleep(0.2)


@on_backend("sqlite-file")
def test_idempotent_confluent_and_java_over_virtual_brokers(agent: AgentProcess, tmp_path: Any) -> None:
    topic = unique_topic("vbrokers")
    create_topic(agent.bootstrap, topic, PARTITIONS)
    _wait_for_both_workers(agent.bootstrap, topic)
    produce_per_node = _confluent_produce(agent.bootstrap, topic)
    used = [name for name, n in produce_per_node.items() if n > 0]
    ports = {name.split("/")[0] for name in used}
    assert len(produce_per_node) == 6 and len(ports) == 2, produce_per_node
    assert len(used) > len(ports), f"one connection per worker only: {produce_per_node}"

    cp = maven_classpath(["org.apache.kafka:kafka-clients:4.1.0", SLF4J_SIMPLE])
    (tmp_path / "java").mkdir()
    run_cp = compile_java(JAVA, cp, tmp_path / "java")
    res = subprocess.run(
        [java_binary(), "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn", "-cp", run_cp, "VirtualBrokers",
         agent.bootstrap, topic, str(N), str(2 * N)],
        capture_output=True, text=True, timeout=200,
    )  # fmt: skip
    assert res.returncode == 0, f"java failed:\n{res.stdout[-2000:]}\n{res.stderr[-4000:]}"
    lines = res.stdout.splitlines()
    produced = next(line for line in lines if line.startswith("PRODUCED "))
    assert produced.split()[1] == str(N) and int(produced.split()[3]) == 6, produced  # leaders on all 6 ids

    expected = {f"ck-{i}" for i in range(N)} | {f"java-{i}" for i in range(N)}
    java_read = [(int(p), int(o), v) for _, p, o, v in (line.split(" ", 3) for line in lines if line.startswith("REC "))]
    _check(java_read, expected)
    _check(_confluent_consume(agent.bootstrap, topic, 2 * N), expected)
