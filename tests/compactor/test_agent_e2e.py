"""The compactor against a real agent and confluent-kafka clients: merges while
producing and consuming, retention and DeleteRecords, compacted topics."""

from __future__ import annotations

import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from agent.fetch.leases import TTL_MS as FETCH_LEASE_TTL_MS
from agent.txn.markers import ABORT, COMMIT, parse_marker
from compactor.config import CompactorConfig
from kafka_protocol.messages import FetchRequest, FetchResponse
from kafka_protocol.records import iter_batches
from metastore.base import system_clock_ms
from tests.compactor.agent_helpers import SyncCompactor, consume_all, produce
from tests.fixtures.java import SLF4J_SIMPLE, compile_java, java_binary, maven_classpath
from tests.interop._raw import RawConn

pytestmark = [pytest.mark.slow, pytest.mark.interop]


def create_topic(bootstrap: str, name: str, partitions: int = 1, **config: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    fut = admin.create_topics([NewTopic(name, partitions, 1, config=config)])[name]
    fut.result(30)


def earliest(bootstrap: str, topic: str, partition: int = 0) -> int:
    from confluent_kafka import Consumer

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "wm"})
    try:
        lo, _hi = c.get_watermark_offsets(
            TopicPartition(topic, partition), timeout=10, cached=False
        )
        return int(lo)
    finally:
        c.close()


def test_merge_while_producing_and_consuming(agent_factory: Callable[..., Any]) -> None:
    # Without write-through: the writer would serve its fresh objects from its cache, and the
    # replay before compaction, led to it by the ring, would count no GET at all.
    agent = agent_factory(flush_interval_ms=5, fetch_cache_writes=False)
    topic, parts = "busy", 2
    create_topic(agent.bootstrap, topic, parts)
    chunks = [
        [(i % parts, f"k{c}-{i}".encode(), f"v{c}-{i}".encode() * (1 + i % 5)) for i in range(40)]
        for c in range(80)
    ]
    first, second = chunks[:40], chunks[40:]
    for rows in first:  # one flush per chunk: ~one small object each
        produce(agent.bootstrap, topic, rows)
    grace_ms = 1_000
    skew_ms = 0  # the compactor's clock runs this far ahead of the wall clock

    def compactor_now_ms() -> int:
        return system_clock_ms() + skew_ms

    comp = SyncCompactor(
        agent,
        CompactorConfig(
            l0_trigger=8,
            l1_trigger=4,
            max_inputs=8,
            delete_grace_ms=grace_ms,
            orphan_grace_ms=60_000,
        ),
        now_ms=compactor_now_ms,
    )
    try:
        l0_before = comp.object_count(0)
        assert l0_before >= 35
        # The agents share a metastore, so they form a ring and a consumer may be led to
        # any of them: count object-store GETs (cache loads) over all of them, with the
        # peer cache off so each GET is counted once where it happens.
        cold = agent_factory(metastore=comp.metastore_url, objects=comp.objects_url, peer_cache=False)

        def loads(*agents: Any) -> int:
            return sum(a.broker.cache.stats.loads for a in agents)

        n1 = sum(len(c) for c in first)
        start = loads(agent, cold)
        got = consume_all(cold.bootstrap, topic, parts, n1)
        gets_before = loads(agent, cold) - start
        assert len(got) == n1

        # Produce the second half while the compactor runs and a consumer reads from 0.
        total = n1 + sum(len(c) for c in second)
        consumed: list[Any] = []
        reader = threading.Thread(
            target=lambda: consumed.extend(
                consume_all(agent.bootstrap, topic, parts, total, timeout=120)
            )
        )
        writer = threading.Thread(
            target=lambda: [produce(agent.bootstrap, topic, rows) for rows in second]
        )
        reader.start()
        writer.start()
        passes = 0
        while writer.is_alive() or passes < 2:
            comp.run_pass()
            passes += 1
            time.sleep(0.05)
        writer.join()
        for _ in range(3):
            comp.run_pass(force=True)
        # Past the grace period and the agents' fetch read leases: replaced objects go.
        skew_ms = grace_ms + FETCH_LEASE_TTL_MS + 100
        s = comp.run_pass(force=True)
        reader.join()
        produced = {(p, k, v) for rows in chunks for p, k, v in rows}

        def check(records: list[Any]) -> None:
            assert len(records) == total
            for p in range(parts):
                offs = [o for pp, o, _, _ in records if pp == p]
                assert offs == list(range(len(offs)))  # every offset exactly once, in order
            assert {(p, k, v) for p, _, k, v in records} == produced

        check(consumed)
        assert comp.object_count(0) <= 1 and comp.object_count(2) >= 1
        cold2 = agent_factory(metastore=comp.metastore_url, objects=comp.objects_url, peer_cache=False)
        start = loads(agent, cold, cold2)
        after = consume_all(cold2.bootstrap, topic, parts, total)
        check(after)
        gets_after = loads(agent, cold, cold2) - start
        print(
            f"\nfull replay GETs: before {gets_before} ({l0_before} L0 objects, {n1} records); "
            f"after {gets_after} ({total} records); last pass: {s.lines()}"
        )
        assert gets_after < gets_before / 4
    finally:
        comp.close()


