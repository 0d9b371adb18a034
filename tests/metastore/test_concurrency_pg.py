"""Concurrent committers on Postgres: sorted row locks mean no deadlocks and no gaps.

Eight metastores (eight agents, each with its own connection) commit objects
touching random subsets of 50 partitions, with idempotent producers on part of
the batches. Afterwards every partition's batches must tile ``[0, high
watermark)`` exactly, and agree with the offsets the committers were given.
"""

from __future__ import annotations

import asyncio
import random
import uuid
from collections import defaultdict

import asyncpg
import pytest

from metastore import BatchToCommit, ErrorCode, open_metastore
from metastore.engine import asyncpg_dsn
from tests.metastore.helpers import stored_batches

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

COMMITTERS = 8
COMMITS_EACH = 300
TOPICS = 5
PARTITIONS_PER_TOPIC = 10


async def test_concurrent_commits_are_gapless(postgres_url: str) -> None:
    admin = await open_metastore(postgres_url, auto_migrate=False)
    topic_ids = []
    for n in range(TOPICS):
        result = await admin.create_topic(f"load-{n}", PARTITIONS_PER_TOPIC)
        assert result.topic is not None
        topic_ids.append(result.topic.id)
    partitions = [(t, p) for t in topic_ids for p in range(PARTITIONS_PER_TOPIC)]
    given: dict[tuple[uuid.UUID, int], list[tuple[int, int]]] = defaultdict(list)

    async def committer(index: int) -> None:
        rng = random.Random(index)
        store = await open_metastore(postgres_url, auto_migrate=False, pool_size=1)
        producer_id = (await store.init_producer_id()).producer_id
        sequences: dict[tuple[uuid.UUID, int], int] = defaultdict(int)
        try:
            for n in range(COMMITS_EACH):
                chosen = rng.sample(partitions, rng.randint(1, 20))
                batches = []
                for topic_id, partition in chosen:
                    records = rng.randint(1, 5)
                    if rng.random() < 0.5:
                        seq = sequences[(topic_id, partition)]
                        sequences[(topic_id, partition)] += records
                        batches.append(
                            BatchToCommit(
                                topic_id,
                                partition,
                                0,
                                10,
                                records,
                                records - 1,
                                0,
                                0,
                                producer_id,
                                0,
                                seq,
                            )
                        )
                    else:
                        batches.append(
                            BatchToCommit(topic_id, partition, 0, 10, records, records - 1, 0, 0)
                        )
                results = await store.commit_object(f"c{index}/{n}", 10, f"agent-{index}", batches)
                for b, r in zip(batches, results, strict=True):
                    assert r.error is ErrorCode.NONE, r
                    given[(b.topic_id, b.partition)].append(
                        (r.base_offset, r.base_offset + b.last_offset_delta)
                    )
        finally:
            await store.close()

    await asyncio.wait_for(asyncio.gather(*(committer(i) for i in range(COMMITTERS))), timeout=120)
    await admin.close()

    con = await asyncpg.connect(asyncpg_dsn(postgres_url))
    try:
        hwms = {
            (r["topic_id"], r["partition"]): r["high_watermark"]
            for r in await con.fetch("SELECT * FROM partitions")
        }
        rows = await stored_batches(con)  # run rows unpacked
        objects = await con.fetchval("SELECT count(*) FROM objects WHERE state = 'live'")
    finally:
        await con.close()
    stored: dict[tuple[uuid.UUID, int], list[tuple[int, int]]] = defaultdict(list)
    for topic_id, partition, base, last, _ in rows:
        stored[(topic_id, partition)].append((base, last))
    assert objects == COMMITTERS * COMMITS_EACH
    assert sum(len(v) for v in given.values()) == len(rows)
    for tp in partitions:
        ranges = stored[tp]
        expected_next = 0
        for base, last in ranges:
            assert base == expected_next, f"gap or overlap in {tp} at {base}"
            expected_next = last + 1
        assert hwms[tp] == expected_next
        assert sorted(given[tp]) == ranges
