"""The Parquet merge planner: which small Parquet objects of a partition to merge.

Where it sits: driver side, after the Parquet phase of a pass
(:mod:`compactor.runner`). Every pass converts a partition's new segment data
into one more Parquet object, so a busy day leaves hundreds of small files per
partition; this step turns groups of them into :class:`ParquetMergeTask` s
(executed by :mod:`compactor.parquet_merge`, committed with
``Metastore.swap_batches`` like every other task).

Candidates are a partition's live Parquet objects smaller than
``parquet_merge_small_bytes`` and older than ``parquet_merge_min_age_ms``. A
group is a run of candidates adjacent in the partition's offset order (no other
Parquet object between them, offset ranges not overlapping) and, for Iceberg
topics, of one UTC day (the table is partitioned by day, one file per day).
Within a run:

* size tiers: tier 0 below ``small / factor**3``, then one tier per factor of
  size; ``parquet_merge_factor`` adjacent objects of one tier are merged into
  one (of the next tier). Each record is rewritten about once per tier, and a
  partition keeps at most ``factor - 1`` objects per tier plus its large ones:
  bounded by size, not by the number of passes;
* quiet partitions: once a partition's newest Parquet object is older than
  ``parquet_merge_quiet_ms`` (it stopped receiving data), its runs are merged
  whole, whatever the tiers; nothing new arrives, so that happens once.

Groups never exceed ``parquet_merge_target_bytes`` of input.
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Mapping, Sequence

from compactor.config import CompactorConfig
from compactor.planner import iceberg_enabled, parquet_enabled
from compactor.tasks import ParquetMergeTask, new_task_id
from metastore.protocol import Metastore
from metastore.types import CompactionObject, ParquetFileInfo, TopicInfo

PARQUET_LEVEL = 2  # the level the Parquet phase writes (compactor.execute)
DAY_MS = 86_400_000
_TIERS = 3  # tiers below the small limit, above tier 0


def tier(size: int, cfg: CompactorConfig) -> int:
    floor = max(1, cfg.parquet_merge_small_bytes // cfg.parquet_merge_factor**_TIERS)
    if size < floor:
        return 0
    return 1 + int(math.log(size / floor, cfg.parquet_merge_factor) + 1e-9)


def _day(f: ParquetFileInfo) -> int | None:
    lo, hi = f.min_timestamp // DAY_MS, f.max_timestamp // DAY_MS
    return lo if lo == hi else None


def _runs(
    files: Sequence[ParquetFileInfo],
    objects: Mapping[str, CompactionObject],
    cfg: CompactorConfig,
    now_ms: int,
    by_day: bool,
) -> list[list[ParquetFileInfo]]:
    """Maximal runs of adjacent candidates (offset order)."""
    runs: list[list[ParquetFileInfo]] = []
    current: list[ParquetFileInfo] = []
    for f in sorted(files, key=lambda f: (f.base_offset, f.last_offset)):
        o = objects.get(f.object_key)
        ok = (
            o is not None
            and o.size < cfg.parquet_merge_small_bytes
            and now_ms - o.created_at_ms >= cfg.parquet_merge_min_age_ms
            and (not by_day or _day(f) is not None)
        )
        if current and (
            not ok
            or f.base_offset <= current[-1].last_offset
            or (by_day and _day(f) != _day(current[-1]))
        ):
            runs.append(current)
            current = []
        if ok:
            current.append(f)
    if current:
        runs.append(current)
    return [r for r in runs if len(r) > 1]


def _pack(run: Sequence[ParquetFileInfo], sizes: Mapping[str, int], target: int) -> list[list[str]]:
    """``run`` cut into groups of at most ``target`` input bytes (single objects dropped)."""
    groups: list[list[str]] = []
    current: list[str] = []
    total = 0
    for f in run:
        size = sizes[f.object_key]
        if current and total + size > target:
            groups.append(current)
            current, total = [], 0
        current.append(f.object_key)
        total += size
    groups.append(current)
    return [g for g in groups if len(g) > 1]


def choose_groups(
    files: Sequence[ParquetFileInfo],
    objects: Mapping[str, CompactionObject],
    cfg: CompactorConfig,
    now_ms: int,
    *,
    by_day: bool = False,
) -> list[list[str]]:
    """Groups of object keys (offset order) to merge, one output object each."""
    if not any(f.object_key in objects for f in files):
        return []
    sizes = {k: o.size for k, o in objects.items()}
    target = cfg.parquet_merge_target_bytes
    newest = max(objects[f.object_key].created_at_ms for f in files if f.object_key in objects)
    quiet = now_ms - newest >= cfg.parquet_merge_quiet_ms
    out: list[list[str]] = []
    for run in _runs(files, objects, cfg, now_ms, by_day):
        if quiet:
            out.extend(_pack(run, sizes, target))
            continue
        i = 0
        while i < len(run):
            t = tier(sizes[run[i].object_key], cfg)
            j = i
            while j < len(run) and tier(sizes[run[j].object_key], cfg) == t:
                j += 1
            same = run[i:j]
            for k in range(0, len(same) - cfg.parquet_merge_factor + 1, cfg.parquet_merge_factor):
                out.extend(_pack(same[k : k + cfg.parquet_merge_factor], sizes, target))
            i = j
    return out


async def plan_parquet_merges(
    meta: Metastore,
    cfg: CompactorConfig,
    topics: Mapping[uuid.UUID, TopicInfo],
    now_ms: int,
) -> list[ParquetMergeTask]:
    """One task per partition with something to merge."""
    if not cfg.parquet_merge_enable:
        return []
    objects = {
        o.key: o
        for o in await meta.list_compaction_objects(PARQUET_LEVEL, fmt="parquet", limit=1 << 30)
    }
    if len(objects) < 2:
        return []
    # Parquet keys end in ``<topic id>/<partition>/<range>.parquet``: partitions with
    # fewer than two candidates are skipped without a query.
    waiting: dict[tuple[str, str], int] = {}
    for o in objects.values():
        if o.size < cfg.parquet_merge_small_bytes and (
            now_ms - o.created_at_ms >= cfg.parquet_merge_min_age_ms
        ):
            tp = tuple(o.key.rsplit("/", 3)[-3:-1])
            if len(tp) == 2:
                waiting[(tp[0], tp[1])] = waiting.get((tp[0], tp[1]), 0) + 1
    tasks: list[ParquetMergeTask] = []
    for topic in sorted(topics.values(), key=lambda t: t.name):
        if not parquet_enabled(topic):
            continue
        for partition in range(topic.partitions):
            if waiting.get((str(topic.id), str(partition)), 0) < 2:
                continue
            files = await meta.list_parquet_files(topic.id, partition)
            if len(files) < 2:
                continue
            groups = choose_groups(files, objects, cfg, now_ms, by_day=iceberg_enabled(topic))
            if not groups:
                continue
            ids = [objects[k].id for g in groups for k in g]
            rows = await meta.batches_in_objects(ids)
            if not rows:
                continue
            tasks.append(
                ParquetMergeTask(
                    new_task_id(),
                    topic.id,
                    topic.name,
                    partition,
                    rows,
                    groups,
                    cfg.row_group_rows,
                    cfg.parquet_prefix,
                    cfg.read_concurrency,
                )
            )
    return tasks
