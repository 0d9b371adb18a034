"""A day of compactor passes: Parquet objects per partition with and without merges.

Simulates ``--passes`` compactor passes ``--interval-s`` apart (default: 288
passes of 5 minutes, one day) on an injected clock: before each pass,
``--records`` records per partition (``--value-bytes`` each, one batch per
partition per pass) are committed as one agent segment, so every pass converts
each partition's new data into one more Parquet object (``parquet_min_level=0``,
no L0 trigger). Runs once with the Parquet merge step off and once on (the
config's defaults otherwise), on a SQLite metastore in a temp dir and a
``memory://`` (or ``--store file``) object store, and prints per mode: Parquet
objects per partition at the end and at most during the day, bytes per object,
bytes the merge step rewrote (over the Parquet bytes the conversions wrote),
compactor CPU seconds (``time.process_time``), whether every record is still
in the Parquet objects, and the objects per partition after one more pass an
hour later with no new data (``parquet_merge_quiet_ms``).

    python -m loadtest.parquet_passes --passes 288 --partitions 4 --records 92
"""

from __future__ import annotations

import argparse
import asyncio
import random
import tempfile
import time
from pathlib import Path
from typing import Any


class _Clock:
    def __init__(self, now: int) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


async def run(
    merge: bool, passes: int, partitions: int, records: int, value_bytes: int, store_kind: str,
    interval_ms: int,
) -> dict[str, Any]:  # fmt: skip
    from compactor.config import CompactorConfig
    from compactor.runner import Compactor
    from kafka_protocol.compression import Compression
    from kafka_protocol.records import RecordBatchBuilder
    from loadtest.segments import put_segment
    from metastore import open_metastore
    from objectstore import open_object_store
    from objectstore.segment import BatchMeta, SegmentBuilder

    tmp = Path(tempfile.mkdtemp(prefix="floe-parquet-passes-"))
    clock = _Clock(int(time.time() * 1000))
    meta = await open_metastore(f"sqlite:///{tmp / 'meta.db'}", now_ms=clock)
    url = "memory://" if store_kind == "memory" else f"file://{tmp / 'objects'}"
    store = open_object_store(url)
    created = await meta.create_topic("day", partitions, {"floe.parquet.enable": "true"})
    assert created.topic is not None, created
    tid = created.topic.id
    cfg = CompactorConfig(
        l0_trigger=1_000_000, parquet_min_level=0, parquet_merge_enable=merge, orphan_grace_ms=0
    )
    compactor = Compactor(meta, store, cfg, now_ms=clock)
    rng = random.Random(7)
    cpu = 0.0
    most = 0
    converted = rewritten = 0
    for n in range(passes):
        sb = SegmentBuilder()
        for p in range(partitions):
            b = RecordBatchBuilder(Compression.ZSTD, producer_id=1, producer_epoch=0, base_sequence=n)
            for i in range(records):
                # half random, half text: compresses like JSON-ish values do
                text = (f"{n}-{p}-{i}-".encode() * value_bytes)[: value_bytes - value_bytes // 2]
                value = rng.randbytes(value_bytes // 2) + text
                b.append(f"k{i % 100}".encode(), value, (), timestamp_ms=clock.now + i)
            data = b.build()
            sb.add(tid, p, data, BatchMeta.from_record_batch(data))
        await put_segment(store, meta, sb)
        t0 = time.process_time()
        s = await compactor.run_pass(orphans=False)
        cpu += time.process_time() - t0
        converted += s.phases["parquet"].bytes_written
        if "parquet merge" in s.phases:
            rewritten += s.phases["parquet merge"].bytes_written
        counts = [len(await meta.list_parquet_files(tid, p)) for p in range(partitions)]
        most = max(most, *counts)
        clock.now += interval_ms
    sizes = {o.key: o.size for o in await meta.list_compaction_objects(2, fmt="parquet", limit=1 << 30)}
    files = [f for p in range(partitions) for f in await meta.list_parquet_files(tid, p)]
    rows = sum(f.row_count for f in files)
    per_object = [sizes[f.object_key] for f in files]
    # The next hour brings no data: one more pass after it (a quiet partition's merge).
    clock.now += cfg.parquet_merge_quiet_ms
    await compactor.run_pass(orphans=False)
    quiet = [len(await meta.list_parquet_files(tid, p)) for p in range(partitions)]
    await meta.close()
    await store.close()
    return {
        "merge": merge,
        "objects_per_partition": len(files) / partitions,
        "max_objects_per_partition": most,
        "bytes_mean": sum(per_object) / max(1, len(per_object)),
        "bytes_min": min(per_object, default=0),
        "bytes_max": max(per_object, default=0),
        "rows_ok": rows == passes * partitions * records,
        "converted": converted,
        "rewritten": rewritten,
        "cpu_s": cpu,
        "quiet_objects_per_partition": sum(quiet) / partitions,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--passes", type=int, default=288)
    ap.add_argument("--interval-s", type=int, default=300)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--records", type=int, default=92, help="records per partition per pass")
    ap.add_argument("--value-bytes", type=int, default=100)
    ap.add_argument("--store", choices=["memory", "file"], default="memory")
    ap.add_argument("--mode", choices=["both", "on", "off"], default="both")
    args = ap.parse_args()
    modes = {"both": [False, True], "on": [True], "off": [False]}[args.mode]
    print(
        f"{args.passes} passes {args.interval_s} s apart, {args.partitions} partition(s), "
        f"{args.records} records of {args.value_bytes} B per partition per pass, {args.store} store"
    )
    for merge in modes:
        r = asyncio.run(
            run(merge, args.passes, args.partitions, args.records, args.value_bytes, args.store,
                args.interval_s * 1000)
        )  # fmt: skip
        amp = r["rewritten"] / r["converted"] if r["converted"] else 0.0
        print(
            f"merge {'on ' if merge else 'off'}: {r['objects_per_partition']:.1f} Parquet object(s) "
            f"per partition at the end (at most {r['max_objects_per_partition']} during the day), "
            f"{r['bytes_mean'] / 1024:.1f} KiB per object (min {r['bytes_min'] / 1024:.1f}, "
            f"max {r['bytes_max'] / 1024:.1f}); merges rewrote {r['rewritten'] / 1024:.0f} KiB = "
            f"{amp:.2f} x the {r['converted'] / 1024:.0f} KiB converted; compactor CPU "
            f"{r['cpu_s']:.1f} s ({r['cpu_s'] / args.passes * 1000:.0f} ms per pass); "
            f"all rows present: {r['rows_ok']}; an hour later with no new data: "
            f"{r['quiet_objects_per_partition']:.1f} object(s) per partition"
        )


if __name__ == "__main__":
    main()
