"""Online migration with real Java 4.1 consumers (issue 16): a rolling upgrade
from ``group.protocol=classic`` to ``consumer`` and a rolling downgrade back.

Three members (separate JVMs, :class:`tests.interop.kip848_member.Member`)
consume a 6-partition topic while a producer keeps writing; each is restarted
in turn with the other protocol, so the one group holds classic and
consumer-protocol members at once (the classic ones driven by the consumer-group
coordinator through JoinGroup/SyncGroup/Heartbeat REBALANCE_IN_PROGRESS), and
after the last restart it is of the other type (the Java Admin's
describeConsumerGroups says so). Checked from the members' own logs: every
record consumed at least once; no partition owned by two members at once (the
intervals between onPartitionsAssigned and onPartitionsRevoked/Lost never
overlap); each member starts a partition exactly at the last committed offset;
committed offsets end at the high watermarks and a fresh member resumes there.
The upgrade runs on SQLite + file, the downgrade on Postgres + moto S3 (the
group state they store is checked on both by tests/metastore/test_consumer_groups.py,
and an online classic-to-consumer upgrade on Postgres + S3 through a coordinator
kill by tests/cluster/test_kip848_coordinator_kill.py).
"""

from __future__ import annotations

import itertools
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka import TopicPartition as TP
from confluent_kafka.admin import AdminClient, NewTopic

from tests.fixtures.agent_process import on_backend
from tests.fixtures.java import SLF4J_SIMPLE, compile_java, java_binary, maven_classpath
from tests.interop.kip848_member import (
    ADMIN_SOURCE,
    SOURCE,
    Member,
    check_resume,
    intervals,
    wait_for,
)

pytestmark = [pytest.mark.interop, pytest.mark.slow, pytest.mark.timeout(300)]

PARTITIONS = 6


@pytest.fixture(scope="module")
def java_cp(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str, str]:
    """(java, member classpath, admin classpath)."""
    cp = maven_classpath(["org.apache.kafka:kafka-clients:4.1.0", SLF4J_SIMPLE])
    out = tmp_path_factory.mktemp("migration")
    return java_binary(), compile_java(SOURCE, cp, out), compile_java(ADMIN_SOURCE, cp, out)


