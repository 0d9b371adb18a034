"""The Java 4.1 KafkaConsumer (``group.protocol=consumer``) used by the KIP-848 tests.

``protocol="classic"`` runs the same member with ``group.protocol=classic``
(JoinGroup/SyncGroup, the default eager range assignor; session 6 s, heartbeat
0.5 s) for the online-migration tests.

One process is one group member. It logs, one line each, with wall-clock
milliseconds and its member epoch (``groupMetadata().generationId()`` is the
member epoch under the consumer protocol):

    ASSIGN <ts> <epoch> <p,p,...>     onPartitionsAssigned (after the coordinator gave them)
    POS <ts> <partition> <offset>     where it starts reading an assigned partition (committed offset)
    REVOKE <ts> <epoch> <p,...>       onPartitionsRevoked (after committing what it consumed)
    (``topic`` ``re2:<pattern>`` subscribes with a SubscriptionPattern: the
    coordinator resolves the RE2 regex, KIP-848)
    LOST <ts> <epoch> <p,...>         onPartitionsLost
    REC <partition> <offset> <key>    a record consumed (the key carries the topic for a regex)
    COMMIT <ts> <partition> <offset>  after commitSync returned
    CLOSED <ts>                       after close() (SIGTERM leaves the group cleanly)
"""

from __future__ import annotations

import signal
import subprocess
import threading
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

SOURCE = r"""
import java.io.*;
import java.time.Duration;
import java.util.*;
import java.util.concurrent.atomic.AtomicBoolean;
import org.apache.kafka.clients.consumer.*;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.WakeupException;
import org.apache.kafka.common.serialization.StringDeserializer;

public class Member848 {
    static final PrintStream OUT = new PrintStream(new FileOutputStream(FileDescriptor.out), true);
    static synchronized void log(String s) { OUT.println(s); }
    static String parts(Collection<TopicPartition> ps) {
        StringBuilder b = new StringBuilder();
        for (TopicPartition tp : ps) { if (b.length() > 0) b.append(','); b.append(tp.partition()); }
        return b.length() == 0 ? "-" : b.toString();
    }

    public static void main(String[] a) throws Exception {
        String bs = a[0], topic = a[1], group = a[2], name = a[3], assignor = a.length > 4 ? a[4] : "";
        String instance = a.length > 5 ? a[5] : "";
        String protocol = a.length > 6 && !a[6].isEmpty() ? a[6] : "consumer";
        Properties c = new Properties();
        c.put("bootstrap.servers", bs);
        c.put("group.id", group);
        c.put("group.protocol", protocol);
        if (protocol.equals("classic")) {
            c.put("session.timeout.ms", "6000");
            c.put("heartbeat.interval.ms", "500");
        }
        c.put("client.id", name);
        c.put("enable.auto.commit", "false");
        c.put("auto.offset.reset", "earliest");
        c.put("max.poll.records", "50");
        c.put("key.deserializer", StringDeserializer.class.getName());
        c.put("value.deserializer", StringDeserializer.class.getName());
        if (!assignor.isEmpty()) c.put("group.remote.assignor", assignor);
        if (!instance.isEmpty()) c.put("group.instance.id", instance);
        KafkaConsumer<String, String> consumer = new KafkaConsumer<>(c);
        Map<TopicPartition, OffsetAndMetadata> pending = new HashMap<>();
        AtomicBoolean stop = new AtomicBoolean();
        Thread main = Thread.currentThread();
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            stop.set(true);
            consumer.wakeup();
            try { main.join(20000); } catch (InterruptedException e) { }
        }));
        ConsumerRebalanceListener listener = new ConsumerRebalanceListener() {
            public void onPartitionsRevoked(Collection<TopicPartition> ps) {
                commit(consumer, pending, ps);
                log("REVOKE " + System.currentTimeMillis() + " " + consumer.groupMetadata().generationId() + " " + parts(ps));
            }
            public void onPartitionsAssigned(Collection<TopicPartition> ps) {
                log("ASSIGN " + System.currentTimeMillis() + " " + consumer.groupMetadata().generationId() + " " + parts(ps));
                for (TopicPartition tp : ps)
                    log("POS " + System.currentTimeMillis() + " " + tp.partition() + " " + consumer.position(tp));
            }
            public void onPartitionsLost(Collection<TopicPartition> ps) {
                log("LOST " + System.currentTimeMillis() + " " + consumer.groupMetadata().generationId() + " " + parts(ps));
                for (TopicPartition tp : ps) pending.remove(tp);
            }
        };
        if (topic.startsWith("re2:")) consumer.subscribe(new SubscriptionPattern(topic.substring(4)), listener);
        else consumer.subscribe(List.of(topic), listener);
        try {
            while (!stop.get()) {
                ConsumerRecords<String, String> recs = consumer.poll(Duration.ofMillis(200));
                for (ConsumerRecord<String, String> r : recs) {
                    log("REC " + r.partition() + " " + r.offset() + " " + r.key());
                    pending.put(new TopicPartition(r.topic(), r.partition()), new OffsetAndMetadata(r.offset() + 1));
                }
                if (!recs.isEmpty()) commit(consumer, pending, null);
            }
        } catch (WakeupException e) {
            // SIGTERM
        } finally {
            try { commit(consumer, pending, null); } catch (Exception e) { }
            consumer.close(CloseOptions.timeout(Duration.ofSeconds(10)));
            log("CLOSED " + System.currentTimeMillis());
        }
    }

    static void commit(KafkaConsumer<String, String> consumer, Map<TopicPartition, OffsetAndMetadata> pending,
                       Collection<TopicPartition> only) {
        Map<TopicPartition, OffsetAndMetadata> out = new HashMap<>();
        for (Map.Entry<TopicPartition, OffsetAndMetadata> e : pending.entrySet())
            if (only == null || only.contains(e.getKey())) out.put(e.getKey(), e.getValue());
        if (out.isEmpty()) return;
        try {
            consumer.commitSync(out);
            for (Map.Entry<TopicPartition, OffsetAndMetadata> e : out.entrySet()) {
                log("COMMIT " + System.currentTimeMillis() + " " + e.getKey().partition() + " " + e.getValue().offset());
                pending.remove(e.getKey(), e.getValue());
            }
        } catch (Exception e) {
            log("COMMITFAIL " + System.currentTimeMillis() + " " + e.getClass().getSimpleName() + " " + e.getMessage());
        }
    }
}
"""


