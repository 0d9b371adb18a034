"""Jepsen-style exactly-once check: transactional consume-transform-produce between
two topics on two agent processes (Postgres metastore, file store) while one
agent is killed with SIGKILL and restarted.

Three workers, one per input partition, each with its own transactional id and a
read_committed consumer (manual assignment, offsets in one group through
``send_offsets_to_transaction``). Every transaction copies a few input records
to the output topic and commits their input offsets with them; one in six is
deliberately aborted after writing its copies plus a poison record. On any
error a worker aborts (or, when fatal, starts a new producer with the same
transactional id, which fences the old one) and rewinds to the group's
committed offset. The kill lands while transactions are in flight.

Checks, as in the issue: under read_committed the output holds every input
record exactly once (nothing committed lost, no duplicate), no record of an
aborted transaction (no poison, no copy from an aborted attempt) is ever
read, and read_committed offsets only move forward within each partition.
"""

from __future__ import annotations

import random
import threading
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from tests.cluster.helpers import brokers, create_topic, start_cluster, wait_for
from tests.fixtures.agent_process import Backend

pytestmark = [pytest.mark.interop, pytest.mark.slow, pytest.mark.postgres, pytest.mark.timeout(240)]

PARTS = 3
PER_PART = 60
GROUP = "jepsen-ctp"


@pytest.fixture
def pg_file(postgres_url: str, tmp_path: Path) -> Backend:
    return Backend("postgres-file", postgres_url, f"file://{tmp_path / 'objects'}")


class Worker(threading.Thread):
    def __init__(self, bootstrap: str, part: int, seed: int) -> None:
        super().__init__(daemon=True)
        self.bs, self.part, self.rng = bootstrap, part, random.Random(seed)
        self.tp = TopicPartition("jin", part)
        self.stop = threading.Event()
        self.done = threading.Event()
        self.commits = self.aborts = self.restarts = self.pos = 0
        self.errors: list[str] = []
        self.call: tuple[str, float] = ("", 0.0)  # the client call under way, since (diagnosis)

    def _producer(self) -> Producer:
        p = Producer(
            {
                "bootstrap.servers": self.bs,
                "transactional.id": f"jepsen-{self.part}",
                "transaction.timeout.ms": 8000,
                "linger.ms": 5,
                # librdkafka >= 2.10 bug (confluentinc/librdkafka#5511, open): when the broker a
                # producer has cached as the group's coordinator leaves the metadata (the killed
                # agent), librdkafka decommissions it, and a send_offsets_to_transaction() that then
                # finds it in the cache waits for a state change of some broker connection that
                # may never come; #5456 (open) makes it ignore its timeout too, so it hangs for
                # good. Closing idle connections makes such state changes (the client's own retry
                # path then looks the coordinator up again). A Kafka broker leaving does the same.
                "connections.max.idle.ms": 5000,
            }
        )
        self._at("init_transactions")
        p.init_transactions(60)
        return p

    def _at(self, call: str) -> None:
        self.call = (call, time.monotonic())

    def _rewind(self, c: Consumer) -> int:
        committed = c.committed([TopicPartition("jin", self.part)], timeout=20)[0].offset
        start = max(committed, 0)
        c.assign([TopicPartition("jin", self.part, start)])
        return start

    def run(self) -> None:
        c = Consumer(
            {
                "bootstrap.servers": self.bs,
                "group.id": GROUP,
                "isolation.level": "read_committed",
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
                "fetch.wait.max.ms": 100,
            }
        )
        try:
            p = self._producer()
            pos = self._rewind(c)
            while not self.stop.is_set() and pos < PER_PART:
                self.pos = pos
                polled = c.consume(self.rng.randint(1, 6), 0.3)
                self.errors.extend(f"consume: {m.error()}" for m in polled if m.error())  # diagnosis
                del self.errors[:-20]
                msgs = [m for m in polled if not m.error()]
                if not msgs:
                    continue
                try:
                    p.begin_transaction()
                    for m in msgs:
                        p.produce("jout", m.value(), key=m.value(), partition=self.part)
                    if self.rng.random() < 1 / 6:
                        p.produce("jout", b"POISON", partition=self.part)
                        p.flush(30)
                        self._at("abort_transaction")
                        p.abort_transaction(30)
                        self.aborts += 1
                        pos = self._rewind(c)
                        continue
                    last = msgs[-1].offset() + 1
                    self._at("send_offsets_to_transaction")
                    p.send_offsets_to_transaction(
                        [TopicPartition("jin", self.part, last)], c.consumer_group_metadata(), 30
                    )
                    self._commit(p)
                    self.commits += 1
                    pos = last
                except KafkaException as e:
                    err: KafkaError = e.args[0]
                    self.errors.append(str(err))
                    if err.fatal():
                        p = self._producer()  # fences the old instance, aborts its transaction
                        self.restarts += 1
                    else:
                        try:
                            p.abort_transaction(30)
                        except KafkaException as e2:
                            self.errors.append(f"abort: {e2}")
                            p = self._producer()
                            self.restarts += 1
                    pos = self._rewind(c)
            self.done.set()
        except Exception as e:  # surfaced by the test
            self.errors.append(f"worker died: {e!r}")
        finally:
            c.close()

    def _commit(self, p: Producer) -> None:
        while not self.stop.is_set():
            try:
                self._at("commit_transaction")
                p.commit_transaction(30)
                return
            except KafkaException as e:
                if e.args[0].retriable() and not e.args[0].txn_requires_abort():
                    self.errors.append(f"commit (retried): {e.args[0]}")  # diagnosis
                    del self.errors[:-20]
                    continue  # librdkafka: retry the commit itself
                raise


