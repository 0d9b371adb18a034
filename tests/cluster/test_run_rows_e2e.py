"""Run rows end to end: a real agent on Postgres + S3 commits segments holding
several batches per partition as run rows (metastore.runs), and a real client
reads every record back exactly once, in order, and finds offsets by time.

The agent seals every second (adaptive sealing off), so each segment holds
the three rounds librdkafka sends - one batch per partition each (one record
per batch) - for 600 partitions: 1,800 batches, the Postgres COPY path, three
batches per partition, so one run row per partition.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import asyncpg
import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from metastore.engine import asyncpg_dsn
from tests.cluster.helpers import create_topic, start_cluster
from tests.fixtures.agent_process import Backend

pytestmark = [pytest.mark.slow, pytest.mark.postgres, pytest.mark.s3, pytest.mark.interop]

PARTITIONS = 600
ROUNDS = 3


async def _run_rows(url: str) -> int:
    con = await asyncpg.connect(asyncpg_dsn(url))
    try:
        return int(await con.fetchval("SELECT count(*) FROM batches WHERE entries IS NOT NULL"))
    finally:
        await con.close()


def test_a_client_reads_run_rows_back(tmp_path: Path, postgres_url: str, s3_url: str) -> None:
    backend = Backend("postgres-s3", postgres_url, s3_url)
    group, (agent,) = start_cluster(
        tmp_path, backend, ["a"], flush_interval_ms=1000, flush_min_interval_ms=1000
    )
    try:
        topic = "runs-e2e"
        create_topic(agent, topic, PARTITIONS)
        p = Producer(
            {
                "bootstrap.servers": agent.bootstrap,
                "linger.ms": 50,
                "batch.num.messages": 1,
                "acks": "all",
                # not idempotent: librdkafka's idempotent producer sends a few
                # partitions per request here, each waiting the 1 s seal
            }
        )
        acked: dict[tuple[int, int], int] = {}  # (partition, round) -> offset
        stamps = {r: 1_700_000_000_000 + 1000 * r for r in range(ROUNDS)}

        def cb(err: object, msg: object) -> None:
            assert err is None, err
            part, rnd = msg.partition(), int(msg.value().split(b"-")[1])  # type: ignore[attr-defined]
            acked[(part, rnd)] = msg.offset()  # type: ignore[attr-defined]

        for rnd in range(ROUNDS):
            for part in range(PARTITIONS):
                p.produce(
                    topic,
                    f"v-{rnd}-{part}".encode(),
                    partition=part,
                    timestamp=stamps[rnd],
                    on_delivery=cb,
                )
            p.poll(0)
        assert p.flush(60) == 0
        assert len(acked) == PARTITIONS * ROUNDS
        runs = asyncio.run(_run_rows(postgres_url))
        assert runs > 0, "no run rows: the test did not exercise them"

        c = Consumer(
            {
                "bootstrap.servers": agent.bootstrap,
                "group.id": "runs-e2e",
                "enable.auto.commit": False,
            }
        )
        try:
            # offsets by time: round 1's stamp finds round 1's record on every partition
            asked = [TopicPartition(topic, part, stamps[1]) for part in range(PARTITIONS)]
            found = c.offsets_for_times(asked, timeout=30)
            assert {tp.partition: tp.offset for tp in found} == {
                part: acked[(part, 1)] for part in range(PARTITIONS)
            }
            c.assign([TopicPartition(topic, part, 0) for part in range(PARTITIONS)])
            got: dict[int, list[tuple[int, bytes]]] = {}
            deadline = time.monotonic() + 60
            while (
                sum(len(v) for v in got.values()) < PARTITIONS * ROUNDS
                and time.monotonic() < deadline
            ):
                for m in c.consume(500, timeout=1):
                    assert m.error() is None, m.error()
                    got.setdefault(m.partition(), []).append((m.offset(), m.value()))
        finally:
            c.close()
        for part in range(PARTITIONS):
            want = [(acked[(part, r)], f"v-{r}-{part}".encode()) for r in range(ROUNDS)]
            assert got.get(part) == want, (part, got.get(part), want)
    finally:
        group.close(show_logs=False)
