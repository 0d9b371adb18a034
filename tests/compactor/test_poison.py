"""A batch the compactor cannot decode (a small gzip inflating past the decompression
cap, accepted by the agent as Kafka accepts it) does not stop the compactor: it is
carried over undecoded into a quarantine segment, reported, and the rest of the
partition is compacted (Parquet conversion and key compaction alike)."""

from __future__ import annotations

import logging

import pytest

from compactor.config import CompactorConfig
from compactor.execute import QUARANTINE_LEVEL
from compactor.metrics import POISONED
from compactor.runner import Compactor
from kafka_protocol.compression import DEFAULT_MAX_DECOMPRESSED_BYTES, Compression
from kafka_protocol.records import RecordBatchBuilder
from metastore import Metastore
from objectstore.base import ObjectStore
from tests.compactor.helpers import commit_segment, make_batch, read_partition
from tests.metastore.helpers import FakeClock

NOW = 1_700_000_000_000


def bomb() -> bytes:
    """A gzip batch of ~100 KB whose one record inflates past the cap (a zip bomb)."""
    b = RecordBatchBuilder(Compression.GZIP)
    b.append(b"bomb", bytes(DEFAULT_MAX_DECOMPRESSED_BYTES + 1024), [], timestamp_ms=NOW)
    data = b.build()
    assert len(data) < 1024 * 1024
    return data


@pytest.mark.parametrize("policy", ["delete", "compact"])
async def test_poisoned_batch_is_carried_over(
    meta: Metastore,
    store: ObjectStore,
    clock: FakeClock,
    policy: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    res = await meta.create_topic(
        "t", 1, {"floe.parquet.enable": "true", "cleanup.policy": policy}
    )
    assert res.topic is not None
    tid = res.topic.id
    poison = bomb()
    for i in range(6):
        recs = [(b"k%d" % (j % 2), b"v-%d-%d" % (i, j)) for j in range(3)]
        batches = [(tid, 0, make_batch(recs, NOW + i, Compression.GZIP))]
        if i == 3:
            batches.append((tid, 0, poison))
        await commit_segment(meta, store, f"agent/s-{i:04d}", batches)
    before = await meta.partition_batches(tid, 0)
    cfg = CompactorConfig(l0_trigger=2, l1_trigger=2, delete_grace_ms=0, parquet_min_level=0)
    n0 = POISONED.labels("t")._value.get()
    comp = Compactor(meta, store, cfg, now_ms=clock)
    with caplog.at_level(logging.WARNING, logger="compactor.runner"):
        s = await comp.run_pass(force=True)
    assert s.phases["parquet"].committed == 1 and s.phases["parquet"].failed == 0
    assert sum(p.poisoned for p in s.phases.values()) >= 1
    assert "cannot be decoded" in caplog.text and "DecompressionError" in caplog.text
    assert POISONED.labels("t")._value.get() > n0
    rows = await meta.partition_batches(tid, 0, formats=("segment", "parquet"))
    if policy == "delete":
        assert [(b.base_offset, b.last_offset) for b in rows] == [
            (b.base_offset, b.last_offset) for b in before
        ]
        assert sum(1 for b in rows if b.object_key.endswith(".parquet")) >= 5
    else:  # key compaction kept the latest value per key; the bomb's keys are unknown
        assert any(b.object_key.endswith(".parquet") for b in rows)
    quarantined = [b for b in rows if b.object_key.startswith("quarantine/")]
    assert [b.base_offset for b in quarantined] == [12]
    assert f"/L{QUARANTINE_LEVEL}/" in quarantined[0].object_key
    # The quarantined batch is served byte-for-byte, as produced; nothing re-converts it.
    got = await store.get(
        quarantined[0].object_key,
        quarantined[0].byte_pos,
        quarantined[0].byte_pos + quarantined[0].byte_len,
    )
    assert got[12:] == poison[12:]  # all but the base offset
    s2 = await comp.run_pass(force=True)
    assert s2.phases["parquet"].tasks == 0
    # Records around it read back through the fetch path (the bomb itself is skipped).
    recs = await read_partition(meta, store, tid, 0, start=13)
    assert recs and recs[0].offset >= 13 and recs[-1].offset == 18
