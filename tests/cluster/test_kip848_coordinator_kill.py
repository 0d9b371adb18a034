"""KIP-848 across a 3-agent cluster (Postgres + moto S3): kill -9 of the group's
coordinator while three Java 4.1 consumers (``group.protocol=consumer``) consume.

The group's ring owner dies; its successor loads the group from the metastore
and continues at the same group and member epochs (the members' epochs after the
move never go back), consumption continues, every record is consumed, ownership
spans never overlap and each member starts a partition at the last committed
offset; committed offsets end at the high watermarks. The mixed variant (issue 16)
runs a group upgraded online from classic, with two classic members beside a
consumer-protocol one: the successor continues it from the metastore too.
"""

from __future__ import annotations

import itertools
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer
from confluent_kafka import TopicPartition as TP

from tests.cluster.helpers import create_topic, node_of, start_cluster
from tests.cluster.test_three_agents import _coordinator
from tests.fixtures.agent_process import Backend
from tests.fixtures.java import SLF4J_SIMPLE, compile_java, java_binary, maven_classpath
from tests.interop.kip848_member import (
    SOURCE,
    Member,
    PacedProducer,
    check_resume,
    intervals,
    wait_for,
)

pytestmark = [pytest.mark.slow, pytest.mark.postgres, pytest.mark.s3, pytest.mark.interop, pytest.mark.timeout(400)]

TOPIC, GROUP, PARTITIONS = "kip848c", "kip848-cluster", 6


@pytest.fixture
def pg_s3(postgres_url: str, s3_url: str) -> Backend:
    return Backend("postgres-s3", postgres_url, s3_url)


def test_kill9_kip848_coordinator(tmp_path: Path, pg_s3: Backend) -> None:
    _kill9_coordinator(tmp_path, pg_s3, ["consumer", "consumer", "consumer"])


def test_kill9_coordinator_of_mixed_protocol_group(tmp_path: Path, pg_s3: Backend) -> None:
    """c1 classic forms a classic group, c2 (consumer protocol) upgrades it online,
    c3 joins it as a classic member; then the coordinator is killed."""
    _kill9_coordinator(tmp_path, pg_s3, ["classic", "consumer", "classic"])


def _kill9_coordinator(tmp_path: Path, pg_s3: Backend, protocols: list[str]) -> None:
    cp = maven_classpath(["org.apache.kafka:kafka-clients:4.1.0", SLF4J_SIMPLE])
    java = (java_binary(), compile_java(SOURCE, cp, tmp_path))
    group, agents = start_cluster(
        tmp_path, pg_s3, ["a", "a", "b"], consumer_group_session_timeout_ms=6000, consumer_group_heartbeat_interval_ms=500
    )
    members: list[Member] = []
    producer: PacedProducer | None = None
    try:
        create_topic(agents[0], TOPIC, PARTITIONS)
        coord = _coordinator(agents[0], GROUP)
        victim = next(a for a in agents if node_of(a) == coord)
        survivors = [a for a in agents if a is not victim]
        bs = ",".join(a.bootstrap for a in agents)
        # Idempotent: a produce lost with the killed agent is retried without a duplicate.
        producer = PacedProducer(survivors[0].bootstrap, TOPIC, PARTITIONS, pause_s=0.4, idempotent=True)
        producer.start()  # ~250 records/s until 2,000 after the kill
        members = []
        for i, protocol in enumerate(protocols, 1):  # one at a time: the group's protocol follows the first
            members.append(Member(java, bs, f"c{i}", tmp_path, TOPIC, GROUP, protocol=protocol))
            wait_for(lambda m=members[-1]: m.has("ASSIGN", lambda x: x[3] != "-"), f"c{i} assigned", 90)
        wait_for(lambda: all(m.records() > 0 for m in members), "three members consuming", 90)
        wait_for(lambda: all(m.has("ASSIGN", lambda x: x[3] != "-") for m in members), "three members assigned", 60)
        killed_at = int(time.time() * 1000)
        before = {m.name: max(int(x[2]) for x in m.lines() if x[0] == "ASSIGN") for m in members}
        consumed_before = sum(m.records() for m in members)
        victim.kill()
        assert not producer.done.is_set(), "the producer finished before the kill"
        producer.finish()
        for a in survivors:
            wait_for(lambda a=a: len((a.healthz() or {}).get("ring", [])) == 2, "the dead agent to leave the ring", 30)
        assert _coordinator(survivors[0], GROUP) in {node_of(a) for a in survivors}
        wait_for(lambda: sum(m.records() for m in members) > consumed_before + 300, "consumption after the move", 90)
        producer.join(120)
        assert producer.done.is_set() and producer.error is None, producer.error
        total = producer.sent
        wait_for(lambda: len({x[3] for m in members for x in m.lines() if x[0] == "REC"}) == total, "every record", 90)
        for m in members:
            m.stop()
        probe = Consumer({"bootstrap.servers": survivors[0].bootstrap, "group.id": GROUP})
        hw = {p: probe.get_watermark_offsets(TP(TOPIC, p), timeout=10)[1] for p in range(PARTITIONS)}
        committed = {tp.partition: tp.offset for tp in probe.committed([TP(TOPIC, p) for p in range(PARTITIONS)], timeout=10)}
        probe.close()
        assert sum(hw.values()) == total and committed == hw, (committed, hw)
    finally:
        if producer is not None:
            producer.stop()
        for m in members:
            if m.proc.poll() is None:
                m.proc.kill()
        group.close(show_logs=False)

    own = intervals(members)
    for p, spans in own.items():
        spans.sort()
        for a, b in itertools.pairwise(spans):
            assert a[1] <= b[0], f"partition {p} owned by {a} and {b} at once"
    after = {m.name: sorted(int(x[2]) for x in m.lines() if x[0] in ("ASSIGN", "REVOKE") and int(x[1]) > killed_at) for m in members}
    for name, epochs in after.items():
        assert all(e >= before[name] for e in epochs), (name, before[name], epochs)  # no epoch reset
    # No member was killed here: every start must be exactly the last commit.
    checked = check_resume(members, None)
    deliveries = sum(m.records() for m in members)
    print(
        f"\nKIP848 coordinator kill -9 ({protocols}): {total} records, {deliveries} deliveries, epochs before {before}, "
        f"after {after}, {checked} resume points exact, {sum(len(s) for s in own.values())} spans non-overlapping"
    )
