"""The Java 4.1 KafkaConsumer with ``group.protocol=consumer`` (KIP-848) against Floe.

Three members (separate JVMs, :mod:`tests.interop.kip848_member`) consume a
6-partition topic while a producer writes records (until 2,000 after the kill);
one member leaves cleanly (SIGTERM), a fourth joins, one is killed with SIGKILL. Checked from the
members' own logs: every record consumed at least once; each partition owned by
one member at a time (the intervals between onPartitionsAssigned and
onPartitionsRevoked/Lost, or the kill, never overlap); each member starts a
partition exactly at the last committed offset (the killed member's last commit
may be unlogged: then at or after it); committed offsets end at the high
watermarks, and a fresh member resumes there. The agent runs as its own process
(session timeout 6 s). Each scenario runs on one back end: join/leave/crash on
SQLite + file, the regex and static-member scenarios on Postgres + moto S3 (the
group state they store is checked on both by tests/metastore/test_consumer_groups.py,
and KIP-848 members on Postgres + S3 through a coordinator kill by
tests/cluster/test_kip848_coordinator_kill.py).
"""

from __future__ import annotations

import itertools
import subprocess
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
    PacedProducer,
    check_resume,
    intervals,
    wait_for,
)

pytestmark = [pytest.mark.interop, pytest.mark.slow, pytest.mark.timeout(400)]

PARTITIONS = 6
TOPIC, GROUP = "kip848", "kip848-group"


@pytest.fixture(scope="module")
def member_cp(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    cp = maven_classpath(["org.apache.kafka:kafka-clients:4.1.0", SLF4J_SIMPLE])
    return java_binary(), compile_java(SOURCE, cp, tmp_path_factory.mktemp("kip848"))


@on_backend("sqlite-file")
def test_java_consumer_protocol_join_leave_crash(agent_process_factory, member_cp, tmp_path: Path) -> None:
    agent = agent_process_factory(consumer_group_session_timeout_ms=6000, consumer_group_heartbeat_interval_ms=500)
    bs = agent.bootstrap
    admin = AdminClient({"bootstrap.servers": bs})
    admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1)])[TOPIC].result(30)
    producer = PacedProducer(bs, TOPIC, PARTITIONS, pause_s=0.3)  # ~330 records/s until after the kill
    producer.start()
    t0 = time.monotonic()
    m1, m2, m3 = (Member(member_cp, bs, f"m{i}", tmp_path, TOPIC, GROUP) for i in (1, 2, 3))
    members = [m1, m2, m3]
    try:
        wait_for(lambda: all(m.records() > 0 for m in members), "three members consuming", 90)
        m3.term()
        wait_for(lambda: m3.has("CLOSED"), "m3 leaving")
        m4 = Member(member_cp, bs, "m4", tmp_path, TOPIC, GROUP)
        members.append(m4)
        wait_for(lambda: m4.has("ASSIGN", lambda x: x[3] != "-"), "m4 assigned partitions")
        assert not producer.done.is_set(), "the producer finished too early for this scenario"
        m2.kill()
        producer.finish()  # 2,000 more records after the kill, then it stops
        producer.join(120)
        assert producer.done.is_set() and producer.error is None, producer.error
        total = producer.sent

        def consumed() -> set[str]:
            return {x[3] for m in members for x in m.lines() if x[0] == "REC"}

        wait_for(lambda: len(consumed()) == total, "every record consumed", 90)
        hw = {}
        probe = Consumer({"bootstrap.servers": bs, "group.id": "probe"})
        for p in range(PARTITIONS):
            hw[p] = probe.get_watermark_offsets(TP(TOPIC, p), timeout=10)[1]
        assert sum(hw.values()) == total
        for m in (m1, m4):
            m.stop()
        committed_reader = Consumer({"bootstrap.servers": bs, "group.id": GROUP})
        committed = {
            tp.partition: tp.offset
            for tp in committed_reader.committed([TP(TOPIC, p) for p in range(PARTITIONS)], timeout=10)
        }
        committed_reader.close()
        probe.close()
        assert committed == hw, (committed, hw)
        # A fresh member resumes at the committed offsets: nothing left to read.
        m5 = Member(member_cp, bs, "m5", tmp_path, TOPIC, GROUP)
        members.append(m5)
        wait_for(lambda: sum(1 for x in m5.lines() if x[0] == "POS") == PARTITIONS, "m5 positions")
        assert {int(x[2]): int(x[3]) for x in m5.lines() if x[0] == "POS"} == hw
        m5.stop()
    finally:
        producer.stop()
        for m in members:
            if m.proc.poll() is None:
                m.proc.kill()
    elapsed = time.monotonic() - t0

    own = intervals(members)
    for p, spans in own.items():
        spans.sort()
        for (a0, a1, am), (b0, b1, bm) in itertools.pairwise(spans):
            assert a1 <= b0, f"partition {p} owned by {am} [{a0},{a1}] and {bm} [{b0},{b1}] at once"
    held = {p: [s for s in spans if s[2] == "m2" and s[1] == m2.killed_at] for p, spans in own.items()}
    held = {p: v for p, v in held.items() if v}
    assert held, "the killed member held no partition"
    takeover = {p: min((s[0] for s in own[p] if s[0] >= int(m2.killed_at or 0)), default=None) for p in held}
    gaps = {p: (t - int(m2.killed_at or 0)) / 1000 if t else None for p, t in takeover.items()}
    assert all(g is not None for g in gaps.values()), gaps  # someone took every partition over
    checked = check_resume(members, m2)
    epochs = {m.name: sorted({int(x[2]) for x in m.lines() if x[0] == "ASSIGN"}) for m in members}
    dupes = sum(m.records() for m in members) - total
    fails = [x for m in members for x in m.lines() if x[0] == "COMMITFAIL"]
    print(
        f"KIP848 java: {total} records, {sum(m.records() for m in members)} deliveries ({dupes} redelivered), "
        f"{sum(len(s) for s in own.values())} ownership spans non-overlapping, {checked} resume points exact, "
        f"epochs {epochs}, commit failures {len(fails)}, killed member's partitions taken over after {gaps} s, "
        f"{elapsed:.1f} s"
    )