def test_retention_and_delete_records_move_earliest(agent_factory: Callable[..., Any]) -> None:
    agent = agent_factory(flush_interval_ms=5)
    create_topic(agent.bootstrap, "ret", 1, **{"retention.ms": "600000"})
    old = int(time.time() * 1000) - 3_600_000
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": agent.bootstrap, "linger.ms": 0})
    for i in range(30):
        p.produce("ret", b"old-%d" % i, partition=0, timestamp=old + i)
        p.flush(10)
    for i in range(30):
        p.produce("ret", b"new-%d" % i, partition=0)
        p.flush(10)
    # The compactor (and the metastore it uses) run past the fetch read leases the
    # consumers below take, so retired objects go at once (grace 0).
    comp = SyncCompactor(
        agent,
        CompactorConfig(delete_grace_ms=0, orphan_grace_ms=60_000),
        now_ms=lambda: system_clock_ms() + FETCH_LEASE_TTL_MS + 100,
    )
    try:
        assert earliest(agent.bootstrap, "ret") == 0
        s = comp.run_pass()
        assert s.retention_partitions == 1 and s.retention_batches == 30
        assert earliest(agent.bootstrap, "ret") == 30
        got = consume_all(agent.bootstrap, "ret", 1, 30)
        assert [v for _, _, _, v in got] == [b"new-%d" % i for i in range(30)]
        assert s.objects_deleted == 30  # grace 0: retired objects go in the same pass

        admin = AdminClient({"bootstrap.servers": agent.bootstrap})
        fut = admin.delete_records([TopicPartition("ret", 0, 45)])
        next(iter(fut.values())).result(10)
        assert earliest(agent.bootstrap, "ret") == 45
        s = comp.run_pass()
        assert s.retention_batches == 15 and s.objects_deleted == 15
        got = consume_all(agent.bootstrap, "ret", 1, 15)
        assert [o for _, o, _, _ in got] == list(range(45, 60))

        # retention.bytes: keep at most ~5 batches' worth.
        from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource

        size = (
            comp.run(
                comp.meta.find_batches(comp.run(comp.meta.get_topic("ret")).id, 0, 45, 1 << 20)
            )
            .batches[0]
            .byte_len
        )
        res = ConfigResource(
            "topic",
            "ret",
            incremental_configs=[
                ConfigEntry(
                    "retention.bytes", str(size * 5), incremental_operation=AlterConfigOpType.SET
                )
            ],
        )
        next(iter(admin.incremental_alter_configs([res]).values())).result(10)
        comp.run_pass()
        assert earliest(agent.bootstrap, "ret") == 55
    finally:
        comp.close()


def test_compacted_topic_keeps_latest_per_key(agent_factory: Callable[..., Any]) -> None:
    agent = agent_factory(flush_interval_ms=5)
    create_topic(
        agent.bootstrap, "cmp", 1, **{"cleanup.policy": "compact", "delete.retention.ms": "0"}
    )
    for version in range(5):
        rows = [(0, f"k{k}".encode(), f"v{version}-{k}".encode()) for k in range(10)]
        produce(agent.bootstrap, "cmp", rows[:5])
        produce(agent.bootstrap, "cmp", rows[5:])
    produce(agent.bootstrap, "cmp", [(0, b"k0", None)])  # tombstone
    produce(agent.bootstrap, "cmp", [(0, b"k1", b"final")])
    comp = SyncCompactor(agent, CompactorConfig(l0_trigger=1, l1_trigger=1, delete_grace_ms=0))
    try:
        s = comp.run_pass(force=True)
        assert s.phases["merge L1->L2"].records_dropped > 0
        got = consume_all(agent.bootstrap, "cmp", 1, 9)
        latest = {k: v for _, _, k, v in got}
        assert len(got) == 9 and len(latest) == 9  # one record per key, k0 deleted
        assert latest[b"k1"] == b"final"
        assert all(latest[f"k{k}".encode()] == f"v4-{k}".encode() for k in range(2, 10))
        offsets = [o for _, o, _, _ in got]
        assert offsets == sorted(offsets) and offsets[-1] == 51  # offsets unchanged
    finally:
        comp.close()


