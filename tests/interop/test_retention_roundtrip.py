"""Issue 43: records acknowledged right after CreateTopics were read back as nothing.

The interop helpers stamp records in Nov 2023 (``TS_BASE``), older than the
default ``retention.ms`` (7 days). ``floe dev``'s compactor enforces retention
on every pass (10 s), so a pass landing between the producer's acks and the
consumer's read removed them: the consumer's fetch from offset 0 was out of
range, librdkafka reset to ``latest`` and read nothing for 30 s. With two
workers the partitions' batches are committed by different workers, in
different objects, so a pass could take one partition and not the others.

Here the retention pass runs at exactly that moment (in-process, on the agent's
own metastore): the helpers' topics must keep every acknowledged record, and a
topic with the default retention must lose them the Kafka way (log start moved
to the high watermark, never an error or a gap).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import pytest

from compactor.gc import retention_pass
from metastore import open_metastore
from tests.fixtures.agent_process import on_backend
from tests.interop._clients import (
    assert_same,
    by_partition,
    confluent_consume,
    confluent_produce,
    create_topic,
    make_records,
    unique_topic,
)

pytestmark = [pytest.mark.interop, pytest.mark.timeout(180)]

PARTITIONS = 3
PER_PARTITION = 50


async def _retention_now(metastore_url: str) -> dict[str, list[tuple[int, int]]]:
    """One retention pass of the compactor now; each topic's (log start, high watermark)."""
    meta = await open_metastore(metastore_url)
    try:
        topics = {t.id: t for t in await meta.list_topics()}
        await retention_pass(meta, topics, int(time.time() * 1000), 10_000)
        out: dict[str, list[tuple[int, int]]] = {}
        for t in topics.values():
            offs = (await meta.topic_offsets(t.id)).partitions
            out[t.name] = [(o.log_start_offset, o.high_watermark) for o in offs]
        return out
    finally:
        await meta.close()


@on_backend("sqlite-file")
def test_acknowledged_records_survive_a_retention_pass(
    agent_process_factory: Callable[..., Any],
) -> None:
    agent = agent_process_factory()
    bootstrap = agent.bootstrap
    kept = unique_topic("rt-kept")
    create_topic(bootstrap, kept, PARTITIONS)
    acked = confluent_produce(bootstrap, kept, make_records("kept", PARTITIONS, PER_PARTITION))
    assert len(acked) == PARTITIONS * PER_PARTITION

    # The same records in a topic with the default retention.ms (7 days).
    from confluent_kafka.admin import AdminClient, NewTopic

    default = unique_topic("rt-default")
    admin = AdminClient({"bootstrap.servers": bootstrap})  # (kept alive until the answer)
    admin.create_topics([NewTopic(default, PARTITIONS, 1)])[default].result(30)
    old = confluent_produce(bootstrap, default, make_records("old", PARTITIONS, PER_PARTITION))

    offsets = asyncio.run(_retention_now(agent.backend.metastore))

    assert offsets[kept] == [(0, PER_PARTITION)] * PARTITIONS
    counts = {p: len(rs) for p, rs in by_partition(acked).items()}
    assert_same(acked, confluent_consume(bootstrap, kept, counts), what="after a retention pass")
    # Kafka's semantics for the default topic: 2023 records are past retention.ms.
    assert len(old) == PARTITIONS * PER_PARTITION
    assert offsets[default] == [(PER_PARTITION, PER_PARTITION)] * PARTITIONS