class Producing(threading.Thread):
    """Writes keyed records (partition = i mod 6) until stopped; ``sent`` counts the acknowledged."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        super().__init__(daemon=True)
        self.bootstrap, self.topic = bootstrap, topic
        self.stop_event = threading.Event()
        self.sent = 0
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            p = Producer({"bootstrap.servers": self.bootstrap, "linger.ms": 5})
            i = 0
            while not self.stop_event.is_set():
                for _ in range(50):
                    p.produce(self.topic, key=f"k{i}", value=b"v", partition=i % PARTITIONS)
                    i += 1
                assert p.flush(30) == 0
                self.sent = i
                self.stop_event.wait(0.25)  # pacing: records keep arriving during every restart
        except BaseException as e:  # reported by the test
            self.error = e


def describe(java: tuple[str, str, str], bs: str, group: str) -> str:
    res = subprocess.run([java[0], "-cp", java[2], "Admin848", bs, group], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr[-3000:]
    return res.stdout


def rolling(agent: Any, java: tuple[str, str, str], tmp_path: Path, start: str, end: str) -> None:
    bs = agent.bootstrap
    topic, group = f"roll-{start}-{end}", f"roll-{start}-{end}-group"
    admin = AdminClient({"bootstrap.servers": bs})
    admin.create_topics([NewTopic(topic, PARTITIONS, 1)])[topic].result(30)
    member_cp = (java[0], java[1])
    producer = Producing(bs, topic)
    producer.start()
    t0 = time.monotonic()
    olds = [Member(member_cp, bs, f"{start}{i}", tmp_path, topic, group, protocol=start) for i in (1, 2, 3)]
    members = list(olds)
    try:
        wait_for(lambda: all(m.records() > 0 for m in olds), f"three {start} members consuming", 90)
        for i, old in enumerate(olds, 1):
            old.term()
            wait_for(lambda o=old: o.has("CLOSED"), f"{old.name} leaving", 60)
            new = Member(member_cp, bs, f"{end}{i}", tmp_path, topic, group, protocol=end)
            members.append(new)
            wait_for(lambda n=new: n.has("ASSIGN", lambda x: x[3] != "-"), f"{new.name} assigned partitions", 90)
        news = members[3:]
        before = producer.sent
        wait_for(lambda: producer.sent > before + 100, "records produced after the last restart", 30)
        kind = "Consumer" if end == "consumer" else "Classic"
        out = ""

        def settled() -> bool:
            nonlocal out
            out = describe(java, bs, group)
            return f"DESCRIBE {kind} Stable" in out and f"LISTED {group} {kind} Stable" in out

        try:
            wait_for(settled, f"the group to be a Stable {kind} group", 60)
        except AssertionError as e:
            raise AssertionError(f"{e}; Admin848 printed:\n{out}") from None
        producer.stop_event.set()
        producer.join(60)
        assert producer.error is None, producer.error
        total = producer.sent

        def consumed() -> set[str]:
            return {x[3] for m in members for x in m.lines() if x[0] == "REC"}

        wait_for(lambda: len(consumed()) == total, "every record consumed", 90)
        probe = Consumer({"bootstrap.servers": bs, "group.id": "probe"})
        hw = {p: probe.get_watermark_offsets(TP(topic, p), timeout=10)[1] for p in range(PARTITIONS)}
        probe.close()
        assert sum(hw.values()) == total
        for m in news:
            m.stop()
        reader = Consumer({"bootstrap.servers": bs, "group.id": group})
        committed = {tp.partition: tp.offset for tp in reader.committed([TP(topic, p) for p in range(PARTITIONS)], timeout=10)}
        reader.close()
        assert committed == hw, (committed, hw)
        fresh = Member(member_cp, bs, f"{end}-fresh", tmp_path, topic, group, protocol=end)
        members.append(fresh)
        wait_for(lambda: sum(1 for x in fresh.lines() if x[0] == "POS") == PARTITIONS, "the fresh member's positions", 60)
        assert {int(x[2]): int(x[3]) for x in fresh.lines() if x[0] == "POS"} == hw
        fresh.stop()
    finally:
        producer.stop_event.set()
        for m in members:
            if m.proc.poll() is None:
                m.proc.kill()
    elapsed = time.monotonic() - t0
    own = intervals(members)
    for p, spans in own.items():
        spans.sort()
        for (a0, a1, am), (b0, b1, bm) in itertools.pairwise(spans):
            assert a1 <= b0, f"partition {p} owned by {am} [{a0},{a1}] and {bm} [{b0},{b1}] at once"
    checked = check_resume(members, None)
    deliveries = sum(m.records() for m in members)
    fails = [x for m in members for x in m.lines() if x[0] == "COMMITFAIL"]
    print(
        f"rolling {start}->{end}: {total} records, {deliveries} deliveries ({deliveries - total} redelivered), "
        f"{sum(len(s) for s in own.values())} ownership spans non-overlapping, {checked} resume points exact, "
        f"commit failures {len(fails)}, {elapsed:.1f} s\n{out}"
    )


@on_backend("sqlite-file")
def test_java_rolling_upgrade_classic_to_consumer(agent_process_factory, java_cp, tmp_path: Path) -> None:
    agent = agent_process_factory(consumer_group_session_timeout_ms=6000, consumer_group_heartbeat_interval_ms=500)
    rolling(agent, java_cp, tmp_path, "classic", "consumer")


@on_backend("postgres-s3")
def test_java_rolling_downgrade_consumer_to_classic(agent_process_factory, java_cp, tmp_path: Path) -> None:
    agent = agent_process_factory(consumer_group_session_timeout_ms=6000, consumer_group_heartbeat_interval_ms=500)
    rolling(agent, java_cp, tmp_path, "consumer", "classic")
