"""Consumer groups with real clients: confluent-kafka, kafka-python, aiokafka and kcat -G.

Every member commits synchronously after each record, so across joins, leaves
and restarts every record must be consumed exactly once. Waits poll real
conditions (reported assignments, records seen, the coordinator's view) with
deadlines.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka import TopicPartition as CfTP

from kafka_protocol.messages import ConsumerProtocolAssignment
from tests.agent.test_fetch_protocol import make_topic
from tests.fixtures.agent import RunningAgent, start_agent
from tests.fixtures.tools import require_tool

pytestmark = pytest.mark.interop

GROUP_OPTS: dict[str, Any] = {"group_min_session_timeout_ms": 1000, "group_initial_rebalance_delay_ms": 100}
PARTITIONS = 6


def wait_for(cond: Callable[[], bool], timeout: float = 30, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def produce(agent: RunningAgent, topic: str, start: int, n: int) -> None:
    p = Producer({"bootstrap.servers": agent.bootstrap, "linger.ms": 5})
    for i in range(start, start + n):
        p.produce(topic, str(i).encode(), partition=i % PARTITIONS)
    assert p.flush(30) == 0


def group_assignment(agent: RunningAgent, group: str) -> dict[str, list[int]] | None:
    """member id -> assigned partitions, from the coordinator, once the group is Stable."""
    d = agent.call(agent.broker.groups.describe(group))
    if d is None or d.state != "Stable":
        return None
    out: dict[str, list[int]] = {}
    for m in d.members:
        a = ConsumerProtocolAssignment.decode(memoryview(m.assignment)[2:], 0) if m.assignment else None
        out[m.member_id] = sorted(p for tp in (a.assigned_partitions if a else []) for p in tp.partitions)
    return out


def balanced(agent: RunningAgent, group: str, sizes: list[int]) -> bool:
    a = group_assignment(agent, group)
    return a is not None and sorted(len(v) for v in a.values()) == sizes and sorted(
        p for v in a.values() for p in v
    ) == list(range(PARTITIONS))


# -- one member per thread, per client ---------------------------------------------


class Worker(threading.Thread):
    def __init__(self, agent: RunningAgent, group: str, topic: str) -> None:
        super().__init__(daemon=True)
        self.agent, self.group, self.topic = agent, group, topic
        # (partition, offset, value) of records whose offset commit succeeded: a record
        # whose commit failed (its partition moved in a rebalance) is redelivered to
        # its new owner, which is the at-least-once contract, not a duplicate.
        self.records: list[tuple[int, int, int]] = []
        # Every value handed to the application, whether or not its commit succeeded.
        self.delivered: list[int] = []
        self.assignment: list[int] = []
        self.errors: list[str] = []
        self.failed_partitions: set[int] = set()  # partitions with a failed offset commit
        self.halt = threading.Event()
        self.ready = threading.Event()

    def stop(self) -> None:
        self.halt.set()
        self.join(30)
        assert not self.is_alive()


class ConfluentWorker(Worker):
    def run(self) -> None:
        c = Consumer({
            "bootstrap.servers": self.agent.bootstrap, "group.id": self.group, "auto.offset.reset": "earliest",
            "enable.auto.commit": False, "heartbeat.interval.ms": 300, "session.timeout.ms": 6000,
            "fetch.wait.max.ms": 100,
        })
        c.subscribe([self.topic])
        try:
            while not self.halt.is_set():
                m = c.poll(0.1)
                if m is not None and m.error() is None:
                    self.delivered.append(int(m.value()))
                    try:
                        c.commit(message=m, asynchronous=False)
                        self.records.append((m.partition(), m.offset(), int(m.value())))
                    except Exception as e:
                        self.errors.append(repr(e))
                self.assignment = sorted(tp.partition for tp in c.assignment())
        finally:
            c.close()


class KafkaPythonWorker(Worker):
    def run(self) -> None:
        from kafka import KafkaConsumer
        from kafka.structs import OffsetAndMetadata

        c = KafkaConsumer(
            self.topic, bootstrap_servers=self.agent.bootstrap, group_id=self.group, auto_offset_reset="earliest",
            enable_auto_commit=False, heartbeat_interval_ms=300, session_timeout_ms=6000, fetch_max_wait_ms=100,
        )
        try:
            while not self.halt.is_set():
                for tp, msgs in c.poll(timeout_ms=100).items():
                    for m in msgs:
                        self.delivered.append(int(m.value))
                        try:
                            c.commit({tp: OffsetAndMetadata(m.offset + 1, "", -1)})
                            self.records.append((tp.partition, m.offset, int(m.value)))
                        except Exception as e:
                            self.errors.append(repr(e))
                self.assignment = sorted(tp.partition for tp in c.assignment())
        finally:
            c.close()


class AiokafkaWorker(Worker):
    def run(self) -> None:
        asyncio.run(self._run())

    async def _run(self) -> None:
        from aiokafka import AIOKafkaConsumer

        c = AIOKafkaConsumer(
            self.topic, bootstrap_servers=self.agent.bootstrap, group_id=self.group, auto_offset_reset="earliest",
            enable_auto_commit=False, heartbeat_interval_ms=300, session_timeout_ms=6000, fetch_max_wait_ms=100,
        )
        await c.start()
        try:
            while not self.halt.is_set():
                for tp, msgs in (await c.getmany(timeout_ms=100)).items():
                    for m in msgs:
                        self.delivered.append(int(m.value))
                        try:
                            await c.commit({tp: m.offset + 1})
                            self.records.append((tp.partition, m.offset, int(m.value)))
                        except Exception as e:
                            self.errors.append(repr(e))
                            self.failed_partitions.add(tp.partition)
                self.assignment = sorted(tp.partition for tp in c.assignment())
        finally:
            await c.stop()


WORKERS = {"confluent": ConfluentWorker, "kafka-python": KafkaPythonWorker, "aiokafka": AiokafkaWorker}


@pytest.mark.parametrize("client", list(WORKERS))
def test_group_rebalances_consume_exactly_once(agent_factory: Any, client: str) -> None:
    agent = agent_factory(**GROUP_OPTS)
    cls = WORKERS[client]
    topic, group = f"grp-{client}", f"g-{client}"
    make_topic(agent, topic, PARTITIONS)
    produce(agent, topic, 0, 60)
    everyone: list[Worker] = []

    def spawn() -> Worker:
        w = cls(agent, group, topic)
        everyone.append(w)
        w.start()
        return w

    def consumed() -> list[tuple[int, int, int]]:
        return [r for w in everyone for r in w.records]

    def reached(n: int) -> bool:
        """Records 0..n-1 all delivered (and, but for aiokafka, n commits succeeded)."""
        seen = {v for w in everyone for v in w.delivered}
        return set(range(n)) <= seen and (client == "aiokafka" or len(consumed()) >= n)

    live = [spawn() for _ in range(3)]
    try:
        # Three members on six partitions: two each.
        wait_for(lambda: balanced(agent, group, [2, 2, 2]) and reached(60), what="3-way balance")
        wait_for(lambda: sorted(len(w.assignment) for w in live) == [2, 2, 2], what="clients see 2 each")

        # One leaves: the other two take its partitions.
        live.pop().stop()
        produce(agent, topic, 60, 60)
        wait_for(lambda: balanced(agent, group, [3, 3]) and reached(120), what="2-way balance")

        # One joins: back to two each.
        live.append(spawn())
        wait_for(lambda: balanced(agent, group, [2, 2, 2]), what="rebalance after join")
        produce(agent, topic, 120, 60)
        wait_for(lambda: reached(180), what="all records")
        for w in live:
            w.stop()
        live.clear()
        got = consumed()
        assert sorted({v for w in everyone for v in w.delivered}) == list(range(180)), "no record lost"
        if client != "aiokafka":
            assert sorted(v for _, _, v in got) == list(range(180)), "every record exactly once"
        # aiokafka (0.14) may hand out records it prefetched for a partition it is
        # losing and then commit them with the new generation, which the classic
        # protocol accepts (Kafka does not check partition ownership either): under
        # load a few records are then seen twice, and a record whose own commit
        # failed (ILLEGAL_GENERATION mid-rebalance) can have its offset committed
        # past by such a later commit, so it is delivered once but never committed
        # on its own. Only no loss (every record delivered) is asserted for it.

        # A restarted consumer resumes from the group's committed offsets.
        produce(agent, topic, 180, 12)
        before = len(everyone)
        live.append(spawn())
        if client == "aiokafka":
            # A partition whose last commit failed mid-rebalance (see above) resumes from
            # the commit before it: those records come again, nothing is skipped.
            wait_for(lambda: set(range(180, 192)) <= {v for _, _, v in everyone[before].records}, what="resume")
            resumed = everyone[before].records
            assert max(v for _, _, v in resumed) < 192
            failed = {p for w in everyone[:before] for p in w.failed_partitions}
            assert {p for p, _, v in resumed if v < 180} <= failed, "only partitions whose commit failed"
        else:
            wait_for(lambda: len(everyone[before].records) >= 12, what="resume")
            assert sorted(v for _, _, v in everyone[before].records) == list(range(180, 192))
    finally:
        for w in live:
            w.halt.set()
        for w in live:
            w.join(30)


def test_committed_offsets_survive_agent_restart(tmp_path: Any) -> None:
    agent = start_agent(tmp_path / "a", **GROUP_OPTS)
    try:
        make_topic(agent, "durable", PARTITIONS)
        produce(agent, "durable", 0, 30)
        w = ConfluentWorker(agent, "dg", "durable")
        w.start()
        wait_for(lambda: len(w.records) >= 30, what="first pass")
        w.stop()
    finally:
        agent.stop()
    agent = start_agent(tmp_path / "a", **GROUP_OPTS)  # same data dir, new process state
    try:
        expected = {p: 5 for p in range(PARTITIONS)}
        c = Consumer({"bootstrap.servers": agent.bootstrap, "group.id": "dg"})
        try:
            got = c.committed([CfTP("durable", p) for p in range(PARTITIONS)], timeout=10)
            assert {tp.partition: tp.offset for tp in got} == expected
        finally:
            c.close()
        from kafka import KafkaConsumer
        from kafka.structs import TopicPartition

        kc = KafkaConsumer(bootstrap_servers=agent.bootstrap, group_id="dg", enable_auto_commit=False)
        try:
            assert {p: kc.committed(TopicPartition("durable", p)) for p in range(PARTITIONS)} == expected
        finally:
            kc.close()
        produce(agent, "durable", 30, 6)
        w = ConfluentWorker(agent, "dg", "durable")
        w.start()
        wait_for(lambda: len(w.records) >= 6, what="resume after restart")
        w.stop()
        assert sorted(v for _, _, v in w.records) == list(range(30, 36))
    finally:
        agent.stop()


# -- kcat -G (librdkafka 2.0) ---------------------------------------------------------


def test_kcat_balanced_group(agent_factory: Any) -> None:
    agent = agent_factory(**GROUP_OPTS)
    make_topic(agent, "kc", PARTITIONS)
    procs: list[subprocess.Popen[str]] = []
    lines: list[str] = []
    lock = threading.Lock()

    def pump(p: subprocess.Popen[str]) -> None:
        assert p.stdout is not None
        for line in p.stdout:
            with lock:
                lines.append(line.strip())

    try:
        for _ in range(3):
            p = subprocess.Popen(
                [require_tool("kcat"), "-b", agent.bootstrap, "-G", "kcat-group", "-q", "-u", "-f", "%p %o %s\n",
                 "-X", "heartbeat.interval.ms=300", "-X", "session.timeout.ms=6000",
                 "-X", "auto.offset.reset=earliest", "kc"],
                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
            )
            procs.append(p)
            threading.Thread(target=pump, args=(p,), daemon=True).start()
        wait_for(lambda: balanced(agent, "kcat-group", [2, 2, 2]), timeout=40, what="kcat balance")
        produce(agent, "kc", 0, 60)
        wait_for(lambda: len(lines) >= 60, what="kcat records")
        with lock:
            got = [tuple(map(int, line.split())) for line in lines]
        assert sorted(v for _, _, v in got) == list(range(60))
    finally:
        for p in procs:
            p.kill()
            p.wait(10)


# -- a member killed with SIGKILL --------------------------------------------------

KILLED_MEMBER = """
import sys, time
from confluent_kafka import Consumer
c = Consumer({"bootstrap.servers": sys.argv[1], "group.id": sys.argv[2], "session.timeout.ms": 3000,
              "heartbeat.interval.ms": 300, "auto.offset.reset": "earliest"})
c.subscribe([sys.argv[3]])
while True:
    c.poll(0.1)
    if c.assignment():
        print("assigned", flush=True)
"""


def test_killed_member_expires_after_session_timeout(agent_factory: Any) -> None:
    agent = agent_factory(**GROUP_OPTS)
    make_topic(agent, "kill", PARTITIONS)
    survivors = [ConfluentWorker(agent, "kg", "kill") for _ in range(2)]
    for w in survivors:
        w.start()
    proc = subprocess.Popen(
        [sys.executable, "-c", KILLED_MEMBER, agent.bootstrap, "kg", "kill"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env={**os.environ},
    )
    try:
        wait_for(lambda: balanced(agent, "kg", [2, 2, 2]), what="3 members")
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)
        killed_at = time.monotonic()
        wait_for(lambda: balanced(agent, "kg", [3, 3]), timeout=30, what="survivors take over")
        elapsed = time.monotonic() - killed_at
        assert elapsed >= 2.0, f"removed after {elapsed:.1f}s, before its 3 s session timeout"
        wait_for(lambda: sorted(len(w.assignment) for w in survivors) == [3, 3], what="survivors see it")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        for w in survivors:
            w.halt.set()
        for w in survivors:
            w.join(30)
