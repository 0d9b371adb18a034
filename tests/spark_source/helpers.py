"""Seeding Floe storage for the Spark source tests: segments committed straight into a
SQLite metastore + file store (as the agent would), with every codec, and a compactor
pass that moves part of the data into Parquet."""

from __future__ import annotations

import asyncio
import struct
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import cramjam
import google_crc32c

from compactor.config import CompactorConfig
from compactor.runner import Compactor
from kafka_protocol.compression import Compression
from kafka_protocol.records import RecordBatchBuilder
from metastore import Metastore, open_metastore
from objectstore import open_object_store
from tests.compactor.helpers import commit_segment

Row = tuple[str, int, int, bytes | None, bytes | None, int, tuple[tuple[str, bytes | None], ...]]
# (topic, partition, offset, key, value, timestamp ms, headers)

CODECS = [Compression.NONE, Compression.GZIP, Compression.SNAPPY, Compression.LZ4, Compression.ZSTD]


def raw_snappy(batch: bytes) -> bytes:
    """``batch`` (uncompressed) re-encoded with raw (unframed) snappy, as librdkafka does."""
    header, records = batch[:61], batch[61:]
    body = bytes(cramjam.snappy.compress_raw(records))
    buf = bytearray(header + body)
    struct.pack_into(">i", buf, 8, len(buf) - 12)
    (attrs,) = struct.unpack_from(">h", buf, 21)
    struct.pack_into(">h", buf, 21, (attrs & ~0x07) | int(Compression.SNAPPY))
    struct.pack_into(">I", buf, 17, google_crc32c.value(bytes(buf[21:])))
    return bytes(buf)


def make_batch(
    recs: Sequence[tuple[bytes | None, bytes | None, int, tuple[tuple[str, bytes | None], ...]]],
    codec: Compression | str,
) -> bytes:
    b = RecordBatchBuilder(codec if isinstance(codec, Compression) else Compression.NONE)
    for k, v, ts, hs in recs:
        b.append(k, v, list(hs), timestamp_ms=ts)
    data = b.build()
    return raw_snappy(data) if codec == "raw-snappy" else data


@dataclass
class Seeded:
    metastore: str
    objects: str
    rows: list[Row]
    topic_ids: dict[str, uuid.UUID]

    def expected(self, topic: str | None = None) -> list[Row]:
        return sorted(r for r in self.rows if topic is None or r[0] == topic)


T0 = (int(time.time() * 1000) // 1000 - 3600) * 1000  # recent: retention keeps it


async def seed_async(
    base: Path,
    *,
    topics: dict[str, int] | None = None,
    segments: int = 6,
    per_batch: int = 5,
    config: dict[str, dict[str, str]] | None = None,
    start_segment: int = 0,
    existing: Seeded | None = None,
    objects: str | None = None,
) -> Seeded:
    """Commit ``segments`` objects, each with one batch per partition of every topic.

    ``objects``: the object store URL (e.g. an ``s3://`` one); default a file store
    under ``base`` (with ``existing``, that seed's store is used).
    """
    topics = topics or {"t": 2}
    murl = f"sqlite:///{base / 'meta.db'}"
    ourl = objects or (existing.objects if existing else f"file://{base / 'objects'}")
    if ourl.startswith("file://"):
        (base / "objects").mkdir(parents=True, exist_ok=True)
    meta = await open_metastore(murl)
    store = open_object_store(ourl)
    seeded = existing or Seeded(murl, ourl, [], {})
    try:
        for name, n in topics.items():
            t = await meta.get_topic(name)
            if t is None:
                res = await meta.create_topic(name, n, (config or {}).get(name))
                assert res.topic is not None, res
                t = res.topic
            seeded.topic_ids[name] = t.id
        codecs: list[Any] = [*CODECS, "raw-snappy"]
        for i in range(start_segment, start_segment + segments):
            batches = []
            meta_rows = []
            for name, n in sorted(topics.items()):
                tid = seeded.topic_ids[name]
                for p in range(n):
                    recs = []
                    for j in range(per_batch):
                        k = None if (i + j) % 4 == 0 else b"k-%d-%d" % (i, j)
                        v = (
                            None
                            if (i * 7 + j) % 11 == 5
                            else b"v-%s-%d-%d-%d"
                            % (
                                name.encode(),
                                p,
                                i,
                                j,
                            )
                            * (1 + j % 3)
                        )
                        hs: tuple[tuple[str, bytes | None], ...] = (
                            (
                                ("h", b"%d" % j),
                                ("n", None),
                            )
                            if j % 2
                            else ()
                        )
                        recs.append((k, v, T0 + i * 1000 + j, hs))
                    batches.append((tid, p, make_batch(recs, codecs[(i + p) % len(codecs)])))
                    meta_rows.append((name, p, recs))
            bases = await commit_segment(meta, store, f"agent/seg-{i:05d}", batches)
            for (name, p, recs), base_off in zip(meta_rows, bases, strict=True):
                for j, (k, v, ts, hs) in enumerate(recs):
                    seeded.rows.append((name, p, base_off + j, k, v, ts, hs))
        return seeded
    finally:
        await store.close()
        await meta.close()


def seed(base: Path, **kw: Any) -> Seeded:
    return asyncio.run(seed_async(base, **kw))


async def _compact(seeded: Seeded, cfg: CompactorConfig) -> Any:
    meta: Metastore = await open_metastore(seeded.metastore)
    store = open_object_store(seeded.objects)
    try:
        return await Compactor(meta, store, cfg).run_pass()
    finally:
        await store.close()
        await meta.close()


def compact(seeded: Seeded, **kw: Any) -> Any:
    """One compactor pass (Parquet for topics with ``floe.parquet.enable``)."""
    cfg = CompactorConfig(
        **{
            "l0_trigger": 2,
            "max_inputs": 64,
            "delete_grace_ms": 0,
            "parquet_min_level": 0,
            "row_group_rows": 8,
            **kw,
        }
    )
    return asyncio.run(_compact(seeded, cfg))


async def _call(url: str, fn: Any) -> Any:
    meta: Metastore = await open_metastore(url)
    try:
        return await fn(meta)
    finally:
        await meta.close()


def with_meta(url: str, fn: Any) -> Any:
    return asyncio.run(_call(url, fn))