def test_fetch_read_leases_hold_objects_consumers_just_read(
    agent_factory: Callable[..., Any],
) -> None:
    """The agent leases what its fetches looked up: a forced compaction with grace 0
    keeps those objects until the fetch lease ends, then collects them."""
    agent = agent_factory(flush_interval_ms=5)
    create_topic(agent.bootstrap, "hot", 1)
    for c in range(6):
        produce(agent.bootstrap, "hot", [(0, b"k%d" % c, b"v%d" % c)])
    assert len(consume_all(agent.bootstrap, "hot", 1, 6)) == 6
    reader = agent.broker  # leases are flushed within a second of the lookups
    deadline = time.monotonic() + 30
    while not any(
        x.lease_id.startswith("agent-") for x in agent.call(reader.meta.list_read_leases())
    ):
        assert time.monotonic() < deadline, "no fetch lease registered"
        time.sleep(0.05)
    skew = [0]
    comp = SyncCompactor(
        agent,
        CompactorConfig(l0_trigger=1, delete_grace_ms=0),
        now_ms=lambda: system_clock_ms() + skew[0],
    )
    try:
        s = comp.run_pass(force=True)
        assert s.objects_leased >= 6 and s.objects_deleted < s.objects_retired
        skew[0] = FETCH_LEASE_TTL_MS + 100
        s = comp.run_pass(force=True)
        assert s.objects_leased == 0 and s.objects_deleted >= 6
        assert [v for _, _, _, v in consume_all(agent.bootstrap, "hot", 1, 6)] == [
            b"v%d" % c for c in range(6)
        ]
    finally:
        comp.close()


def test_parquet_conversion_keeps_transactions(agent_factory: Callable[..., Any]) -> None:
    """Converting a partition with committed and aborted transactions to Parquet
    changes nothing any reader sees: transactional batches and their markers stay
    segment bytes, read_committed consumers and Spark still skip the aborted ones,
    and the Parquet rows hold non-transactional records only."""
    from confluent_kafka import Consumer, Producer

    from spark_source.options import parse_options
    from spark_source.source import FloeBatchReader
    from tests.spark_source.test_unit import read_all

    agent = agent_factory(flush_interval_ms=5)
    bs = agent.bootstrap
    create_topic(bs, "txpq", 1, **{"floe.parquet.enable": "true"})
    plain = Producer({"bootstrap.servers": bs})
    tx = Producer({"bootstrap.servers": bs, "transactional.id": "txpq", "linger.ms": 5})
    tx.init_transactions(20)
    expected = []
    for round_ in range(4):
        plain.produce("txpq", b"p%d" % round_, partition=0)
        plain.flush(10)
        expected.append(b"p%d" % round_)
        tx.begin_transaction()
        tx.produce("txpq", b"t%d" % round_, partition=0)
        if round_ % 2:
            tx.flush(10)
            tx.abort_transaction(20)
        else:
            tx.commit_transaction(20)
            expected.append(b"t%d" % round_)

    def committed_view() -> list[bytes]:
        c = Consumer({"bootstrap.servers": bs, "group.id": f"g{time.monotonic_ns()}", "auto.offset.reset": "earliest", "isolation.level": "read_committed"})
        c.assign([TopicPartition("txpq", 0, 0)])
        out: list[bytes] = []
        deadline = time.monotonic() + 20
        while len(out) < len(expected) and time.monotonic() < deadline:
            out += [m.value() for m in c.consume(100, 0.3) if not m.error()]
        c.close()
        return out

    before = committed_view()
    assert before == expected
    comp = SyncCompactor(
        agent, CompactorConfig(l0_trigger=1, l1_trigger=1, delete_grace_ms=0, parquet_min_level=0)
    )
    try:
        s = comp.run_pass(force=True)
        assert s.phases["parquet"].committed >= 1, s.phases
    finally:
        comp.close()
    assert committed_view() == expected
    opts = parse_options(
        {"kafka.bootstrap.servers": bs, "subscribe": "txpq", "kafka.isolation.level": "read_committed"},
        streaming=False,
    )
    rows, _ = read_all(FloeBatchReader(opts))
    assert sorted(r[4] for r in rows) == sorted(expected)


