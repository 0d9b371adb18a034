"""Share-group consume throughput (KIP-932) beside a classic group.

``python -m loadtest.share_consume [--records 20000] [--size 1024] [--consumers 1,4,16]``

One agent process (SQLite + ``file://`` in a temp dir, ``floe dev``'s back end).
The records are produced first (confluent-kafka, 1 KiB values) to a one-partition
topic and to a 16-partition topic. Then, per run, one JVM runs N consumer threads
(Java kafka-clients 4.2.0 from Maven Central):

* ``share``: N ``KafkaShareConsumer`` s in one share group on the one-partition
  topic (``share.auto.offset.reset=earliest`` via IncrementalAlterConfigs),
  explicit acknowledgement: each polled record is accepted, then ``commitSync``.
* ``classic``: 16 ``KafkaConsumer`` s in one classic group on the 16-partition
  topic, ``commitSync`` after each poll.

Throughput = records / (last commit - first record received). Latency per record
= from the ``poll`` that returned it (the client has just received the acquired
records) to the ``commitSync`` that stored its acknowledgement (share) or offset
(classic): the acquisition-to-acknowledge time as a client sees it. Prints one
JSON object per run; run it under ``box-bench`` and report the load average.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from loadtest.java_driver import compile_once
from loadtest.maven import maven_jars
from loadtest.services import start_agent

CLIENTS = ("org.apache.kafka", "kafka-clients", "4.2.0")

SOURCE = r"""
import java.time.Duration;
import java.util.*;
import java.util.concurrent.*;
import java.util.concurrent.atomic.*;
import org.apache.kafka.clients.admin.*;
import org.apache.kafka.clients.consumer.*;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.serialization.*;

