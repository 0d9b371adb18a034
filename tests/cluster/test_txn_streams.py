"""Kafka Streams 4.1 word count with ``processing.guarantee=exactly_once_v2`` on two
agent processes, one of which is killed with SIGKILL mid-run and restarted: the
counts read back under read_committed are exact (every word's last count is its
true count, and no count ever overshoots it, which a duplicate would cause).

The Streams app (kafka-streams from Maven Central, compiled at test time)
repartitions by word and keeps counts in a state store with a changelog, so it
exercises transactions over input offsets, a repartition topic, a changelog and
the output topic at once.
"""

from __future__ import annotations

import collections
import struct
import subprocess
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from tests.cluster.helpers import brokers, create_topic, start_cluster, wait_for
from tests.fixtures.agent_process import Backend
from tests.fixtures.java import SLF4J_SIMPLE, compile_java, java_binary, maven_classpath

pytestmark = [pytest.mark.interop, pytest.mark.slow, pytest.mark.postgres, pytest.mark.timeout(300)]

JAVA = r"""
import java.util.*;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.*;
import org.apache.kafka.streams.errors.StreamsUncaughtExceptionHandler;
import org.apache.kafka.streams.kstream.*;

public class FloeWordCount {
    public static void main(String[] a) throws Exception {
        Properties p = new Properties();
        p.put(StreamsConfig.APPLICATION_ID_CONFIG, "floe-wc");
        p.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, a[0]);
        p.put(StreamsConfig.STATE_DIR_CONFIG, a[1]);
        p.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, StreamsConfig.EXACTLY_ONCE_V2);
        p.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, 200);
        p.put(StreamsConfig.REPLICATION_FACTOR_CONFIG, 1);
        p.put(StreamsConfig.DEFAULT_KEY_SERDE_CLASS_CONFIG, Serdes.StringSerde.class);
        p.put(StreamsConfig.DEFAULT_VALUE_SERDE_CLASS_CONFIG, Serdes.StringSerde.class);
        p.put(StreamsConfig.producerPrefix("transaction.timeout.ms"), 10000);
        p.put(StreamsConfig.consumerPrefix("session.timeout.ms"), 10000);
        p.put(StreamsConfig.consumerPrefix("heartbeat.interval.ms"), 1000);
        StreamsBuilder b = new StreamsBuilder();
        b.<String, String>stream("wc-in")
            .flatMapValues(v -> Arrays.asList(v.split(" ")))
            .groupBy((k, w) -> w)
            .count()
            .toStream()
            .to("wc-out", Produced.with(Serdes.String(), Serdes.Long()));
        KafkaStreams s = new KafkaStreams(b.build(), p);
        s.setUncaughtExceptionHandler(e -> {
            System.out.println("STREAMS-ERROR " + e);
            return StreamsUncaughtExceptionHandler.StreamThreadExceptionResponse.REPLACE_THREAD;
        });
        s.setStateListener((n, o) -> System.out.println("STATE " + n));
        Runtime.getRuntime().addShutdownHook(new Thread(() -> s.close(java.time.Duration.ofSeconds(10))));
        s.start();
        Thread.sleep(Long.MAX_VALUE);
    }
}
"""

WORDS = ["alpha", "beta", "gamma", "delta", "eps", "zeta", "eta", "theta"]


@pytest.fixture
def pg_file(postgres_url: str, tmp_path: Path) -> Backend:
    return Backend("postgres-file", postgres_url, f"file://{tmp_path / 'objects'}")


def _sentences(start: int, n: int) -> list[str]:
    return [" ".join(WORDS[(i * 7 + j * 3) % len(WORDS)] for j in range(1 + i % 4)) for i in range(start, start + n)]


def test_streams_exactly_once_word_count_through_kill(tmp_path: Path, pg_file: Backend) -> None:
    cp = maven_classpath(["org.apache.kafka:kafka-streams:4.1.0", SLF4J_SIMPLE])
    run_cp = compile_java(JAVA, cp, tmp_path)
    group, agents = start_cluster(tmp_path, pg_file, ["a", "a"])
    app = None
    try:
        a0, a1 = agents
        create_topic(a0, "wc-in", 3)
        create_topic(a0, "wc-out", 3)
        bs = f"{a0.bootstrap},{a1.bootstrap}"
        sentences = _sentences(0, 300)
        expected = collections.Counter(w for s in sentences for w in s.split(" "))
        prod = Producer({"bootstrap.servers": bs, "enable.idempotence": True})

        def produce(batch: list[str], base: int) -> None:
            for i, s in enumerate(batch):
                prod.produce("wc-in", s.encode(), key=str(base + i).encode())
            assert prod.flush(30) == 0

        app = subprocess.Popen(
            [java_binary(), "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn", "-cp", run_cp, "FloeWordCount",
             bs, str(tmp_path / "state")],
            stdout=open(tmp_path / "streams.log", "w"), stderr=subprocess.STDOUT,
        )  # fmt: skip
        latest: dict[str, int] = {}
        history: dict[str, list[int]] = collections.defaultdict(list)
        c = Consumer(
            {
                "bootstrap.servers": bs,
                "group.id": "wc-check",
                "isolation.level": "read_committed",
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
                "fetch.wait.max.ms": 100,
            }
        )
        c.assign([TopicPartition("wc-out", p, 0) for p in range(3)])

        def drain() -> int:
            n = 0
            for m in c.consume(1000, 0.3):
                if m.error():
                    continue
                word, count = m.key().decode(), struct.unpack(">q", m.value())[0]
                history[word].append(count)
                latest[word] = count
                n += 1
            return n

        produce(sentences[:150], 0)
        first_half = collections.Counter(w for s in sentences[:150] for w in s.split(" "))
        wait_for(lambda: drain() >= 0 and latest == dict(first_half), 150, "first half counted", every=0.01)
        a1.kill()  # mid-run: the second half is produced while one agent is dead
        produce(sentences[150:225], 150)
        wait_for(lambda: len(brokers(a0)) == 1, 30, "the ring to drop the killed agent")
        a1.start()
        produce(sentences[225:], 225)
        deadline = time.monotonic() + 150
        while time.monotonic() < deadline and latest != dict(expected):
            drain()
        log = (tmp_path / "streams.log").read_text()
        assert latest == dict(expected), f"counts {latest} != {dict(expected)}\n{log[-3000:]}"
        for word, counts in history.items():
            assert counts == sorted(counts), f"{word}: counts went back {counts}"
            assert max(counts) <= expected[word], f"{word}: overshoot (a duplicate) {counts}"
        c.close()
    finally:
        if app is not None:
            app.terminate()
            try:
                app.wait(20)
            except subprocess.TimeoutExpired:
                app.kill()
        group.close(False)
