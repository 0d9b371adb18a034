"""Durability across agent restarts: SIGTERM after acks=all, and SIGKILL in the middle of producing.

Whatever the agent acknowledged (acks=all) must be readable after it comes back
on the same port and the same metastore/object store; offsets continue where
they stopped. After kill -9, unacknowledged records may or may not be there,
but every acknowledged one must be, at the offset it was acknowledged with.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pytest

from kafka_protocol.messages import ProduceResponse
from tests.interop._clients import (
    assert_same,
    by_partition,
    confluent_consume,
    confluent_produce,
    create_topic,
    kcat_consume,
    make_records,
    unique_topic,
)
from tests.interop._raw import RawConn, produce_request, record_batch

pytestmark = [pytest.mark.interop, pytest.mark.slow, pytest.mark.timeout(180)]

PARTITIONS = 3


def _hwm(bootstrap: str, topic: str) -> dict[int, int]:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "wm", "enable.auto.commit": False})
    try:
        return {
            p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=15)[1]
            for p in range(PARTITIONS)
        }
    finally:
        c.close()


def test_sigterm_after_acks_all_then_restart(agent_process_factory: Callable[..., object]) -> None:
    agent = agent_process_factory(flush_interval_ms=50)
    bootstrap = agent.bootstrap  # type: ignore[attr-defined]
    topic = unique_topic("restart")
    create_topic(bootstrap, topic, PARTITIONS)
    first = confluent_produce(bootstrap, topic, make_records("before", PARTITIONS, 40), codec="lz4")
    assert len(first) == PARTITIONS * 40

    rc = agent.stop()  # type: ignore[attr-defined]
    assert rc == 0, f"agent exited with {rc} on SIGTERM"
    agent.start()  # type: ignore[attr-defined]

    counts = {p: len(rs) for p, rs in by_partition(first).items()}
    assert_same(first, confluent_consume(bootstrap, topic, counts), what="after SIGTERM+restart")

    # the log continues where it stopped, and the topic still has its partitions
    second = confluent_produce(
        bootstrap, topic, make_records("after", PARTITIONS, 10), codec="zstd"
    )
    for p, rs in by_partition(second).items():
        assert [r.offset for r in rs] == list(range(counts[p], counts[p] + len(rs)))
    everything = first + second
    assert_same(everything, kcat_consume(bootstrap, topic), what="kcat after restart")


def _buffered_then_sigterm(agent) -> tuple[str, dict[int, int], dict[int, int]]:
    """Send one Produce (acks=all) per partition, wait until the agent has accepted them into
    its open segment (long flush interval), SIGTERM it, collect the answers that still arrive,
    restart. Returns (topic, base offsets acknowledged, high watermarks after the restart)."""
    bootstrap = agent.bootstrap
    topic = unique_topic("drain")
    create_topic(bootstrap, topic, PARTITIONS)
    batches = {p: record_batch(10 + p, f"drain{p}") for p in range(PARTITIONS)}
    before = agent.metric("floe_produced_bytes_total")
    acked: dict[int, int] = {}
    with RawConn(agent.port) as conn:
        corrs = [conn.send(produce_request(topic, {p: b}), 7) for p, b in batches.items()]
        want = before + sum(len(b) for b in batches.values())
        deadline = time.monotonic() + 15
        while agent.metric("floe_produced_bytes_total") < want:
            assert time.monotonic() < deadline, "the agent did not accept the produce requests"
            time.sleep(0.01)  # bounded poll on a real condition (bytes accepted into the batcher)
        t0 = time.monotonic()
        rc = agent.stop()
        assert rc == 0, f"agent exited with {rc} on SIGTERM"
        assert time.monotonic() - t0 < 15, "graceful stop took too long"
        try:
            for p, corr in zip(batches, corrs, strict=True):
                resp = conn.recv(ProduceResponse, 7, corr)
                pr = resp.responses[0].partition_responses[0]
                assert pr.error_code == 0, pr
                acked[p] = pr.base_offset
        except (ConnectionError, OSError):
            pass  # closed before answering
    agent.start()
    return topic, acked, _hwm(bootstrap, topic)


def test_sigterm_flushes_buffered_produce(agent_process_factory: Callable[..., object]) -> None:
    """Produce requests still buffered when SIGTERM arrives are flushed and committed on the
    way out (documented behaviour of run_agent), and whatever was acknowledged is there."""
    agent = agent_process_factory(flush_interval_ms=5000)
    topic, acked, hwm = _buffered_then_sigterm(agent)
    print(f"acknowledged before the close: {acked}; high watermarks after restart: {hwm}")
    assert hwm == {p: 10 + p for p in range(PARTITIONS)}, (
        f"buffered produce data was not committed on SIGTERM: high watermarks {hwm}"
    )
    got = confluent_consume(agent.bootstrap, topic, hwm)  # type: ignore[attr-defined]
    for p in range(PARTITIONS):
        values = [r.value for r in sorted(got, key=lambda r: r.offset) if r.partition == p]
        assert values == [f"drain{p}-{i}".encode() for i in range(10 + p)]
        if p in acked:
            assert acked[p] == 0


@pytest.mark.parametrize("backend", ["sqlite-file"], indirect=True)  # one is enough
def test_sigterm_answers_buffered_produce(agent_process_factory: Callable[..., object]) -> None:
    agent = agent_process_factory(flush_interval_ms=5000)
    _, acked, hwm = _buffered_then_sigterm(agent)
    assert hwm == {p: 10 + p for p in range(PARTITIONS)}
    assert acked == dict.fromkeys(range(PARTITIONS), 0), (
        f"committed on shutdown but not acknowledged: answers {acked}, high watermarks {hwm}"
    )


def test_sigkill_while_producing(agent_process_factory: Callable[..., object]) -> None:
    from confluent_kafka import Producer

    agent = agent_process_factory(flush_interval_ms=20)
    bootstrap = agent.bootstrap  # type: ignore[attr-defined]
    topic = unique_topic("kill9")
    create_topic(bootstrap, topic, PARTITIONS)

    acked: list[tuple[int, int, bytes]] = []  # (partition, offset, value)
    errors: list[str] = []
    lock = threading.Lock()
    stop = threading.Event()
    sent = [0]

    def on_delivery(err, msg) -> None:
        with lock:
            if err is None:
                acked.append((msg.partition(), msg.offset(), msg.value()))
            else:
                errors.append(str(err))

    def run() -> None:
        p = Producer(
            {
                "bootstrap.servers": bootstrap,
                "acks": "all",
                "linger.ms": 2,
                "message.timeout.ms": 30000,
                "reconnect.backoff.ms": 20,
                "reconnect.backoff.max.ms": 200,
                "retry.backoff.ms": 50,
            }
        )
        i = 0
        while not stop.is_set() and i < 200_000:
            try:
                p.produce(
                    topic, f"m-{i:07d}".encode(), partition=i % PARTITIONS, on_delivery=on_delivery
                )
                i += 1
            except BufferError:
                p.poll(0.05)
            p.poll(0)
            if i % 50 == 0:
                p.poll(0.005)  # pace the producer a little
        sent[0] = i
        p.flush(40)

    def wait_for(cond: Callable[[], bool], what: str, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while not cond():
            assert time.monotonic() < deadline, f"timed out waiting for {what}"
            time.sleep(0.02)  # bounded poll on a real condition

    t = threading.Thread(target=run, name="producer")
    t.start()
    try:
        wait_for(lambda: len(acked) >= 300, "300 acknowledgements before the kill")
        agent.kill()  # type: ignore[attr-defined]  # SIGKILL mid-stream
        with lock:
            before = len(acked)
        agent.start()  # type: ignore[attr-defined]
        wait_for(lambda: len(acked) >= before + 300, "300 acknowledgements after the restart", 60)
    finally:
        stop.set()
        t.join(60)
    assert not t.is_alive()

    hwm = _hwm(bootstrap, topic)
    got = confluent_consume(bootstrap, topic, hwm, timeout=60)
    present = {(r.partition, r.offset): r.value for r in got}
    assert len(present) == sum(hwm.values()), "could not read everything up to the high watermark"
    positions = [(p, o) for p, o, _ in acked]
    assert len(set(positions)) == len(positions), "two records acknowledged at the same offset"
    missing = [(p, o, v) for p, o, v in acked if present.get((p, o)) != v]
    assert not missing, (
        f"{len(missing)} of {len(acked)} acknowledged records lost or changed, e.g. {missing[:5]}"
    )
    print(f"sent {sent[0]}, acknowledged {len(acked)}, in log {len(present)}, errors {len(errors)}")