def _read(bootstrap: str, topic: str, isolation: str, timeout: float = 30) -> list[tuple[int, bytes | None, bytes | None]]:
    """(offset, key, value) of everything readable under ``isolation``, to the end."""
    from confluent_kafka import Consumer

    c = Consumer({
        "bootstrap.servers": bootstrap, "group.id": "txn-compact", "enable.auto.commit": False,
        "isolation.level": isolation, "enable.partition.eof": True, "fetch.wait.max.ms": 50,
    })  # fmt: skip
    try:
        c.assign([TopicPartition(topic, 0, 0)])
        out: list[tuple[int, bytes | None, bytes | None]] = []
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            m = c.poll(0.2)
            if m is None:
                continue
            if m.error() is not None:
                if m.error().code() == -191:  # _PARTITION_EOF: at the end
                    return out
                continue
            out.append((m.offset(), m.key(), m.value()))
        raise AssertionError(f"no end of {topic} under {isolation}: {out}")
    finally:
        c.close()


# The Java 4.1 consumer under read_committed: partition 0 of a topic from the start
# to its end (the last stable offset), every record as "REC offset key=value".
JAVA_RC_READ = r"""
import java.time.Duration;
import java.util.*;
import org.apache.kafka.clients.consumer.*;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.StringDeserializer;

public class RcRead {
    public static void main(String[] a) {
        Properties c = new Properties();
        c.put("bootstrap.servers", a[0]);
        c.put("isolation.level", "read_committed");
        c.put("enable.auto.commit", "false");
        c.put("key.deserializer", StringDeserializer.class.getName());
        c.put("value.deserializer", StringDeserializer.class.getName());
        TopicPartition tp = new TopicPartition(a[1], 0);
        try (KafkaConsumer<String, String> cons = new KafkaConsumer<>(c)) {
            cons.assign(List.of(tp));
            cons.seekToBeginning(List.of(tp));
            long end = cons.endOffsets(List.of(tp)).get(tp);
            long deadline = System.currentTimeMillis() + 60000;
            while (cons.position(tp) < end && System.currentTimeMillis() < deadline)
                for (ConsumerRecord<String, String> r : cons.poll(Duration.ofMillis(200)))
                    System.out.println("REC " + r.offset() + " " + r.key() + "=" + r.value());
            System.out.println("END " + cons.position(tp) + " " + end);
        }
    }
}
"""


