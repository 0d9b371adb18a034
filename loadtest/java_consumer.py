"""The Java consumer as a load generator: ``KafkaConsumer`` 4.1, fetch sessions and all.

Workloads with ``consumerClient: java`` run each consumer as a small Java
program (source below), compiled once like the Java producer
(:func:`loadtest.java_driver.compile_once`). librdkafka, the default
consumer, sends every Fetch sessionless (all its partitions, every time); the
Java consumer opens a fetch session (KIP-227) and then sends only the
partitions whose position changed, and the broker answers only partitions with
news. At width that is the difference issue 18's fetch sessions were built for,
so the width series can be run with either consumer.

Like :func:`loadtest.driver.consumer_main` (whose signature
:func:`java_consumer_main` has), each consumer is assigned its share of the
partitions, starts at their high watermarks, and measures end-to-end latency
from the ``send_ns`` the producers put in every payload. Only
``bootstrap.servers``, byte-array deserializers, ``fetch.max.wait.ms`` 100 (the
librdkafka consumer's ``fetch.wait.max.ms``), ``enable.auto.commit`` false and
the workload's ``consumerConfig`` are set; the rest are Java's defaults.
"""

from __future__ import annotations

from typing import Any

from loadtest.java_driver import compile_once, hist_of, run_java

SOURCE = r"""
import java.nio.ByteBuffer;
import java.time.Duration;
import java.time.Instant;
import java.util.*;
import org.apache.kafka.clients.consumer.*;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

public class FloeBenchConsumer {
    static long nowNs() { Instant i = Instant.now(); return i.getEpochSecond() * 1_000_000_000L + i.getNano(); }
    static long round3(long us) { // 3 significant digits, like the HdrHistograms
        if (us < 1) return 1; long m = 1; while (us >= 1000 * m) m *= 10; return (us / m) * m;
    }
    static long received, receivedBytes, errors;
    static HashMap<Long, Long> e2e = new HashMap<>();

    static void report(long k, boolean fin) {
        StringBuilder sb = new StringBuilder("{"); boolean first = true;
        for (Map.Entry<Long, Long> e : e2e.entrySet()) {
            if (!first) sb.append(','); first = false;
            sb.append('"').append(e.getKey()).append("\":").append(e.getValue());
        }
        System.out.println("{\"k\":" + k + ",\"received\":" + received + ",\"received_bytes\":" + receivedBytes
            + ",\"errors\":" + errors + ",\"e2e\":" + sb.append('}') + ",\"final\":" + fin + "}");
        System.out.flush();
        received = receivedBytes = errors = 0; e2e = new HashMap<>();
    }
    public static void main(String[] a) throws Exception {
        String bootstrap = a[0], topic = a[1], group = a[2];
        double duration = Double.parseDouble(a[4]), interval = Double.parseDouble(a[5]);
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.put("group.id", group);
        p.put("enable.auto.commit", "false");
        p.put("auto.offset.reset", "earliest");
        p.put("fetch.max.wait.ms", "100");
        for (int i = 6; i < a.length; i++) { int eq = a[i].indexOf('='); p.put(a[i].substring(0, eq), a[i].substring(eq + 1)); }
        KafkaConsumer<byte[], byte[]> c = new KafkaConsumer<>(p, new ByteArrayDeserializer(), new ByteArrayDeserializer());
        List<TopicPartition> tps = new ArrayList<>();
        for (String s : a[3].split(",")) tps.add(new TopicPartition(topic, Integer.parseInt(s)));
        c.assign(tps);
        c.seekToEnd(tps);
        for (TopicPartition tp : tps) c.position(tp, Duration.ofSeconds(60)); // the high watermarks, now
        System.out.println("ready"); System.out.flush();
        double t0 = Double.parseDouble(new Scanner(System.in).nextLine().trim());
        long t0ns = (long) (t0 * 1e9), endNs = t0ns + (long) (duration * 1e9), intervalNs = (long) (interval * 1e9);
        long kReported = 0;
        while (true) {
            long now = nowNs();
            if (now >= endNs) break;
            if (now >= t0ns) {
                long k = (now - t0ns) / intervalNs;
                if (k != kReported) { report(kReported, false); kReported = k; }
            }
            ConsumerRecords<byte[], byte[]> recs = c.poll(Duration.ofMillis(50));
            if (recs.isEmpty()) continue;
            long at = nowNs();
            for (ConsumerRecord<byte[], byte[]> r : recs) {
                byte[] v = r.value();
                if (v == null || v.length < 16) { errors++; continue; }
                long us = (at - ByteBuffer.wrap(v).getLong(8)) / 1000;
                e2e.merge(round3(us > 0 && us < 3_600_000_000L ? us : 1), 1L, Long::sum);
                received++; receivedBytes += v.length;
            }
        }
        report(kReported, true);
        c.close();
    }
}
"""


def build() -> str:
    """Compile the consumer once; the run class path."""
    return compile_once(SOURCE, "FloeBenchConsumer")


def java_consumer_main(
    ident: str,
    bootstrap: str,
    topic: str,
    assigned: list[int],
    group: str,
    conf: dict[str, Any],
    start_paused: bool,
    resume: Any,
    clock: Any,
    duration: float,
    interval: float,
    q: Any,
) -> None:
    if start_paused:  # Workload.validate refuses this; kept as a guard for direct callers
        q.put({"kind": "error", "id": ident, "error": "the Java consumer has no backlog mode"})
        return
    try:
        cp = build()
    except Exception as e:
        q.put({"kind": "error", "id": ident, "error": f"java consumer: {e}"})
        return
    cmd = ["java", "-Xmx512m", "-XX:+UseSerialGC", "-cp", cp, "FloeBenchConsumer", bootstrap, topic, group,
           ",".join(map(str, assigned)), str(duration), str(interval), *(f"{k}={v}" for k, v in conf.items())]
    run_java(ident, cmd, clock, duration, q, "java consumer", lambda m: {
        "kind": "c", "id": ident, "k": m["k"], "received": m["received"],
        "received_bytes": m["received_bytes"], "errors": m["errors"],
        "e2e": hist_of(m["e2e"]).encode(), "final": m["final"],
    })  # fmt: skip
