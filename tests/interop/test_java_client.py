"""The Apache Kafka Java client (kafka-clients from Maven Central) against the agent process.

A small Java program, written to a temporary directory and compiled with
``javac`` at test time, produces N records with headers and explicit
timestamps (the Java producer is idempotent by default since 3.0, so this
exercises InitProducerId) and then consumes the whole topic back with
``assign()`` + ``seekToBeginning`` and no group. kafka-python writes records
first, so the Java consumer also reads another client's batches (xerial
snappy), and confluent-kafka reads what Java wrote.

The class path is resolved once with ``mvn dependency:build-classpath`` and
cached (see :mod:`tests.fixtures.java`).
"""

from __future__ import annotations

import hashlib
import subprocess

import pytest

from tests.fixtures.java import SLF4J_SIMPLE, compile_java, java_binary, maven_classpath
from tests.interop._clients import (
    Rec,
    assert_same,
    confluent_consume,
    create_topic,
    kafka_python_produce,
    make_records,
    unique_topic,
)

pytestmark = [pytest.mark.interop, pytest.mark.slow, pytest.mark.timeout(240)]

KAFKA_CLIENTS = ["3.9.1", "4.1.0"]
JAVA_CODEC = {"3.9.1": "snappy", "4.1.0": "zstd"}  # what the Java producer compresses with
PARTITIONS = 3
JAVA_N = 90  # records the Java producer writes (30 per partition)


JAVA = r"""
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.*;
import java.util.concurrent.Future;
import org.apache.kafka.clients.consumer.*;
import org.apache.kafka.clients.producer.*;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.header.internals.RecordHeader;
import org.apache.kafka.common.serialization.*;

public class FloeInterop {
    static String hex(byte[] b) {
        if (b == null) return "-";
        StringBuilder sb = new StringBuilder("x");
        for (byte x : b) sb.append(String.format("%02x", x & 0xff));
        return sb.toString();
    }

    public static void main(String[] a) throws Exception {
        String bootstrap = a[0], topic = a[1], codec = a[3];
        int n = Integer.parseInt(a[2]), parts = Integer.parseInt(a[4]), expectTotal = Integer.parseInt(a[5]);
        long tsBase = Long.parseLong(a[6]);

        Properties pp = new Properties();
        pp.put("bootstrap.servers", bootstrap);
        pp.put("key.serializer", ByteArraySerializer.class.getName());
        pp.put("value.serializer", ByteArraySerializer.class.getName());
        pp.put("compression.type", codec);
        pp.put("linger.ms", "5");
        pp.put("delivery.timeout.ms", "60000");
        // enable.idempotence and acks=all are the defaults since 3.0
        try (KafkaProducer<byte[], byte[]> p = new KafkaProducer<>(pp)) {
            List<Future<RecordMetadata>> fs = new ArrayList<>();
            for (int i = 0; i < n; i++) {
                int part = i % parts;
                byte[] key = (i % 10 == 7) ? null : ("jk-" + i).getBytes(StandardCharsets.UTF_8);
                byte[] value = (i % 13 == 5) ? null : ("jv-" + i + "-" + "z".repeat(i * 31 % 200)).getBytes(StandardCharsets.UTF_8);
                List<Header> hs = new ArrayList<>();
                hs.add(new RecordHeader("seq", Integer.toString(i).getBytes(StandardCharsets.UTF_8)));
                hs.add(new RecordHeader("bin", new byte[] {1, (byte) 0xff, (byte) i}));
                if (i % 3 == 0) {
                    hs.add(new RecordHeader("dup", "a".getBytes(StandardCharsets.UTF_8)));
                    hs.add(new RecordHeader("dup", "b".getBytes(StandardCharsets.UTF_8)));
                }
                fs.add(p.send(new ProducerRecord<>(topic, part, tsBase + i, key, value, hs)));
            }
            p.flush();
            for (int i = 0; i < n; i++) {
                RecordMetadata md = fs.get(i).get();
                System.out.println("ACK " + md.partition() + " " + md.offset() + " " + i);
            }
        }

        Properties cp = new Properties();
        cp.put("bootstrap.servers", bootstrap);
        cp.put("key.deserializer", ByteArrayDeserializer.class.getName());
        cp.put("value.deserializer", ByteArrayDeserializer.class.getName());
        cp.put("enable.auto.commit", "false");
        cp.put("auto.offset.reset", "earliest");
        try (KafkaConsumer<byte[], byte[]> c = new KafkaConsumer<>(cp)) {
            List<TopicPartition> tps = new ArrayList<>();
            for (int i = 0; i < parts; i++) tps.add(new TopicPartition(topic, i));
            c.assign(tps);
            c.seekToBeginning(tps);
            int got = 0;
            long deadline = System.currentTimeMillis() + 30000;
            while (got < expectTotal && System.currentTimeMillis() < deadline) {
                for (ConsumerRecord<byte[], byte[]> r : c.poll(Duration.ofMillis(500))) {
                    StringBuilder h = new StringBuilder();
                    for (Header x : r.headers()) h.append(x.key()).append('=').append(hex(x.value())).append(',');
                    System.out.println("REC " + r.partition() + " " + r.offset() + " " + r.timestamp() + " "
                        + r.timestampType() + " " + hex(r.key()) + " " + hex(r.value()) + " " + h);
                    got++;
                }
            }
        }
    }
}
"""