@pytest.fixture(scope="module")
def java_rc_read(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    cp = maven_classpath(["org.apache.kafka:kafka-clients:4.1.0", SLF4J_SIMPLE])
    run_cp = compile_java(JAVA_RC_READ, cp, Path(tmp_path_factory.mktemp("java-rc-read")))
    return [java_binary(), "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn", "-cp", run_cp, "RcRead"]


def _java_read_committed(cmd: list[str], bootstrap: str, topic: str) -> list[tuple[int, str, str]]:
    res = subprocess.run([*cmd, bootstrap, topic], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr[-4000:]
    lines = res.stdout.splitlines()
    assert lines and lines[-1].startswith("END "), res.stdout + res.stderr[-4000:]
    pos, end = lines[-1].removeprefix("END ").split()
    assert pos == end, res.stdout  # read to the end (the last stable offset)
    out = []
    for line in lines[:-1]:
        offset, kv = line.removeprefix("REC ").split(" ", 1)
        key, value = kv.split("=", 1)
        out.append((int(offset), key, value))
    return out


def _markers(port: int, topic: str) -> list[tuple[int, int]]:
    """(offset, ABORT/COMMIT) of every transaction marker in partition 0, from a raw
    read_uncommitted Fetch (clients never show control batches)."""
    fp = FetchRequest.FetchTopic.FetchPartition(partition=0, fetch_offset=0, partition_max_bytes=1 << 20)
    req = FetchRequest(
        replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=1 << 20, isolation_level=0,
        topics=[FetchRequest.FetchTopic(topic=topic, partitions=[fp])],
    )  # fmt: skip
    with RawConn(port) as c:
        part = c.request(req, FetchResponse, 11).responses[0].partitions[0]
    assert part.error_code == 0, part
    out = []
    for b in iter_batches(bytes(part.records or b""), allow_partial_tail=True):
        if b.is_control:
            out.extend((r.offset, parse_marker(r.key)) for r in b.records())
    return out


def test_compaction_with_transactions(agent_factory: Callable[..., Any], java_rc_read: list[str]) -> None:
    """Key compaction never lets an aborted value hide (or replace) a committed one,
    drops aborted batches, leaves an open transaction's batches alone, keeps the
    markers; read_committed and read_uncommitted readers see the right values after,
    the Java 4.1 consumer included (it skips a producer's batches from an aborted
    transaction's first offset until that producer's ABORT marker: a marker dropped
    while its transaction is still listed would hide the producer's later commits)."""
    from confluent_kafka import Producer

    agent = agent_factory(flush_interval_ms=5)
    create_topic(agent.bootstrap, "tcmp", 1, **{"cleanup.policy": "compact", "delete.retention.ms": "0"})
    produce(agent.bootstrap, "tcmp", [(0, b"k%d" % k, b"plain-%d" % k) for k in range(4)])
    p = Producer({"bootstrap.servers": agent.bootstrap, "transactional.id": "tcmp-tx", "linger.ms": 0})
    p.init_transactions(30)
    p.begin_transaction()
    for k in range(2):
        p.produce("tcmp", b"committed-%d" % k, key=b"k%d" % k, partition=0)
    p.commit_transaction(30)
    p.begin_transaction()
    for k in range(4):
        p.produce("tcmp", b"aborted-%d" % k, key=b"k%d" % k, partition=0)
    p.flush(30)
    p.abort_transaction(30)
    p.begin_transaction()
    p.produce("tcmp", b"open-3", key=b"k3", partition=0)
    p.flush(30)  # left open across the compaction
    port = int(agent.bootstrap.rsplit(":", 1)[1])
    markers = _markers(port, "tcmp")
    assert [kind for _, kind in markers] == [COMMIT, ABORT], markers
    comp = SyncCompactor(agent, CompactorConfig(l0_trigger=1, l1_trigger=1, delete_grace_ms=0))
    try:
        s = comp.run_pass(force=True)
        assert s.phases["merge L1->L2"].records_dropped >= 4 + 2  # the aborted ones, k0/k1 plain
        rc = {k: v for _, k, v in _read(agent.bootstrap, "tcmp", "read_committed")}
        assert rc == {b"k0": b"committed-0", b"k1": b"committed-1", b"k2": b"plain-2", b"k3": b"plain-3"}
        ru = _read(agent.bootstrap, "tcmp", "read_uncommitted")
        assert not [v for _, _, v in ru if v is not None and v.startswith(b"aborted")], ru
        assert {k: v for _, k, v in ru}[b"k3"] == b"open-3"
        p.commit_transaction(30)
        rc = {k: v for _, k, v in _read(agent.bootstrap, "tcmp", "read_committed")}
        assert rc[b"k3"] == b"open-3"
        # The transaction is stable now: k3's plain value goes. A pass may come before
        # the commit's marker is in an object it merges; compaction converges within a few.
        for _ in range(3):
            comp.run_pass(force=True)
            after = _read(agent.bootstrap, "tcmp", "read_committed")
            if len(after) == 4:
                break
        assert {k: v for _, k, v in after} == {
            b"k0": b"committed-0", b"k1": b"committed-1", b"k2": b"plain-2", b"k3": b"open-3"
        }
        assert len(after) == 4
        # Every marker survived the passes, at its offset (only retention or
        # DeleteRecords remove markers, with the aborted ranges).
        final = _markers(port, "tcmp")
        assert final[:2] == markers and [kind for _, kind in final] == [COMMIT, ABORT, COMMIT], final
        java = _java_read_committed(java_rc_read, agent.bootstrap, "tcmp")
        assert [(o, k.encode(), v.encode()) for o, k, v in java] == after, java
    finally:
        comp.close()
