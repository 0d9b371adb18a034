"""The issue's report through the Java client: ``offsetsForTimes(T+5)`` over one batch
of 10 records T+0..T+9 answers offset 5 at T+5, from Floe as from Kafka."""

from __future__ import annotations

import subprocess

import pytest

from tests.conformance._harness import T0, Target
from tests.fixtures.java import SLF4J_SIMPLE, compile_java, java_binary, maven_classpath

pytestmark = [pytest.mark.conformance, pytest.mark.interop, pytest.mark.timeout(240)]

JAVA = r"""
import java.util.*;
import org.apache.kafka.clients.consumer.*;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

public class OffsetsForTimes {
    public static void main(String[] a) {
        Properties p = new Properties();
        p.put("bootstrap.servers", a[0]);
        p.put("key.deserializer", ByteArrayDeserializer.class.getName());
        p.put("value.deserializer", ByteArrayDeserializer.class.getName());
        try (KafkaConsumer<byte[], byte[]> c = new KafkaConsumer<>(p)) {
            TopicPartition tp = new TopicPartition(a[1], 0);
            for (int i = 2; i < a.length; i++) {
                OffsetAndTimestamp r = c.offsetsForTimes(Map.of(tp, Long.parseLong(a[i]))).get(tp);
                System.out.println(r == null ? "null" : r.offset() + " " + r.timestamp());
            }
        }
    }
}
"""


def test_java_offsets_for_times(kafka_target: Target, floe_target: Target, tmp_path) -> None:
    cp = compile_java(JAVA, maven_classpath(["org.apache.kafka:kafka-clients:4.1.0", SLF4J_SIMPLE]), tmp_path)
    answers = {}
    for t in (kafka_target, floe_target):
        topic = t.create(t.topic("java-oft"))
        t.produce(topic, [(None, b"v%d" % i, T0 + i) for i in range(10)])
        res = subprocess.run(
            [java_binary(), "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn", "-cp", cp, "OffsetsForTimes",
             t.bootstrap, topic, str(T0 + 5), str(T0), str(T0 + 9), str(T0 + 10)],
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert res.returncode == 0, res.stderr[-3000:]
        answers[t.name] = res.stdout.split("\n")[:4]
    assert answers["kafka"] == [f"5 {T0 + 5}", f"0 {T0}", f"9 {T0 + 9}", "null"]
    assert answers["floe"] == answers["kafka"]
