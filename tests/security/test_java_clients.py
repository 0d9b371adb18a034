"""The Java 4.1 client over SASL_SSL (SCRAM-SHA-512) and SSL with a client
certificate (mTLS): produce + consume round trips, one JVM program run per
listener (kafka-clients from Maven Central, see tests.fixtures.java)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.fixtures.agent import RunningAgent
from tests.fixtures.java import SLF4J_SIMPLE, java_binary, maven_classpath
from tests.security.conftest import Pki, bootstrap

KAFKA_CLIENTS = "org.apache.kafka:kafka-clients:4.1.0"

SOURCE = r"""
import java.time.Duration;
import java.util.*;
import org.apache.kafka.clients.consumer.*;
import org.apache.kafka.clients.producer.*;
import org.apache.kafka.common.serialization.*;

public class SecureRoundTrip {
    public static void main(String[] args) throws Exception {
        Properties common = new Properties();
        common.put("bootstrap.servers", args[0]);
        String topic = args[1];
        for (int i = 2; i < args.length; i++) {
            String[] kv = args[i].split("=", 2);
            common.put(kv[0], kv[1].replace("\\n", "\n"));
        }
        Properties pp = new Properties();
        pp.putAll(common);
        try (Producer<String, String> p = new KafkaProducer<>(pp, new StringSerializer(), new StringSerializer())) {
            for (int i = 0; i < 5; i++) p.send(new ProducerRecord<>(topic, "v" + i)).get();
        }
        Properties cp = new Properties();
        cp.putAll(common);
        cp.put("group.id", "g-" + topic);
        cp.put("auto.offset.reset", "earliest");
        List<String> got = new ArrayList<>();
        try (Consumer<String, String> c = new KafkaConsumer<>(cp, new StringDeserializer(), new StringDeserializer())) {
            c.subscribe(List.of(topic));
            long deadline = System.currentTimeMillis() + 30000;
            while (got.size() < 5 && System.currentTimeMillis() < deadline)
                for (ConsumerRecord<String, String> r : c.poll(Duration.ofMillis(500))) got.add(r.value());
        }
        System.out.println("got " + String.join(",", got));
    }
}
"""


def _pem(path: Path) -> str:
    return path.read_text().strip().replace("\n", "\\n")


@pytest.mark.slow
def test_java_scram_sha512_and_mtls_round_trips(secure_agent: RunningAgent, pki: Pki, tmp_path: Path) -> None:
    java = java_binary()
    classpath = maven_classpath([KAFKA_CLIENTS, SLF4J_SIMPLE])
    source = tmp_path / "SecureRoundTrip.java"
    source.write_text(SOURCE)
    trust = ["ssl.truststore.type=PEM", f"ssl.truststore.location={pki.ca.cert}"]
    runs = {
        "SASL_SSL": [
            "security.protocol=SASL_SSL", "sasl.mechanism=SCRAM-SHA-512",
            'sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required'
            ' username="carol" password="carol-secret";',
            *trust,
        ],
        "SSL": [
            "security.protocol=SSL", "ssl.keystore.type=PEM",
            f"ssl.keystore.key={_pem(pki.client.key)}", f"ssl.keystore.certificate.chain={_pem(pki.client.cert)}",
            *trust,
        ],
    }  # fmt: skip
    for listener, props in runs.items():
        run = subprocess.run(
            [java, "-cp", classpath, str(source), bootstrap(secure_agent, listener), f"java-{listener}", *props],
            capture_output=True, text=True, timeout=180,
        )  # fmt: skip
        assert run.returncode == 0, run.stderr[-4000:]
        assert "got v0,v1,v2,v3,v4" in run.stdout, run.stdout[-2000:]