class Member:
    def __init__(
        self, java: tuple[str, str], bootstrap: str, name: str, log_dir: Path, topic: str, group: str,
        assignor: str = "", instance: str = "", protocol: str = "consumer",
    ) -> None:
        self.name = name
        self.path = log_dir / f"{name}.log"
        self.err = log_dir / f"{name}.err"
        cmd = [java[0], "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn", "-cp", java[1], "Member848",
               bootstrap, topic, group, name, assignor, instance, protocol]  # fmt: skip
        with self.path.open("w") as out, self.err.open("w") as err:
            self.proc = subprocess.Popen(cmd, stdout=out, stderr=err)
        self.killed_at: int | None = None

    def lines(self) -> list[list[str]]:
        return [ln.split(" ") for ln in self.path.read_text().splitlines() if ln]

    def has(self, kind: str, pred: Any = lambda _x: True) -> bool:
        return any(x[0] == kind and pred(x) for x in self.lines())

    def records(self) -> int:
        return sum(1 for x in self.lines() if x[0] == "REC")

    def term(self) -> None:
        self.proc.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.killed_at = int(time.time() * 1000)
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.term()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()


def wait_for(cond: Any, what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


class PacedProducer(threading.Thread):
    """Writes keyed records ``k<i>`` (partition = i mod ``partitions``) in flushed batches
    of 100 with ``pause_s`` between batches until :meth:`finish` is called, then
    ``tail_batches`` more batches, and stops (``done``; ``sent`` is then the total).
    :meth:`stop` (in a test's ``finally``) ends it at once without ``done``.

    The scenario, not the clock, decides when the producer ends: a fixed record count
    at a fixed pace ran out before the member churn and the kill on a slow box (three
    JVMs starting one after another), so the records no longer crossed the kill."""

    def __init__(
        self, bootstrap: str, topic: str, partitions: int, *, pause_s: float, tail_batches: int = 20,
        idempotent: bool = False,
    ) -> None:
        super().__init__(daemon=True)
        self.bootstrap, self.topic, self.partitions = bootstrap, topic, partitions
        self.pause_s, self.tail_batches, self.idempotent = pause_s, tail_batches, idempotent
        self._finishing, self._halt = threading.Event(), threading.Event()
        self.done = threading.Event()
        self.sent = 0
        self.error: BaseException | None = None

    def finish(self) -> None:
        self._finishing.set()

    def stop(self) -> None:
        self._halt.set()

    def run(self) -> None:
        from confluent_kafka import Producer

        try:
            conf: dict[str, Any] = {"bootstrap.servers": self.bootstrap, "linger.ms": 5}
            if self.idempotent:  # a produce lost with a killed agent is retried without a duplicate
                conf["enable.idempotence"] = True
            p = Producer(conf)
            tail = self.tail_batches
            while tail > 0 and not self._halt.is_set():
                for i in range(self.sent, self.sent + 100):
                    p.produce(self.topic, key=f"k{i}", value=b"v", partition=i % self.partitions)
                p.flush(30)
                self.sent += 100
                if self._finishing.is_set():
                    tail -= 1
                self._halt.wait(self.pause_s)  # pacing: records keep arriving while members come and go
            assert p.flush(30) == 0, "records left undelivered"
            if not self._halt.is_set():
                self.done.set()
        except BaseException as e:  # reported by the test
            self.error = e


def intervals(members: list[Member]) -> dict[int, list[tuple[int, int, str]]]:
    """partition -> [(from ms, to ms, member)] of ownership, from the callbacks.

    The Java consumer may revoke or lose a partition whose onPartitionsAssigned
    callback never ran (the member was fenced or its target changed again while
    the callback was queued); such a partition was never fetchable, so it is no
    ownership span. What must hold is that a member consumes (REC) a partition
    only between its ASSIGN and its REVOKE/LOST, which is asserted here."""
    out: dict[int, list[tuple[int, int, str]]] = defaultdict(list)
    for m in members:
        start: dict[int, int] = {}
        end_of_life = m.killed_at
        for x in m.lines():
            if x[0] == "ASSIGN" and x[3] != "-":
                for p in map(int, x[3].split(",")):
                    start[p] = int(x[1])
            elif x[0] in ("REVOKE", "LOST") and x[3] != "-":
                for p in map(int, x[3].split(",")):
                    t0 = start.pop(p, None)
                    if t0 is not None:
                        out[p].append((t0, int(x[1]), m.name))
            elif x[0] == "REC":
                assert int(x[1]) in start, f"{m.name} consumed partition {x[1]} it did not own: {x}"
            elif x[0] == "CLOSED":
                end_of_life = int(x[1])
        for p, t0 in start.items():
            out[p].append((t0, end_of_life or 2**62, m.name))
    return out


def check_resume(members: list[Member], killed: Member | None) -> int:
    """Every POS (start of a partition) equals the last logged commit of that
    partition before it; after ``killed``'s last commit (its newest commit may
    have reached the group unlogged) at or after it, within what it consumed.
    Returns how many starts were checked."""
    commits: list[tuple[int, int, int, str]] = []  # ts, partition, offset, member
    for m in members:
        commits += [(int(x[1]), int(x[2]), int(x[3]), m.name) for x in m.lines() if x[0] == "COMMIT"]
    consumed_by_killed: dict[int, int] = defaultdict(int)
    for x in killed.lines() if killed is not None else []:
        if x[0] == "REC":
            consumed_by_killed[int(x[1])] = max(consumed_by_killed[int(x[1])], int(x[2]) + 1)
    killed_name = killed.name if killed is not None else None
    checked = 0
    for m in members:
        for x in m.lines():
            if x[0] != "POS":
                continue
            ts, p, pos = int(x[1]), int(x[2]), int(x[3])
            before = [c for c in commits if c[1] == p and c[0] <= ts]
            last = max(before, default=(0, p, 0, ""))
            if last[3] == killed_name or (before == [] and consumed_by_killed[p]):
                assert last[2] <= pos <= max(consumed_by_killed[p], last[2]), (m.name, x, last)
            else:
                assert pos == last[2], f"{m.name} started partition {p} at {pos}, last commit {last}"
            checked += 1
    return checked


ADMIN_SOURCE = r"""
import java.util.*;
import org.apache.kafka.clients.admin.*;
import org.apache.kafka.common.TopicPartition;

public class Admin848 {
    public static void main(String[] a) throws Exception {
        try (Admin admin = Admin.create(Map.of("bootstrap.servers", a[0]))) {
            ConsumerGroupDescription d = admin.describeConsumerGroups(List.of(a[1])).all().get().get(a[1]);
            System.out.println("DESCRIBE " + d.type() + " " + d.groupState() + " " + d.partitionAssignor()
                + " " + d.members().size() + " " + d.groupEpoch().orElse(-1) + " " + d.targetAssignmentEpoch().orElse(-1));
            for (MemberDescription m : d.members()) {
                List<String> tps = new ArrayList<>();
                for (TopicPartition tp : m.assignment().topicPartitions()) tps.add(tp.topic() + "-" + tp.partition());
                Collections.sort(tps);
                System.out.println("MEMBER " + m.clientId() + " " + m.memberEpoch().orElse(-1) + " " + String.join(",", tps));
            }
            for (GroupListing g : admin.listGroups().all().get())
                System.out.println("LISTED " + g.groupId() + " " + g.type().map(Object::toString).orElse("?")
                    + " " + g.groupState().map(Object::toString).orElse("?"));
        }
    }
}
"""
