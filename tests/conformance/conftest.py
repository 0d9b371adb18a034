"""Session fixtures of the conformance suite: one Kafka broker, one Floe agent.

The Kafka broker is :func:`tests.fixtures.kafka_broker.kafka_broker` (jars
resolved from Maven Central on first use and cached in ``.cache/kafka``). The
Floe agent runs in-process on SQLite and a ``file://`` store, with a short
flush interval so acknowledgements come quickly; retention scenarios run the
compactor's retention pass on it (Kafka's broker checks every second).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from compactor.gc import retention_pass
from kafka_protocol.messages import FindCoordinatorRequest, OffsetFetchRequest
from metastore.base import system_clock_ms
from tests.conformance._harness import Target
from tests.fixtures.agent import start_agent


@pytest.fixture(scope="session")
def floe_target(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Target]:
    agent = start_agent(Path(tmp_path_factory.mktemp("floe-conformance")), flush_interval_ms=5)

    def retention() -> None:  # what the compactor's retention phase does, once
        meta = agent.broker.meta

        async def one() -> None:
            topics = {t.id: t for t in await meta.list_topics()}
            await retention_pass(meta, topics, system_clock_ms(), 10_000)

        agent.call(one())

    try:
        yield Target("floe", agent.bootstrap, retention_pass=retention)
    finally:
        agent.stop()


@pytest.fixture(scope="session")
def kafka_target(kafka_broker) -> Target:  # type: ignore[no-untyped-def]
    t = Target("kafka", kafka_broker.bootstrap)
    warm_group_coordinator(t)
    return t


def warm_group_coordinator(t: Target, timeout: float = 60) -> None:
    """Kafka creates __consumer_offsets on the first FindCoordinator and answers group
    requests NOT_COORDINATOR / COORDINATOR_LOAD_IN_PROGRESS until it is loaded; the
    scenarios send raw group requests the way a client does after FindCoordinator.
    Without this, a group or offsets scenario run alone (or first) failed on Kafka."""
    group = t.group("warm")
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = t.raw(FindCoordinatorRequest(key=group, key_type=0), 3)
        fetched = t.raw(OffsetFetchRequest(group_id=group, topics=None), 7)
        if found.error_code == 0 and fetched.error_code == 0:
            return
        time.sleep(0.1)  # bounded poll: the coordinator finishes loading
    raise TimeoutError(f"Kafka's group coordinator not ready after {timeout}s")
