"""The Java client (kafka-clients 3.x, idempotence on by default): Admin + producer.

kafka-clients comes from Maven Central (resolved once, see :mod:`tests.fixtures.java`);
the source file is run directly by ``java`` (single-file source launch).
"""

from __future__ import annotations

import subprocess

import pytest

from tests.fixtures.java import SLF4J_SIMPLE, java_binary, maven_classpath

pytestmark = pytest.mark.interop
KAFKA_CLIENTS = "org.apache.kafka:kafka-clients:3.9.1"

SOURCE = r"""
import java.util.*;
import java.util.concurrent.TimeUnit;
import org.apache.kafka.clients.admin.*;
import org.apache.kafka.clients.producer.*;
import org.apache.kafka.common.serialization.StringSerializer;

public class AdminAndIdempotentProduce {
    public static void main(String[] args) throws Exception {
        Properties a = new Properties();
        a.put("bootstrap.servers", args[0]);
        a.put("request.timeout.ms", "10000");
        a.put("default.api.timeout.ms", "15000");
        try (Admin admin = Admin.create(a)) {
            admin.createTopics(List.of(new NewTopic("java-idem", Optional.of(2), Optional.empty())))
                .all().get(15, TimeUnit.SECONDS);
            System.out.println("cluster " + admin.describeCluster().clusterId().get(15, TimeUnit.SECONDS));
            admin.createPartitions(Map.of("java-idem", NewPartitions.increaseTo(3)))
                .all().get(15, TimeUnit.SECONDS);
        }
        Properties p = new Properties();
        p.put("bootstrap.servers", args[0]);
        p.put("key.serializer", StringSerializer.class.getName());
        p.put("value.serializer", StringSerializer.class.getName());
        p.put("max.block.ms", "15000");
        p.put("delivery.timeout.ms", "15000");
        p.put("request.timeout.ms", "10000");
        try (KafkaProducer<String, String> producer = new KafkaProducer<>(p)) {
            for (int i = 0; i < 3; i++) {
                RecordMetadata md = producer.send(new ProducerRecord<>("java-idem", 2, "k", "v" + i))
                    .get(15, TimeUnit.SECONDS);
                System.out.println("offset " + md.offset());
            }
        }
    }
}
"""


def test_java_admin_and_idempotent_producer(floe_agent, tmp_path):
    java = java_binary()
    classpath = maven_classpath([KAFKA_CLIENTS, SLF4J_SIMPLE])
    source = tmp_path / "AdminAndIdempotentProduce.java"
    source.write_text(SOURCE)
    run = subprocess.run(
        [java, "-cp", classpath, str(source), floe_agent.bootstrap],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr[-4000:]
    lines = run.stdout.split("\n")
    assert f"cluster {floe_agent.broker.config.cluster_id}" in lines
    assert [line for line in lines if line.startswith("offset")] == ["offset 0", "offset 1", "offset 2"]
    info = floe_agent.call(floe_agent.broker.meta.get_topic("java-idem"))
    assert info.partitions == 3