@on_backend("postgres-s3")
def test_java_regex_subscription_range_assignor_and_admin(agent_process_factory, member_cp, tmp_path: Path) -> None:
    """A SubscriptionPattern (RE2, resolved by the coordinator) with group.remote.assignor=range;
    the Java Admin's describeConsumerGroups (ConsumerGroupDescribe) and listGroups see it."""
    agent = agent_process_factory(consumer_group_session_timeout_ms=6000, consumer_group_heartbeat_interval_ms=500)
    bs = agent.bootstrap
    admin = AdminClient({"bootstrap.servers": bs})
    for t in ("orders-eu", "orders-us", "payments"):
        admin.create_topics([NewTopic(t, 2, 1)])[t].result(30)
    p = Producer({"bootstrap.servers": bs})
    for t in ("orders-eu", "orders-us", "payments"):
        for i in range(50):
            p.produce(t, key=f"{t}:{i}", value=b"v", partition=i % 2)
    assert p.flush(30) == 0
    cp = maven_classpath(["org.apache.kafka:kafka-clients:4.1.0", SLF4J_SIMPLE])
    admin_cp = compile_java(ADMIN_SOURCE, cp, tmp_path)
    members = [Member(member_cp, bs, f"r{i}", tmp_path, "re2:orders-.*", "regex-group", "range") for i in (1, 2)]
    try:
        keys = lambda: {x[3] for m in members for x in m.lines() if x[0] == "REC"}  # noqa: E731
        wait_for(lambda: len(keys()) == 100, "every orders-* record", 90)
        assert {k.split(":")[0] for k in keys()} == {"orders-eu", "orders-us"}
        wait_for(lambda: all(m.has("ASSIGN", lambda x: x[3] != "-") for m in members), "both members assigned")

        def described() -> str:
            res = subprocess.run([member_cp[0], "-cp", admin_cp, "Admin848", bs, "regex-group"],
                                 capture_output=True, text=True, timeout=60)  # fmt: skip
            assert res.returncode == 0, res.stderr[-3000:]
            return res.stdout

        out = ""

        def stable() -> bool:
            nonlocal out
            out = described()
            return "DESCRIBE Consumer Stable range 2" in out

        try:
            wait_for(stable, "the group to be Stable with two members", 60)
        except AssertionError as e:
            raise AssertionError(f"{e}; Admin848 printed:\n{out}") from None
        assigned = [ln.split(" ")[3].split(",") for ln in out.splitlines() if ln.startswith("MEMBER ")]
        # range: each topic's 2 partitions split one per member (sorted member ids)
        assert sorted(len(a) for a in assigned) == [2, 2] and sorted(x for a in assigned for x in a) == [
            "orders-eu-0", "orders-eu-1", "orders-us-0", "orders-us-1"]  # fmt: skip
        assert "LISTED regex-group Consumer Stable" in out
        print("KIP848 admin:\n" + out)
    finally:
        for m in members:
            m.stop()


