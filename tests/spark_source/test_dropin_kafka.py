"""Drop-in: the same PySpark job against Apache Kafka with ``format("kafka")`` (Spark's own
Kafka source, jars from Maven Central) and against Floe with ``format("floe")`` - only the
format name changes, ``kafka.bootstrap.servers`` is the only connection option - produces
identical rows (batch reads, offset ranges, timestamps, an aggregate, a streaming query)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.compactor.test_agent_e2e import create_topic
from tests.fixtures.java import maven_classpath

pytestmark = [pytest.mark.slow, pytest.mark.interop]

ROOT = Path(__file__).resolve().parents[2]
# Spark's Kafka source for Spark 4.x (the newest on Maven Central; 4.3 jars are not published
# there yet), without what PySpark ships itself.
KAFKA_SOURCE = "org.apache.spark:spark-sql-kafka-0-10_2.13:4.2.0"
KEEP = ("spark-sql-kafka", "spark-token-provider-kafka", "kafka-clients", "commons-pool2")


def kafka_source_jars() -> str:
    cp = maven_classpath([KAFKA_SOURCE])
    return ":".join(p for p in cp.split(":") if Path(p).name.startswith(KEEP))


def produce(bootstrap: str, topic: str, base_ts: int) -> None:
    from confluent_kafka import Producer

    create_topic(bootstrap, topic, 3)
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "compression.type": "snappy"})
    for i in range(240):
        headers = [("i", b"%d" % i), ("none", None)] if i % 7 == 0 else None
        key = None if i % 11 == 0 else b"key-%d" % (i % 17)
        p.produce(
            topic,
            b"value-%d-" % i + bytes(i % 50),
            key=key,
            partition=i % 3,
            timestamp=base_ts + i * 100,
            headers=headers,
        )
        if i % 40 == 39:
            assert p.flush(30) == 0
    assert p.flush(30) == 0


def test_same_job_kafka_and_floe_identical(
    kafka_broker: Any, agent_factory: Callable[..., Any], tmp_path: Path
) -> None:
    jars = kafka_source_jars()
    agent = agent_factory(flush_interval_ms=5)
    topic = f"dropin-{int(time.time())}"
    base_ts = (int(time.time()) - 3600) * 1000
    produce(kafka_broker.bootstrap, topic, base_ts)
    produce(agent.bootstrap, topic, base_ts)
    cut = base_ts + 101 * 100 + 50  # between two records
    env = dict(os.environ, FLOE_SPARK_JARS=jars, PYTHONPATH=str(ROOT))
    # One driver runs the job on both, Kafka first (one Spark start instead of two).
    subprocess.run(
        [
            sys.executable,
            "-m",
            "tests.spark_source.dropin_job",
            topic,
            str(tmp_path),
            str(cut),
            "kafka",
            kafka_broker.bootstrap,
            "floe",
            agent.bootstrap,
        ],
        env=env,
        cwd=str(tmp_path),
        check=True,
        timeout=600,
    )
    kafka = json.loads((tmp_path / "kafka.json").read_text())
    floe = json.loads((tmp_path / "floe.json").read_text())
    assert len(kafka["all"]) == 240 and kafka["counts"] == [[0, 80], [1, 80], [2, 80]]
    assert kafka["timestamps"] and kafka["ranges"]
    for part in ("all", "ranges", "timestamps", "counts", "stream", "stream_batches"):
        assert floe[part] == kafka[part], part
