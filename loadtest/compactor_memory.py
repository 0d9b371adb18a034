"""How much memory a compactor merge task holds per input byte: the number the
Terraform module sizes the compactor's settings from (``compactor_memory``).

Seeds ``--objects`` L0 segments of ``--object-mib`` MiB (one topic, 8
partitions, 1 KiB records, uncompressed) into a SQLite metastore and a
``file://`` store in a temp dir, then runs one forced compactor pass in this
process with one task at a time (``concurrency=1``, ``max_input_bytes`` = all
of it) and reports the peak RSS growth over the input size.

    python -m loadtest.compactor_memory --objects 16 --object-mib 16
"""

from __future__ import annotations

import argparse
import asyncio
import resource
import tempfile
import time
from pathlib import Path
from typing import Any

MiB = 1024 * 1024


def _rss_mib() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def _peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


async def run(objects: int, object_mib: int) -> dict[str, Any]:
    from compactor.config import CompactorConfig
    from compactor.runner import Compactor
    from kafka_protocol.records import RecordBatchBuilder
    from loadtest.segments import put_segment
    from metastore import open_metastore
    from objectstore import open_object_store
    from objectstore.segment import BatchMeta, SegmentBuilder

    tmp = Path(tempfile.mkdtemp(prefix="floe-compactor-mem-"))
    meta = await open_metastore(f"sqlite:///{tmp / 'meta.db'}")
    store = open_object_store(f"file://{tmp / 'objects'}")
    created = await meta.create_topic("mem", 8)
    assert created.topic is not None, created
    topic_id = created.topic.id
    value = b"x" * 1024
    now_ms = int(time.time() * 1000)  # inside retention
    per_batch = 64  # records of 1 KiB
    batches_per_object = object_mib * MiB // (per_batch * 1024)
    for _n in range(objects):
        sb = SegmentBuilder()
        for i in range(batches_per_object):
            b = RecordBatchBuilder()
            for r in range(per_batch):
                b.append(None, value, (), timestamp_ms=now_ms + r)
            data = b.build()
            sb.add(topic_id, i % 8, data, BatchMeta.from_record_batch(data))
        await put_segment(store, meta, sb, "l0/")
        del sb
    input_mib = objects * object_mib
    cfg = CompactorConfig(
        concurrency=1, max_inputs=objects, max_input_bytes=int(input_mib * 1.2 + 1) * MiB, l0_trigger=2,
        parquet_min_level=99,
    )  # fmt: skip
    base_rss, base_peak = _rss_mib(), _peak_mib()
    t0 = time.perf_counter()
    summary = await Compactor(meta, store, cfg).run_pass(force=True, orphans=False)
    took = time.perf_counter() - t0
    peak = _peak_mib()
    await meta.close()
    await store.close()
    return {
        "input_mib": float(input_mib),
        "rss_before_mib": base_rss,
        "peak_growth_mib": peak - max(base_rss, base_peak),
        "peak_mib": peak,
        "seconds": took,
        "lines": summary.lines(),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--objects", type=int, default=16)
    ap.add_argument("--object-mib", type=int, default=16)
    args = ap.parse_args()
    r = asyncio.run(run(args.objects, args.object_mib))
    for line in r.pop("lines"):
        print(line)
    print(
        f"merge of {r['input_mib']:.0f} MiB in one task: peak RSS {r['peak_mib']:.0f} MiB "
        f"(+{r['peak_growth_mib']:.0f} MiB over {r['rss_before_mib']:.0f} MiB before the pass, "
        f"{r['peak_growth_mib'] / r['input_mib']:.2f} x the input) in {r['seconds']:.1f} s"
    )


if __name__ == "__main__":
    main()
