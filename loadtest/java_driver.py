"""The Java producer as a load generator: ``KafkaProducer`` 4.1 with its defaults.

Workloads with ``producerClient: java`` run each producer as a small Java
program (source below) built against the kafka-clients jar the Kafka broker
backend already resolves (:func:`loadtest.kafka_broker.classpath`), compiled
once into ``.cache/loadtest-java/`` (ignored by git). Only ``bootstrap.servers``
and byte-array serializers are set, plus the workload's ``producerConfig``:
everything else is the Java default (idempotent, ``acks=all``, ``linger.ms`` 5,
``batch.size`` 16 KiB, max 5 requests in flight, sticky partitioner).
``producerConfig: {floe.roundRobin: true}`` instead gives each record an
explicit partition in turn, as the confluent-kafka driver does for ``NO_KEY``,
so a width test spreads records evenly over every partition (issue 18).

The Python wrapper :func:`java_producer_main` has the signature of
:func:`loadtest.driver.producer_main`: it starts the JVM, says ready when the
producer has the topic's metadata, passes the common start time on stdin and
turns the program's per-interval JSON lines into the same snapshots (latency
counts in microseconds rounded to 3 significant digits -> HdrHistogram).
The payload carries the same ``intended_ns send_ns`` header, so consumers
measure end-to-end latency the same way.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import time
from collections.abc import Callable
from typing import Any

from loadtest.buildlock import exclusive
from loadtest.driver import new_hist, wait_for_start
from loadtest.kafka_broker import CACHE, classpath

SOURCE = r"""
import java.nio.ByteBuffer;
import java.time.Instant;
import java.util.*;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicLong;
import org.apache.kafka.clients.producer.*;
import org.apache.kafka.common.serialization.ByteArraySerializer;

public class FloeBenchProducer {
    static long nowNs() { Instant i = Instant.now(); return i.getEpochSecond() * 1_000_000_000L + i.getNano(); }
    static long round3(long us) { // 3 significant digits, like the HdrHistograms
        if (us < 1) return 1; long m = 1; while (us >= 1000 * m) m *= 10; return (us / m) * m;
    }
    static final class Interval {
        final AtomicLong acked = new AtomicLong(), ackedBytes = new AtomicLong(), errors = new AtomicLong();
        final ConcurrentHashMap<Long, Long> pub = new ConcurrentHashMap<>();
        long sent, sentBytes; final HashMap<Long, Long> delay = new HashMap<>();
    }
    static volatile Interval cur = new Interval();

    static String counts(Map<Long, Long> m) {
        StringBuilder sb = new StringBuilder("{"); boolean first = true;
        for (Map.Entry<Long, Long> e : m.entrySet()) {
            if (!first) sb.append(','); first = false;
            sb.append('"').append(e.getKey()).append("\":").append(e.getValue());
        }
        return sb.append('}').toString();
    }
    static void report(long k, Interval it, boolean fin) {
        System.out.println("{\"k\":" + k + ",\"sent\":" + it.sent + ",\"sent_bytes\":" + it.sentBytes
            + ",\"acked\":" + it.acked.get() + ",\"acked_bytes\":" + it.ackedBytes.get()
            + ",\"errors\":" + it.errors.get() + ",\"pub\":" + counts(it.pub) + ",\"delay\":" + counts(it.delay)
            + ",\"final\":" + fin + "}");
        System.out.flush();
    }
    public static void main(String[] a) throws Exception {
        String bootstrap = a[0], topic = a[1]; int size = Integer.parseInt(a[2]);
        double rate = Double.parseDouble(a[3]); double duration = Double.parseDouble(a[4]);
        double interval = Double.parseDouble(a[5]);
        int partitions = Integer.parseInt(a[6]); boolean roundRobin = a[7].equals("1");
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        for (int i = 8; i < a.length; i++) { int eq = a[i].indexOf('='); p.put(a[i].substring(0, eq), a[i].substring(eq + 1)); }
        KafkaProducer<byte[], byte[]> prod = new KafkaProducer<>(p, new ByteArraySerializer(), new ByteArraySerializer());
        prod.partitionsFor(topic);
        System.out.println("ready"); System.out.flush();
        double t0 = Double.parseDouble(new Scanner(System.in).nextLine().trim());
        long t0ns = (long) (t0 * 1e9), endNs = t0ns + (long) (duration * 1e9);
        while (nowNs() < t0ns) Thread.sleep(1);
        byte[] body = new byte[size - 16]; new Random().nextBytes(body);
        long n = 0, kReported = 0; long intervalNs = (long) (interval * 1e9);
        while (true) {
            long now = nowNs();
            if (now >= endNs) break;
            long k = (now - t0ns) / intervalNs;
            if (k != kReported) { Interval it = cur; cur = new Interval(); report(kReported, it, false); kReported = k; }
            long due = rate > 0 ? t0ns + (long) (n / rate * 1e9) : now;
            if (due > now) { long w = due - now; if (w > 200_000) Thread.sleep(w / 1_000_000, (int) (w % 1_000_000)); else Thread.onSpinWait(); continue; }
            long sendNs = nowNs();
            ByteBuffer buf = ByteBuffer.allocate(size); buf.putLong(due); buf.putLong(sendNs); buf.put(body);
            final Interval it = cur; final long s = sendNs;
            ProducerRecord<byte[], byte[]> rec = roundRobin
                ? new ProducerRecord<>(topic, (int) (n % partitions), null, buf.array())
                : new ProducerRecord<>(topic, buf.array());
            prod.send(rec, (md, e) -> {
                Interval c = cur;
                if (e != null) { c.errors.incrementAndGet(); return; }
                c.pub.merge(round3((nowNs() - s) / 1000), 1L, Long::sum);
                c.acked.incrementAndGet(); c.ackedBytes.addAndGet(size);
            });
            Interval c = cur; c.sent++; c.sentBytes += size; c.delay.merge(round3((sendNs - due) / 1000), 1L, Long::sum);
            n++;
        }
        prod.flush();
        prod.close();
        report(kReported, cur, true);
    }
}
"""


def build() -> str:
    """Compile the producer once; the run class path."""
    return compile_once(SOURCE, "FloeBenchProducer")


def compile_once(source: str, class_name: str, cp: str | None = None) -> str:
    """Compile one Java program against ``cp`` (default: the Kafka broker's class
    path, which holds kafka-clients), once (keyed by its source and the class path,
    under a lock: several load processes may ask at once); the run class path."""
    cp = classpath() if cp is None else cp
    key = hashlib.sha1((source + cp).encode()).hexdigest()[:12]
    out = CACHE.parent / "loadtest-java" / key
    done = out / "compiled"  # written after javac: another process may be compiling
    if not done.exists():
        with exclusive(out.with_name(f"{key}.lock")):
            if not done.exists():
                out.mkdir(parents=True, exist_ok=True)
                src = out / f"{class_name}.java"
                src.write_text(source)
                res = subprocess.run(
                    ["javac", "-cp", cp, "-d", str(out), str(src)], capture_output=True, text=True, timeout=300
                )
                if res.returncode != 0:
                    raise RuntimeError("javac failed:\n" + res.stdout + res.stderr)
                done.touch()
    return f"{out}{os.pathsep}{cp}"


def hist_of(counts: dict[str, int]) -> Any:
    """An HdrHistogram of the program's ``{microseconds: count}``."""
    h = new_hist()
    for v, c in counts.items():
        h.record_value(min(max(int(v), 1), 3_600_000_000), c)
    return h


