"""loadtest.run_rows (issue 18's prototype of one index row per (group, partition)
run): the benchmark's number means something only if the run rows hold every
batch it committed, at the offsets it answered, contiguous per partition."""

from __future__ import annotations

import itertools

import asyncpg
import pytest

from loadtest.run_rows import RunRowSequencer, unpack
from metastore import BatchToCommit, ObjectToCommit, open_metastore
from metastore.engine import asyncpg_dsn

pytestmark = pytest.mark.postgres


async def test_run_rows_hold_every_batch_at_its_answered_offset(postgres_url: str) -> None:
    meta = await open_metastore(postgres_url)
    topic = (await meta.create_topic("runs", 5)).topic
    assert topic is not None
    seq = await RunRowSequencer(postgres_url).start()
    answered: dict[tuple[int, int], tuple[int, int, int]] = {}  # (partition, base) -> (last, pos, n)
    try:
        for g in range(3):  # groups of two objects; object 1 skips partition 3
            objects = []
            for o in range(2):
                parts = [p for p in range(5) if not (o == 1 and p == 3)]
                batches = [
                    BatchToCommit(topic.id, p, 100 * p, 100, 1 + (p + o + g) % 4, (p + o + g) % 4, 10, 20, -1, -1, -1)
                    for p in parts
                ]
                objects.append(ObjectToCommit(f"g{g}/o{o}", 1000, "a", batches))
            results = await seq.commit_objects(objects)
            for obj, res in zip(objects, results, strict=True):
                for b, r in zip(obj.batches, res.results, strict=True):
                    answered[(b.partition, r.base_offset)] = (r.base_offset + b.last_offset_delta, b.byte_pos, b.record_count)
        con = await asyncpg.connect(asyncpg_dsn(postgres_url))
        try:
            rows = await con.fetch("SELECT partition, base_offset, last_offset, entries FROM bench_batch_runs")
            hwms = dict(await con.fetch("SELECT partition, high_watermark FROM partitions WHERE topic_id = $1", topic.id))
        finally:
            await con.close()
    finally:
        await seq.close()
        await meta.close()
    assert len(rows) == 3 * 5  # one row per (group, partition), not one per batch
    stored: dict[tuple[int, int], tuple[int, int, int]] = {}
    for partition, base, last, entries in rows:
        batches = unpack(entries)
        assert int(batches["last_offset"][-1]) == last
        start = base
        for b in batches:
            stored[(partition, start)] = (int(b["last_offset"]), int(b["byte_pos"]), int(b["record_count"]))
            assert int(b["last_offset"]) - start + 1 == int(b["record_count"])
            start = int(b["last_offset"]) + 1
    assert stored == answered
    for p in range(5):  # contiguous from 0 to the high watermark
        offsets = sorted((base, last) for (q, base), (last, _, _) in stored.items() if q == p)
        assert offsets[0][0] == 0 and offsets[-1][1] + 1 == hwms[p]
        assert all(a[1] + 1 == b[0] for a, b in itertools.pairwise(offsets))
