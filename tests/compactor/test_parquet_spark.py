"""Parquet: written by the compactor, read back by Kafka consumers (rebuilt batches),
pyarrow and Spark; and the Spark runner gives the in-process runner's result."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow.parquet as papq
import pytest

from agent.fetch.leases import TTL_MS as FETCH_LEASE_TTL_MS
from compactor.config import CompactorConfig
from compactor.runner import Compactor
from compactor.spark import SparkExecutor
from kafka_protocol.compression import Compression
from metastore import Metastore, open_metastore
from metastore.base import system_clock_ms
from objectstore import open_object_store
from objectstore.base import ObjectStore
from objectstore.parquet import kafka_schema
from tests.compactor.agent_helpers import SyncCompactor, consume_all, produce
from tests.compactor.helpers import commit_segment, make_batch, read_partition
from tests.compactor.test_agent_e2e import create_topic
from tests.metastore.helpers import FakeClock

NOW = 1_700_000_000_000


def parquet_rows(paths: list[str]) -> list[tuple[int, int, bytes | None, bytes | None]]:
    rows = []
    for path in paths:
        t = papq.read_table(path)
        assert t.schema.remove_metadata() == kafka_schema()
        for r in t.to_pylist():
            rows.append((r["partition"], r["offset"], r["key"], r["value"]))
    return sorted(rows)


@pytest.mark.slow
@pytest.mark.interop
def test_parquet_only_data_served_to_kafka_pyarrow_spark(
    agent_factory: Callable[..., Any], spark: Any
) -> None:
    agent = agent_factory(flush_interval_ms=5)
    create_topic(agent.bootstrap, "pq", 2, **{"floe.parquet.enable": "true"})
    rows = [
        (i % 2, (b"k%d" % i) if i % 7 else None, b"value-%d" % i * (1 + i % 4)) for i in range(600)
    ]
    for c in range(0, 600, 30):
        produce(
            agent.bootstrap,
            "pq",
            rows[c : c + 30],
            **{"compression.type": ["none", "zstd", "snappy"][c % 3]},
        )
    before = sorted(consume_all(agent.bootstrap, "pq", 2, 600))
    # The compactor's clock (and its metastore's) run past the agent's fetch read leases.
    comp = SyncCompactor(
        agent,
        CompactorConfig(l0_trigger=4, max_inputs=8, delete_grace_ms=0, row_group_rows=64),
        now_ms=lambda: system_clock_ms() + FETCH_LEASE_TTL_MS + 100,
    )
    try:
        s = comp.run_pass()
        assert s.phases["parquet"].committed == 2
        comp.run_pass()  # retired segments are deleted (grace 0)
        assert comp.object_count(0) == 0 and comp.object_count(1) == 0
        assert comp.object_count(2, "parquet") == 2
        files = comp.run(comp.meta.list_parquet_files(comp.run(comp.meta.get_topic("pq")).id, 0))
        assert files and files[0].base_offset == 0 and files[-1].last_offset == 299
        # Only Parquet is left: segments are gone from storage.
        keys = comp.run(_keys(comp.store))
        assert all(k.endswith(".parquet") for k in keys), keys
        after = sorted(consume_all(agent.bootstrap, "pq", 2, 600))
        assert after == before
        # The file store escapes key characters in file names: copy the objects out
        # (a Spark source reads them from object storage by key).
        out = agent.data_dir / "parquet-copy"
        out.mkdir()
        paths = []
        for i, k in enumerate(sorted(keys)):
            path = out / f"part-{i}.parquet"
            path.write_bytes(comp.run(comp.store.get(k)))
            paths.append(str(path))
        assert parquet_rows(paths) == before
        df = spark.read.parquet(*paths)
        assert [f.name for f in df.schema.fields] == list(kafka_schema().names)
        got = sorted(
            (r["partition"], r["offset"], r["key"] and bytes(r["key"]), bytes(r["value"]))
            for r in df.collect()
        )
        assert got == before
        # Offset-range pruning: row groups of 64 rows.
        md = papq.ParquetFile(paths[0]).metadata
        assert md.num_row_groups == 300 // 64 + 1
    finally:
        comp.close()


async def _keys(store: ObjectStore) -> list[str]:
    return [o.key async for o in store.list("")]


async def _seed_and_compact(
    base: Path, executor_factory: Callable[[str], Any] | None
) -> dict[str, Any]:
    """Seed identical data in ``base`` and run one pass; return a comparable result."""
    (base / "objects").mkdir(parents=True)
    clock = FakeClock(NOW + 10_000)
    meta: Metastore = await open_metastore(f"sqlite:///{base / 'meta.db'}", now_ms=clock)
    url = f"file://{base / 'objects'}"
    store = open_object_store(url)
    try:
        t1 = await meta.create_topic("plain", 2)
        t2 = await meta.create_topic("table", 2, {"floe.parquet.enable": "true"})
        t3 = await meta.create_topic(
            "keyed", 1, {"cleanup.policy": "compact", "delete.retention.ms": "0"}
        )
        ids = [t.topic.id for t in (t1, t2, t3) if t.topic is not None]
        for i in range(12):
            batches: list[tuple[uuid.UUID, int, bytes]] = []
            for tid in ids[:2]:
                for p in range(2):
                    recs = [(b"k%d" % j, b"%d-%d-%d" % (i, p, j)) for j in range(4)]
                    batches.append(
                        (tid, p, make_batch(recs, NOW + i, Compression.GZIP, [("h", b"x")]))
                    )
            batches.append((ids[2], 0, make_batch([(b"k%d" % (i % 3), b"v%d" % i)], NOW + i)))
            await commit_segment(meta, store, f"agent/{i:04d}", batches)
        cfg = CompactorConfig(
            l0_trigger=4, l1_trigger=2, max_inputs=4, delete_grace_ms=0, orphan_grace_ms=10**9
        )
        executor = executor_factory(url) if executor_factory else None
        summary = await Compactor(meta, store, cfg, executor=executor, now_ms=clock).run_pass()
        result: dict[str, Any] = {
            "phases": {
                k: (v.tasks, v.committed, v.batches, v.records_dropped)
                for k, v in summary.phases.items()
            }
        }
        for tid in ids:
            topic = await meta.get_topic(tid)
            assert topic is not None
            for p in range(topic.partitions):
                rows = await meta.partition_batches(tid, p, formats=("segment", "parquet"))
                result[f"{topic.name}/{p}/rows"] = [
                    (
                        b.base_offset,
                        b.last_offset,
                        b.record_count,
                        b.byte_len,
                        b.object_key.endswith(".parquet"),
                    )
                    for b in rows
                ]
                result[f"{topic.name}/{p}/data"] = await read_partition(meta, store, tid, p)
        result["levels"] = [len(await meta.list_compaction_objects(lv)) for lv in range(3)]
        return result
    finally:
        await store.close()
        await meta.close()


@pytest.mark.slow
def test_spark_runner_matches_in_process(tmp_path: Path, spark: Any) -> None:
    local = asyncio.run(_seed_and_compact(tmp_path / "local", None))
    on_spark = asyncio.run(
        _seed_and_compact(tmp_path / "spark", lambda url: SparkExecutor(spark, url))
    )
    assert local == on_spark
    assert local["phases"]["merge L0->L1"][:2] == (3, 3)
    assert local["phases"]["parquet"][:2] == (2, 2)
    assert local["phases"]["merge L1->L2"][1] == 1
    assert local["phases"]["merge L1->L2"][3] == 9  # 12 keyed records, 3 keys
    assert len(local["keyed/0/data"]) == 3
    assert all(r[4] for r in local["table/0/rows"])