public class ShareBench {
    public static void main(String[] a) throws Exception {
        String mode = a[0], bs = a[1], topic = a[2], group = a[3];
        int threads = Integer.parseInt(a[4]);
        long expect = Long.parseLong(a[5]);
        if (mode.equals("share")) {
            try (Admin admin = Admin.create(Map.of("bootstrap.servers", bs))) {
                admin.incrementalAlterConfigs(Map.of(new ConfigResource(ConfigResource.Type.GROUP, group),
                    List.of(new AlterConfigOp(new ConfigEntry("share.auto.offset.reset", "earliest"), AlterConfigOp.OpType.SET)))).all().get();
            }
        }
        AtomicLong done = new AtomicLong(), first = new AtomicLong(Long.MAX_VALUE), last = new AtomicLong();
        List<long[]> lats = Collections.synchronizedList(new ArrayList<>());
        ExecutorService ex = Executors.newFixedThreadPool(threads);
        List<Future<?>> fs = new ArrayList<>();
        for (int t = 0; t < threads; t++) {
            fs.add(ex.submit(() -> {
                Properties c = new Properties();
                c.put("bootstrap.servers", bs);
                c.put("group.id", group);
                c.put("key.deserializer", ByteArrayDeserializer.class.getName());
                c.put("value.deserializer", ByteArrayDeserializer.class.getName());
                long[] mine = new long[(int) expect];
                int n = 0;
                long deadline = System.currentTimeMillis() + 180_000;
                if (mode.equals("share")) {
                    c.put("share.acknowledgement.mode", "explicit");
                    try (KafkaShareConsumer<byte[], byte[]> cons = new KafkaShareConsumer<>(c)) {
                        cons.subscribe(List.of(topic));
                        while (done.get() < expect && System.currentTimeMillis() < deadline) {
                            ConsumerRecords<byte[], byte[]> recs = cons.poll(Duration.ofMillis(100));
                            if (recs.isEmpty()) continue;
                            long t0 = System.nanoTime();
                            first.accumulateAndGet(System.currentTimeMillis(), Math::min);
                            for (ConsumerRecord<byte[], byte[]> r : recs) cons.acknowledge(r, AcknowledgeType.ACCEPT);
                            cons.commitSync();
                            long us = (System.nanoTime() - t0) / 1000;
                            for (int i = 0; i < recs.count() && n < mine.length; i++) mine[n++] = us;
                            done.addAndGet(recs.count());
                            last.accumulateAndGet(System.currentTimeMillis(), Math::max);
                        }
                    }
                } else {
                    c.put("auto.offset.reset", "earliest");
                    c.put("enable.auto.commit", "false");
                    try (KafkaConsumer<byte[], byte[]> cons = new KafkaConsumer<>(c)) {
                        cons.subscribe(List.of(topic));
                        while (done.get() < expect && System.currentTimeMillis() < deadline) {
                            ConsumerRecords<byte[], byte[]> recs = cons.poll(Duration.ofMillis(100));
                            if (recs.isEmpty()) continue;
                            long t0 = System.nanoTime();
                            first.accumulateAndGet(System.currentTimeMillis(), Math::min);
                            cons.commitSync();
                            long us = (System.nanoTime() - t0) / 1000;
                            for (int i = 0; i < recs.count() && n < mine.length; i++) mine[n++] = us;
                            done.addAndGet(recs.count());
                            last.accumulateAndGet(System.currentTimeMillis(), Math::max);
                        }
                    }
                }
                lats.add(Arrays.copyOf(mine, n));
                return null;
            }));
        }
        for (Future<?> f : fs) f.get();
        ex.shutdown();
        long[] all = lats.stream().flatMapToLong(Arrays::stream).sorted().toArray();
        double secs = Math.max(1, last.get() - first.get()) / 1000.0;
        System.out.println("{\"records\": " + done.get() + ", \"seconds\": " + secs
            + ", \"records_per_s\": " + Math.round(done.get() / secs)
            + ", \"p50_ms\": " + (all.length > 0 ? all[all.length / 2] / 1000.0 : -1)
            + ", \"p99_ms\": " + (all.length > 0 ? all[(int) Math.min(all.length - 1, Math.round(0.99 * (all.length - 1)))] / 1000.0 : -1) + "}");
    }
}
"""


def build() -> str:
    """Compile the driver once (:func:`loadtest.java_driver.compile_once`) against
    kafka-clients 4.2; returns the run class path."""
    cp = os.pathsep.join(maven_jars([":".join(CLIENTS), "org.slf4j:slf4j-nop:1.7.36"]))
    return compile_once(SOURCE, "ShareBench", cp)


def _produce(bs: str, topic: str, partitions: int, records: int, size: int) -> None:
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bs})  # kept alive until the future resolves
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(30)
    p = Producer({"bootstrap.servers": bs, "linger.ms": 20, "batch.size": 262144})
    value = os.urandom(size)
    for i in range(records):
        p.produce(topic, value, partition=i % partitions)
        if i % 10_000 == 0:
            p.poll(0)
    assert p.flush(120) == 0


def run(records: int, size: int, consumers: list[int]) -> list[dict[str, Any]]:
    cp = build()
    workdir = Path(tempfile.mkdtemp(prefix="floe-sharebench-"))
    out: list[dict[str, Any]] = []
    try:
        agent = start_agent(f"sqlite:///{workdir / 'meta.db'}", f"file://{workdir / 'objects'}", workdir)
        try:
            bs = agent.bootstrap
            _produce(bs, "share1", 1, records, size)
            _produce(bs, "classic16", 16, records, size)
            runs = [("share", "share1", n) for n in consumers] + [("classic", "classic16", 16)]
            for mode, topic, n in runs:
                res = subprocess.run(
                    ["java", "-cp", cp, "ShareBench", mode, bs, topic, f"{mode}-{n}", str(n), str(records)],
                    capture_output=True, text=True, timeout=400,
                )  # fmt: skip
                if res.returncode != 0:
                    raise RuntimeError(res.stderr[-3000:])
                row = {"mode": mode, "consumers": n, "partitions": 16 if mode == "classic" else 1}
                row.update(json.loads(res.stdout.strip().splitlines()[-1]))
                row["loadavg"] = os.getloadavg()
                print(json.dumps(row), flush=True)
                out.append(row)
        finally:
            agent.stop()
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--records", type=int, default=20_000)
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--consumers", default="1,4,16")
    a = ap.parse_args()
    print("loadavg start", os.getloadavg(), flush=True)
    run(a.records, a.size, [int(x) for x in a.consumers.split(",")])
    print("loadavg end", os.getloadavg(), flush=True)


if __name__ == "__main__":
    main()