def _unhex(s: str) -> bytes | None:
    return None if s == "-" else bytes.fromhex(s[1:])


@pytest.fixture(scope="session", params=KAFKA_CLIENTS)
def java_client(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> tuple[str, str, str]:
    """(java, class path with the compiled FloeInterop class, kafka-clients version)."""
    cp = maven_classpath([f"org.apache.kafka:kafka-clients:{request.param}", SLF4J_SIMPLE])
    run_cp = compile_java(JAVA, cp, tmp_path_factory.mktemp(f"java-{request.param}"))
    return java_binary(), run_cp, request.param


def _java_expected(n: int, ts_base: int) -> list[Rec]:
    out = []
    for i in range(n):
        key = None if i % 10 == 7 else f"jk-{i}".encode()
        value = None if i % 13 == 5 else f"jv-{i}-".encode() + b"z" * (i * 31 % 200)
        headers: tuple[tuple[str, bytes], ...] = (
            ("seq", str(i).encode()),
            ("bin", bytes([1, 0xFF, i & 0xFF])),
        )
        if i % 3 == 0:
            headers += (("dup", b"a"), ("dup", b"b"))
        out.append(Rec(i % PARTITIONS, key, value, headers, ts_base + i))
    return out


def test_java_client_roundtrip(agent_process, java_client) -> None:
    java, cp, version = java_client
    codec = JAVA_CODEC[version]
    bootstrap = agent_process.bootstrap
    topic = unique_topic("java")
    create_topic(bootstrap, topic, PARTITIONS)

    # another client's batches first (kafka-python: idempotent, xerial snappy)
    first = kafka_python_produce(
        bootstrap, topic, make_records("kp", PARTITIONS, 5), codec="snappy"
    )
    ts_base = 1_750_000_000_000 + int(hashlib.sha1(topic.encode()).hexdigest()[:6], 16)
    total = len(first) + JAVA_N
    res = subprocess.run(
        [java, "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn", "-cp", cp, "FloeInterop",
         bootstrap, topic, str(JAVA_N), codec, str(PARTITIONS), str(total), str(ts_base)],
        capture_output=True, text=True, timeout=150,
    )  # fmt: skip
    out = res.stdout.splitlines()
    assert res.returncode == 0, (
        f"java client failed ({res.returncode}):\n{res.stdout[-3000:]}\n{res.stderr[-5000:]}"
    )

    java_recs = _java_expected(JAVA_N, ts_base)
    acks = {}
    for line in out:
        if line.startswith("ACK "):
            _, p, o, i = line.split()
            acks[int(i)] = (int(p), int(o))
    assert len(acks) == JAVA_N, f"only {len(acks)} acknowledgements:\n{res.stderr[-3000:]}"
    java_recs = [
        Rec(r.partition, r.key, r.value, r.headers, r.timestamp, acks[i][1])
        for i, r in enumerate(java_recs)
    ]
    assert all(acks[i][0] == r.partition for i, r in enumerate(java_recs))

    consumed = []
    for line in out:
        if line.startswith("REC "):
            _, p, o, ts, ts_type, k, v, h = ([*line.split(" ", 7), ""])[:8]
            assert ts_type == "CreateTime", line
            headers = tuple(
                (hk, _unhex(hv) or b"")
                for hk, _, hv in (x.partition("=") for x in h.split(",") if x)
            )
            consumed.append(Rec(int(p), _unhex(k), _unhex(v), headers, int(ts), int(o)))
    assert_same(
        first + java_recs,
        consumed,
        what=f"kafka-python+java {version} ({codec}) -> java ({agent_process.backend})",
    )
    counts = {p: len(first) // PARTITIONS + JAVA_N // PARTITIONS for p in range(PARTITIONS)}
    assert_same(
        first + java_recs, confluent_consume(bootstrap, topic, counts), what="java -> confluent"
    )
