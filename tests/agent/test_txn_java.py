"""The Java 4.1 client's transactions against an agent: a transactional producer
commits and aborts transactions over 3 partitions (with sendOffsetsToTransaction),
a read_committed consumer group reads exactly the committed records, a
read_uncommitted one sees the aborted ones too, and a second producer with the
same transactional.id fences the first."""

from __future__ import annotations

import subprocess

import pytest

from agent.metrics import METRICS
from tests.fixtures.java import SLF4J_SIMPLE, compile_java, java_binary, maven_classpath

pytestmark = [pytest.mark.interop, pytest.mark.slow, pytest.mark.timeout(240)]

JAVA = r"""
import java.time.Duration;
import java.util.*;
import org.apache.kafka.clients.admin.*;
import org.apache.kafka.clients.consumer.*;
import org.apache.kafka.clients.producer.*;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.ProducerFencedException;
import org.apache.kafka.common.serialization.*;

public class FloeTxn {
    static KafkaProducer<String, String> producer(String bs, String tid) {
        Properties p = new Properties();
        p.put("bootstrap.servers", bs);
        p.put("transactional.id", tid);
        p.put("linger.ms", "5");
        p.put("key.serializer", StringSerializer.class.getName());
        p.put("value.serializer", StringSerializer.class.getName());
        KafkaProducer<String, String> prod = new KafkaProducer<>(p);
        prod.initTransactions();
        return prod;
    }

    static List<String> consume(String bs, String topic, String isolation, int expect) {
        Properties c = new Properties();
        c.put("bootstrap.servers", bs);
        c.put("group.id", "java-" + isolation + "-" + UUID.randomUUID());
        c.put("auto.offset.reset", "earliest");
        c.put("isolation.level", isolation);
        c.put("key.deserializer", StringDeserializer.class.getName());
        c.put("value.deserializer", StringDeserializer.class.getName());
        List<String> out = new ArrayList<>();
        try (KafkaConsumer<String, String> cons = new KafkaConsumer<>(c)) {
            cons.subscribe(List.of(topic));
            long deadline = System.currentTimeMillis() + 30000;
            long idle = -1;
            while (System.currentTimeMillis() < deadline) {
                ConsumerRecords<String, String> recs = cons.poll(Duration.ofMillis(200));
                for (ConsumerRecord<String, String> r : recs) out.add(r.value());
                if (recs.isEmpty() && out.size() >= expect) {
                    if (idle < 0) idle = System.currentTimeMillis();
                    if (System.currentTimeMillis() - idle > 1500) break;
                } else idle = -1;
            }
        }
        return out;
    }

    static boolean isFenced(Exception e) {
        return e instanceof ProducerFencedException || e.getCause() instanceof ProducerFencedException;
    }

    public static void main(String[] a) throws Exception {
        String bs = a[0], topic = a[1];
        try (Admin admin = Admin.create(Map.of("bootstrap.servers", bs))) {
            admin.createTopics(List.of(new NewTopic(topic, 3, (short) 1))).all().get();
        }
        KafkaProducer<String, String> prod = producer(bs, "java-tx");
        for (int t = 0; t < 4; t++) {
            prod.beginTransaction();
            for (int i = 0; i < 15; i++) prod.send(new ProducerRecord<>(topic, i % 3, "k", "t" + t + "-" + i));
            if (t == 2) {
                prod.flush();
                prod.abortTransaction();
            } else {
                prod.sendOffsetsToTransaction(
                    Map.of(new TopicPartition(topic, 0), new OffsetAndMetadata(t + 1)),
                    new ConsumerGroupMetadata("java-txn-group"));
                prod.commitTransaction();
            }
        }
        // a second instance fences the first
        KafkaProducer<String, String> other = producer(bs, "java-tx");
        String fenced = "no";
        try {
            prod.beginTransaction();
            prod.send(new ProducerRecord<>(topic, 0, "k", "zombie")).get();
            prod.commitTransaction();
        } catch (Exception e) {
            fenced = isFenced(e) ? "yes" : e.toString();
            if (!isFenced(e)) {
                // transactions v2: the zombie's produce gets INVALID_PRODUCER_EPOCH (abortable,
                // as from Kafka); aborting then meets the fence at the coordinator
                try {
                    prod.abortTransaction();
                } catch (Exception e2) {
                    fenced = isFenced(e2) ? "yes" : e2.toString();
                }
            }
        }
        prod.close(Duration.ZERO);
        other.close();
        List<String> rc = consume(bs, topic, "read_committed", 45);
        List<String> ru = consume(bs, topic, "read_uncommitted", 60);
        Collections.sort(rc);
        long offsets;
        try (Admin admin = Admin.create(Map.of("bootstrap.servers", bs))) {
            offsets = admin.listConsumerGroupOffsets("java-txn-group").partitionsToOffsetAndMetadata().get()
                .get(new TopicPartition(topic, 0)).offset();
        }
        System.out.println("FENCED " + fenced);
        System.out.println("RC " + rc.size() + " " + String.join(",", rc));
        System.out.println("RU " + ru.size());
        System.out.println("OFFSET " + offsets);
    }
}
"""


@pytest.fixture(scope="module")
def java_txn(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    cp = maven_classpath(["org.apache.kafka:kafka-clients:4.1.0", SLF4J_SIMPLE])
    return java_binary(), compile_java(JAVA, cp, tmp_path_factory.mktemp("java-txn"))


def _requests(api: str) -> float:
    return float(METRICS.requests.labels(api)._value.get())


@pytest.mark.parametrize("tv", [2, 1])
def test_java_transactions(agent_factory, java_txn, tv) -> None:
    """transaction.version 2 (the default): the 4.1 client uses KIP-890 part 2
    (no AddPartitionsToTxn / AddOffsetsToTxn, EndTxn v5 bumping the epoch per
    transaction); 1: the classic protocol. Same outcome either way."""
    floe_agent = agent_factory(transaction_version=tv)
    java, cp = java_txn
    before = {api: _requests(api) for api in ("AddPartitionsToTxn", "AddOffsetsToTxn", "EndTxn")}
    res = subprocess.run(
        [java, "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn", "-cp", cp, "FloeTxn", floe_agent.bootstrap, "java-txn"],
        capture_output=True, text=True, timeout=200,
    )  # fmt: skip
    sent = {api: _requests(api) - n for api, n in before.items()}
    if tv == 2:
        assert sent["AddPartitionsToTxn"] == 0 and sent["AddOffsetsToTxn"] == 0 and sent["EndTxn"] >= 4, sent
    else:
        assert sent["AddPartitionsToTxn"] >= 4 and sent["AddOffsetsToTxn"] == 3, sent
    assert res.returncode == 0, res.stdout + res.stderr[-4000:]
    lines = dict(line.split(" ", 1) for line in res.stdout.splitlines() if " " in line)
    assert lines["FENCED"] == "yes", lines
    count, values = lines["RC"].split(" ", 1)
    expected = sorted(f"t{t}-{i}" for t in (0, 1, 3) for i in range(15))
    assert (int(count), values.split(",")) == (45, expected)
    assert lines["RU"] == "60"  # the aborted transaction's 15 records, never the markers
    assert lines["OFFSET"] == "4"  # the last committed transaction's offset