def _read_committed(bs: str) -> dict[int, list[tuple[int, bytes]]]:
    c = Consumer(
        {
            "bootstrap.servers": bs,
            "group.id": "jepsen-check",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "fetch.wait.max.ms": 100,
        }
    )
    out: dict[int, list[tuple[int, bytes]]] = {p: [] for p in range(PARTS)}
    ends = {}
    for p in range(PARTS):
        _lo, ends[p] = c.get_watermark_offsets(TopicPartition("jout", p), timeout=20, cached=False)
    c.assign([TopicPartition("jout", p, 0) for p in range(PARTS)])
    pos = dict.fromkeys(range(PARTS), 0)
    deadline = time.monotonic() + 60
    while any(pos[p] < ends[p] for p in range(PARTS)) and time.monotonic() < deadline:
        for m in c.consume(500, 0.3):
            if m.error():
                continue
            out[m.partition()].append((m.offset(), m.value()))
            pos[m.partition()] = m.offset() + 1
        for p in range(PARTS):  # positions past control records count too
            got = c.position([TopicPartition("jout", p)])[0].offset
            if got >= 0:
                pos[p] = max(pos[p], got)
    c.close()
    return out


def test_consume_transform_produce_through_agent_kill(tmp_path: Path, pg_file: Backend) -> None:
    workers: list[Worker] = []
    group, agents = start_cluster(
        tmp_path, pg_file, ["a", "a"], transaction_recovery_ms=2000, transaction_check_interval_ms=300
    )
    try:
        a0, a1 = agents
        create_topic(a0, "jin", PARTS)
        create_topic(a0, "jout", PARTS)
        plain = Producer({"bootstrap.servers": a0.bootstrap})
        for p in range(PARTS):
            for i in range(PER_PART):
                plain.produce("jin", f"{p}-{i}".encode(), partition=p)
        assert plain.flush(30) == 0
        bs = f"{a0.bootstrap},{a1.bootstrap}"
        workers.extend(Worker(bs, p, seed=p) for p in range(PARTS))
        for w in workers:
            w.start()
        wait_for(lambda: sum(w.commits for w in workers) >= 6, 60, "first commits")
        a1.kill()  # SIGKILL while transactions are in flight
        wait_for(lambda: len(brokers(a0)) == 1, 30, "the ring to drop the killed agent")
        a1.start()
        try:
            wait_for(lambda: all(w.done.is_set() or not w.is_alive() for w in workers), 150, "workers to finish")
        except AssertionError as e:
            now = time.monotonic()
            state = [
                (w.part, w.pos, w.commits, w.aborts, w.restarts, w.errors[-3:], w.call[0], now - w.call[1])
                for w in workers
            ]
            raise AssertionError(
                f"{e}: (part, pos, commits, aborts, restarts, last errors, last call, its age s) {state}"
            ) from None
        for w in workers:
            w.stop.set()
            w.join(30)
        stats = [(w.part, w.commits, w.aborts, w.restarts, w.errors[:3]) for w in workers]
        assert all(w.done.is_set() for w in workers), stats

        out = _read_committed(a0.bootstrap)
        for p in range(PARTS):
            offsets = [o for o, _ in out[p]]
            assert offsets == sorted(set(offsets)), f"read_committed offsets not monotonic on {p}"
            values = [v for _, v in out[p]]
            assert b"POISON" not in values, f"an aborted record was read on partition {p}"
            expected = [f"{p}-{i}".encode() for i in range(PER_PART)]
            dups = {v for v in values if values.count(v) > 1}
            assert not dups, f"duplicates on partition {p}: {sorted(dups)[:5]} ({stats})"
            assert values == expected, f"partition {p}: lost {sorted(set(expected) - set(values))[:5]}"
        print(f"\njepsen: commits/aborts/restarts per worker {[(s[1], s[2], s[3]) for s in stats]}")
    finally:
        for w in workers:  # never leave client threads polling dead agents behind
            w.stop.set()
        for w in workers:
            w.join(30)
        group.close(False)
