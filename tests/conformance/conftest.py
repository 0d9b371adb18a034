"""Session fixtures of the conformance suite: one Kafka broker, one Floe agent.

The Kafka broker is :func:`tests.fixtures.kafka_broker.kafka_broker` (jars
resolved from Maven Central on first use and cached in ``.cache/kafka``). The
Floe agent runs in-process on SQLite and a ``file://`` store, with a short
flush interval so acknowledgements come quickly.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conformance._harness import Target
from tests.fixtures.agent import start_agent


@pytest.fixture(scope="session")
def floe_target(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Target]:
    agent = start_agent(Path(tmp_path_factory.mktemp("floe-conformance")), flush_interval_ms=5)
    try:
        yield Target("floe", agent.bootstrap)
    finally:
        agent.stop()


@pytest.fixture(scope="session")
def kafka_target(kafka_broker) -> Target:  # type: ignore[no-untyped-def]
    return Target("kafka", kafka_broker.bootstrap)