def java_producer_main(
    ident: str,
    bootstrap: str,
    topic: str,
    partitions: int,
    message_size: int,
    rate: float,
    key_distributor: str,
    conf: dict[str, Any],
    clock: Any,
    duration: float,
    interval: float,
    q: Any,
) -> None:
    # NO_KEY: the Java default partitioner decides (sticky), unless the workload asks
    # for ``floe.roundRobin`` (explicit partitions in turn, as the confluent-kafka
    # driver sends them: every partition gets every n-th record, for width tests).
    conf = dict(conf)
    round_robin = str(conf.pop("floe.roundRobin", "false")).lower() == "true" and key_distributor == "NO_KEY"
    try:
        cp = build()
    except Exception as e:
        q.put({"kind": "error", "id": ident, "error": f"java driver: {e}"})
        return
    props = [f"{k}={v}" for k, v in conf.items() if k != "enable.idempotence" or v is not None]
    cmd = ["java", "-Xmx512m", "-XX:+UseSerialGC", "-cp", cp, "FloeBenchProducer", bootstrap, topic,
           str(message_size), str(rate), str(duration), str(interval), str(partitions),
           "1" if round_robin else "0", *props]
    run_java(ident, cmd, clock, duration, q, "java producer", lambda m: {
        "kind": "p", "id": ident, "k": m["k"], "sent": m["sent"], "sent_bytes": m["sent_bytes"],
        "acked": m["acked"], "acked_bytes": m["acked_bytes"], "errors": m["errors"],
        "pub": hist_of(m["pub"]).encode(), "delay": hist_of(m["delay"]).encode(), "final": m["final"],
    })  # fmt: skip


def run_java(
    ident: str,
    cmd: list[str],
    clock: Any,
    duration: float,
    q: Any,
    what: str,
    message: Callable[[dict[str, Any]], dict[str, Any]],
) -> None:
    """Run a load program: wait for its ``ready``, say ready, pass it the common
    start time on stdin, and put each per-interval JSON line it prints on ``q`` as
    ``message(line)`` until the final one."""
    proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    assert proc.stdin is not None and proc.stdout is not None
    try:
        line = proc.stdout.readline()
        if line.strip() != "ready":
            q.put({"kind": "error", "id": ident, "error": f"{what} did not start: {line!r}"})
            return
        q.put({"kind": "ready", "id": ident})
        t0, _ = wait_for_start(clock, duration)
        proc.stdin.write(f"{t0}\n")
        proc.stdin.flush()
        deadline = t0 + duration + 120
        for line in proc.stdout:
            if not line.startswith("{"):
                continue
            m = json.loads(line)
            q.put(message(m))
            if m["final"] or time.time() > deadline:
                break
    finally:
        if proc.poll() is None:
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
