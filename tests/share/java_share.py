"""The Java 4.2 share-consumer driver used by the share-group tests (one class, several modes).

``FloeShare setup <bs> <topic> <partitions> <group> [name=value ...]`` creates the
topic and sets group configs through IncrementalAlterConfigs (GROUP resource);
``produce <bs> <topic> <count> <prefix> [pause ms every 10]`` sends values
``<prefix>-<i>`` round-robin over the partitions; ``consume <bs> <topic> <group>
<implicit|explicit|hold> <max.poll.records> <idle exit ms> <max run ms>`` runs a
``KafkaShareConsumer`` and prints ``REC <epoch ms> <partition> <offset> <delivery
count> <value>`` per record. In ``explicit`` mode values starting ``rej`` are
rejected, ``rel`` released, others accepted, then commitSync; ``hold`` prints
``HELD`` after its first records and then sleeps without acknowledging (to be
killed). Every consumer prints ``READY`` after its first poll; in ``explicit``
mode ``ACKOK <epoch ms> <partition> <offset> <type>`` for each acknowledgement
commitSync reported stored: its partition is in the result without an error.
commitSync silently leaves out a partition whose leader is missing from the
metadata (a just-killed agent): ``ACKUNSENT``, same fields. An optional 9th
argument sleeps that many ms after each non-empty poll (slow consumers).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.fixtures.java import SLF4J_SIMPLE, compile_java, java_binary, maven_classpath

KAFKA_CLIENTS_42 = "org.apache.kafka:kafka-clients:4.2.0"

JAVA = r"""
import java.time.Duration;
import java.util.*;
import org.apache.kafka.clients.admin.*;
import org.apache.kafka.clients.consumer.*;
import org.apache.kafka.clients.producer.*;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.serialization.*;

