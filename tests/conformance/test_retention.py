"""Retention against Kafka 4.1 and Floe: a Kafka broker of its own that checks
retention every second (the suite's shared broker keeps Kafka's 5-minute check,
so the other scenarios' records stamped years ago stay), Floe with the
compactor's retention pass run by the scenario (``Target.retention_pass``)."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest

from loadtest.kafka_broker import KafkaBroker, KafkaUnavailable
from tests.conformance._harness import Target, compare
from tests.conformance.sc_retention import retention_earliest

pytestmark = [pytest.mark.conformance, pytest.mark.interop, pytest.mark.timeout(300)]


@pytest.fixture(scope="module")
def retention_kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Target]:
    try:
        broker = KafkaBroker.start(
            workdir=tmp_path_factory.mktemp("kafka-retention"),
            # The first retention check comes after log.initial.task.delay.ms (30 s by default).
            overrides={"log.retention.check.interval.ms": "1000", "log.initial.task.delay.ms": "100"},
        )
    except KafkaUnavailable as e:
        pytest.skip(str(e))
    try:
        yield Target("kafka", broker.bootstrap)
    finally:
        broker.stop()


def test_retention_earliest(retention_kafka: Target, floe_target: Target) -> None:
    # Both sides at once, as test_conformance runs every scenario: each waits out the
    # same 3 s for a log start that must not move.
    with ThreadPoolExecutor(2, thread_name_prefix="retention") as pool:
        fk, ff = pool.submit(retention_earliest, retention_kafka), pool.submit(retention_earliest, floe_target)
        kafka, floe = fk.result(), ff.result()
    assert kafka["log_start"] == 10, kafka  # the scenario itself works on Kafka
    diffs = compare("retention_earliest", kafka, floe)
    assert not [d for d in diffs if d.allow is None], "\n".join(f"  {d.path}: kafka={d.kafka!r} floe={d.floe!r}" for d in diffs)