@on_backend("postgres-s3")
def test_java_static_member_leaves_and_returns(agent_process_factory, member_cp, tmp_path: Path) -> None:
    """group.instance.id: a static member that closes leaves with epoch -2, keeps its partitions
    (no rebalance: the group epoch does not move, the other member does not get them) and its
    successor process with the same instance id gets them back."""
    # The departed static member keeps its partitions only for the session timeout: it must
    # outlast a JVM Admin describe plus the successor JVM's start and join on a slow box
    # (30 s left little room at 1.5-3x slower), and nothing here waits for an expiry.
    agent = agent_process_factory(consumer_group_session_timeout_ms=180_000, consumer_group_heartbeat_interval_ms=500)
    bs = agent.bootstrap
    admin = AdminClient({"bootstrap.servers": bs})
    admin.create_topics([NewTopic("static-t", 4, 1)])["static-t"].result(30)
    cp = maven_classpath(["org.apache.kafka:kafka-clients:4.1.0", SLF4J_SIMPLE])
    admin_cp = compile_java(ADMIN_SOURCE, cp, tmp_path)

    def describe(check: bool = True) -> tuple[list[str], dict[str, tuple[int, str]]]:
        res = subprocess.run([member_cp[0], "-cp", admin_cp, "Admin848", bs, "static-group"],
                             capture_output=True, text=True, timeout=60)  # fmt: skip
        if not check and res.returncode != 0:
            return ["DESCRIBE", "?", "?", "?", "0", "0"], {}
        assert res.returncode == 0, res.stderr[-3000:]
        lines = res.stdout.splitlines()
        head = next(ln.split(" ") for ln in lines if ln.startswith("DESCRIBE "))
        members = {x[1]: (int(x[2]), x[3] if len(x) > 3 else "") for x in (ln.split(" ") for ln in lines) if x[0] == "MEMBER"}
        return head, members

    s1 = Member(member_cp, bs, "s1", tmp_path, "static-t", "static-group", "", "inst-1")
    s2 = Member(member_cp, bs, "s2", tmp_path, "static-t", "static-group", "", "inst-2")
    members = [s1, s2]
    try:
        state: dict[str, Any] = {}

        def stable() -> bool:
            head, ms = describe(check=False)  # the group may not exist yet
            state["head"], state["members"] = head, ms
            return head[2] == "Stable" and len(ms) == 2 and all(a for _, a in ms.values())

        wait_for(stable, "a stable group of two static members", 60)
        epoch, held = int(state["head"][5]), state["members"]["s1"][1]
        s1.stop()
        assert s1.has("CLOSED")
        head, ms = describe()
        assert int(head[5]) == epoch, "a static leave must not bump the group epoch"
        assert ms["s1"][0] == -2 and ms["s1"][1] == held and ms["s2"] == state["members"]["s2"], ms
        s1b = Member(member_cp, bs, "s1b", tmp_path, "static-t", "static-group", "", "inst-1")
        members.append(s1b)
        wait_for(lambda: s1b.has("ASSIGN", lambda x: x[3] != "-"), "the returning static member assigned", 60)
        head, ms = describe()
        assert "s1" not in ms and ms["s1b"][1] == held and int(head[5]) == epoch, (head, ms)
        print(f"KIP848 static: group epoch {epoch} kept across the leave and return; {held} went back to inst-1")
    finally:
        for m in members:
            m.stop()
