"""The Java 4.1 KafkaConsumer (``group.protocol=consumer``) used by the KIP-848 tests.

One process is one group member. It logs, one line each, with wall-clock
milliseconds and its member epoch (``groupMetadata().generationId()`` is the
member epoch under the consumer protocol):

    ASSIGN <ts> <epoch> <p,p,...>     onPartitionsAssigned (after the coordinator gave them)
    POS <ts> <partition> <offset>     where it starts reading an assigned partition (committed offset)
    REVOKE <ts> <epoch> <p,...>       onPartitionsRevoked (after committing what it consumed)
    LOST <ts> <epoch> <p,...>         onPartitionsLost
    REC <partition> <offset> <key>    a record consumed
    COMMIT <ts> <partition> <offset>  after commitSync returned
    CLOSED <ts>                       after close() (SIGTERM leaves the group cleanly)
"""

from __future__ import annotations

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
        Properties c = new Properties();
        c.put("bootstrap.servers", bs);
        c.put("group.id", group);
        c.put("group.protocol", "consumer");
        c.put("client.id", name);
        c.put("enable.auto.commit", "false");
        c.put("auto.offset.reset", "earliest");
        c.put("max.poll.records", "50");
        c.put("key.deserializer", StringDeserializer.class.getName());
        c.put("value.deserializer", StringDeserializer.class.getName());
        if (!assignor.isEmpty()) c.put("group.remote.assignor", assignor);
        KafkaConsumer<String, String> consumer = new KafkaConsumer<>(c);
        Map<TopicPartition, OffsetAndMetadata> pending = new HashMap<>();
        AtomicBoolean stop = new AtomicBoolean();
        Thread main = Thread.currentThread();
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            stop.set(true);
            consumer.wakeup();
            try { main.join(20000); } catch (InterruptedException e) { }
        }));
        consumer.subscribe(List.of(topic), new ConsumerRebalanceListener() {
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
        });
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