public class FloeShare {
    public static void main(String[] a) throws Exception {
        String mode = a[0], bs = a[1];
        if (mode.equals("setup")) {
            try (Admin admin = Admin.create(Map.of("bootstrap.servers", bs))) {
                admin.createTopics(List.of(new NewTopic(a[2], Integer.parseInt(a[3]), (short) 1))).all().get();
                List<AlterConfigOp> ops = new ArrayList<>();
                for (int i = 5; i < a.length; i++) {
                    String[] kv = a[i].split("=", 2);
                    ops.add(new AlterConfigOp(new ConfigEntry(kv[0], kv[1]), AlterConfigOp.OpType.SET));
                }
                if (!ops.isEmpty()) {
                    admin.incrementalAlterConfigs(Map.of(new ConfigResource(ConfigResource.Type.GROUP, a[4]), ops)).all().get();
                }
            }
            System.out.println("SETUP");
            return;
        }
        if (mode.equals("produce")) {
            String topic = a[2]; int n = Integer.parseInt(a[3]); String prefix = a[4];
            long pause = a.length > 5 ? Long.parseLong(a[5]) : 0;
            Properties p = new Properties();
            p.put("bootstrap.servers", bs);
            p.put("linger.ms", "1");
            p.put("key.serializer", StringSerializer.class.getName());
            p.put("value.serializer", StringSerializer.class.getName());
            try (KafkaProducer<String, String> prod = new KafkaProducer<>(p)) {
                int parts = prod.partitionsFor(topic).size();
                for (int i = 0; i < n; i++) {
                    prod.send(new ProducerRecord<>(topic, i % parts, "k" + i, prefix + "-" + i));
                    if (pause > 0 && i % 10 == 9) { prod.flush(); Thread.sleep(pause); }
                }
                prod.flush();
            }
            System.out.println("PRODUCED " + n);
            return;
        }
        String topic = a[2], group = a[3], ack = a[4];
        int maxPoll = Integer.parseInt(a[5]);
        long idleExit = Long.parseLong(a[6]), maxRun = Long.parseLong(a[7]);
        long pollDelay = a.length > 8 ? Long.parseLong(a[8]) : 0;
        Properties c = new Properties();
        c.put("bootstrap.servers", bs);
        c.put("group.id", group);
        c.put("max.poll.records", String.valueOf(maxPoll));
        c.put("share.acknowledgement.mode", ack.equals("implicit") ? "implicit" : "explicit");
        c.put("key.deserializer", StringDeserializer.class.getName());
        c.put("value.deserializer", StringDeserializer.class.getName());
        long start = System.currentTimeMillis(), last = -1;
        boolean ready = false;
        try (KafkaShareConsumer<String, String> cons = new KafkaShareConsumer<>(c)) {
            cons.subscribe(List.of(topic));
            while (System.currentTimeMillis() - start < maxRun) {
                ConsumerRecords<String, String> recs = cons.poll(Duration.ofMillis(200));
                if (!ready) { System.out.println("READY"); System.out.flush(); ready = true; }
                List<String> acked = new ArrayList<>();
                for (ConsumerRecord<String, String> r : recs) {
                    System.out.println("REC " + System.currentTimeMillis() + " " + r.partition() + " " + r.offset() + " "
                        + r.deliveryCount().orElse((short) -1) + " " + r.value());
                    if (ack.equals("explicit")) {
                        AcknowledgeType t = r.value().startsWith("rej") ? AcknowledgeType.REJECT
                            : r.value().startsWith("rel") ? AcknowledgeType.RELEASE : AcknowledgeType.ACCEPT;
                        cons.acknowledge(r, t);
                        acked.add(r.partition() + " " + r.offset() + " " + t);
                    }
                }
                System.out.flush();
                if (!recs.isEmpty()) {
                    last = System.currentTimeMillis();
                    if (ack.equals("hold")) { System.out.println("HELD"); System.out.flush(); Thread.sleep(Long.MAX_VALUE); }
                    if (ack.equals("explicit")) {
                        // Stored: a partition the result names without an error. commitSync
                        // leaves out the partitions whose leader is not in the metadata (an
                        // agent just killed): their acknowledgements were never sent.
                        Set<Integer> stored = new HashSet<>(), answered = new HashSet<>();
                        try {
                            cons.commitSync().forEach((tp, err) -> {
                                answered.add(tp.partition());
                                if (err.isEmpty()) stored.add(tp.partition());
                            });
                        } catch (Exception e) {
                            // Failed, not known unsent: neither ACKOK nor ACKUNSENT.
                            stored.clear();
                            for (ConsumerRecord<String, String> r : recs) answered.add(r.partition());
                        }
                        long now = System.currentTimeMillis();
                        for (String x : acked) {
                            int part = Integer.parseInt(x.split(" ")[0]);
                            if (stored.contains(part)) System.out.println("ACKOK " + now + " " + x);
                            else if (!answered.contains(part)) System.out.println("ACKUNSENT " + now + " " + x);
                        }
                        System.out.flush();
                    }
                    if (pollDelay > 0) Thread.sleep(pollDelay);
                } else if (last > 0 && System.currentTimeMillis() - last > idleExit) {
                    break;
                }
            }
        }
        System.out.println("DONE");
    }
}
"""


def build(out_dir: Path) -> tuple[str, str]:
    """(java binary, run class path) of the compiled driver."""
    cp = maven_classpath([KAFKA_CLIENTS_42, SLF4J_SIMPLE])
    return java_binary(), compile_java(JAVA, cp, out_dir)


def run(java: str, cp: str, *args: str, timeout: float = 120) -> str:
    res = subprocess.run(
        [java, "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn", "-cp", cp, "FloeShare", *args],
        capture_output=True, text=True, timeout=timeout,
    )  # fmt: skip
    assert res.returncode == 0, res.stdout + res.stderr[-4000:]
    return res.stdout


def start(java: str, cp: str, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [java, "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn", "-cp", cp, "FloeShare", *args],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


def records(out: str) -> list[tuple[int, int, int, int, str]]:
    """(epoch ms, partition, offset, delivery count, value) of every REC line."""
    out_recs = []
    for line in out.splitlines():
        if line.startswith("REC "):
            _, ts, p, off, dc, value = line.split(" ", 5)
            out_recs.append((int(ts), int(p), int(off), int(dc), value))
    return out_recs


def acks(out: str) -> list[tuple[int, int, int, str]]:
    """(epoch ms, partition, offset, type) of every ACKOK line."""
    res = []
    for line in out.splitlines():
        if line.startswith("ACKOK "):
            _, ts, p, off, t = line.split(" ")
            res.append((int(ts), int(p), int(off), t))
    return res
