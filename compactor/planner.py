"""The planner: metastore state -> tasks (driver side, no object bytes).

* L0->L1 / L1->L2 merges: live segment objects of a level, oldest first, in
  groups of ``max_inputs`` (at most ``max_input_bytes``); a level is merged once
  it holds ``l0_trigger`` / ``l1_trigger`` objects. A task takes every batch row
  its objects hold, whatever the partition.
* Key compaction rides on L1->L2 merges: for each partition of a compacted topic
  in the task, the task also takes that partition's rows already in L2 objects,
  so the latest-value-per-key decision sees the partition's cleaned history.
  When the rows hold transactional batches, the spec carries the partition's
  last stable offset and aborted ranges (``Metastore.stable_offsets``).
* Parquet: for topics with ``floe.parquet.enable=true``, a partition's rows in
  segment objects of level >= ``parquet_min_level`` become one Parquet object.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping

from compactor.config import CompactorConfig
from compactor.tasks import CompactSpec, MergeTask, ParquetTask, new_task_id
from metastore.protocol import Metastore
from metastore.topic_config import compacted, effective_config
from metastore.types import StoredBatch, TopicInfo

MAX_LEVEL = 2


def topic_setting(topic: TopicInfo, key: str) -> str:
    return effective_config(topic.config)[key][0]


def is_compacted(topic: TopicInfo) -> bool:
    return compacted(topic.config)


def iceberg_enabled(topic: TopicInfo) -> bool:
    return topic_setting(topic, "floe.iceberg.enable").strip().lower() == "true"


def parquet_enabled(topic: TopicInfo) -> bool:
    return (
        topic_setting(topic, "floe.parquet.enable").strip().lower() == "true"
        or iceberg_enabled(topic)
    )


async def _compact_spec(
    meta: Metastore, topic: TopicInfo, partition: int, rows: list[StoredBatch], now_ms: int
) -> CompactSpec:
    first = await meta.first_batch_offset(topic.id, partition)
    lowest = min(b.base_offset for b in rows)
    cutoff = now_ms - int(topic_setting(topic, "delete.retention.ms"))
    aborted: tuple[tuple[int, int, int], ...] = ()
    stable = -1
    if any(b.is_transactional for b in rows):
        (view,) = await meta.stable_offsets([(topic.id, partition, lowest)])
        stable, aborted = view.last_stable_offset, tuple(view.aborted)
    return CompactSpec(topic.id, partition, cutoff, first is not None and lowest <= first, stable, aborted)


async def plan_merges(
    meta: Metastore,
    level: int,
    cfg: CompactorConfig,
    topics: Mapping[uuid.UUID, TopicInfo],
    now_ms: int,
    *,
    force: bool = False,
) -> list[MergeTask]:
    """Merge tasks for ``level`` (empty when the level is below its trigger)."""
    if level >= MAX_LEVEL:
        return []
    objs = await meta.list_compaction_objects(level)
    trigger = cfg.l0_trigger if level == 0 else cfg.l1_trigger
    if not objs or (len(objs) < trigger and not force):
        return []
    groups: list[list[int]] = []
    current: list[int] = []
    size = 0
    for o in objs:
        if current and (len(current) >= cfg.max_inputs or size + o.size > cfg.max_input_bytes):
            groups.append(current)
            current, size = [], 0
        current.append(o.id)
        size += o.size
    if current and (len(current) >= min(trigger, cfg.max_inputs) or force):
        groups.append(current)
    out_level = level + 1
    target = cfg.l1_target_bytes if out_level == 1 else cfg.l2_target_bytes
    tasks: list[MergeTask] = []
    claimed: set[tuple[uuid.UUID, int]] = set()
    for ids in groups:
        rows = await meta.batches_in_objects(ids)
        if not rows:
            continue
        specs: list[CompactSpec] = []
        if out_level == MAX_LEVEL:
            have = {(b.topic_id, b.partition, b.last_offset) for b in rows}
            for tp in sorted({(b.topic_id, b.partition) for b in rows}):
                topic = topics.get(tp[0])
                if topic is None or not is_compacted(topic):
                    continue
                if tp not in claimed:
                    claimed.add(tp)
                    cleaned = await meta.partition_batches(
                        tp[0], tp[1], min_level=MAX_LEVEL, max_level=MAX_LEVEL
                    )
                    extra = [
                        b for b in cleaned if (b.topic_id, b.partition, b.last_offset) not in have
                    ]
                    rows.extend(extra)
                    have.update((b.topic_id, b.partition, b.last_offset) for b in extra)
                mine = [b for b in rows if (b.topic_id, b.partition) == tp]
                specs.append(await _compact_spec(meta, topic, tp[1], mine, now_ms))
        tasks.append(
            MergeTask(
                new_task_id(),
                level,
                out_level,
                rows,
                target,
                cfg.key_prefix,
                specs,
                cfg.read_concurrency,
            )
        )
    return tasks


async def plan_parquet(
    meta: Metastore,
    cfg: CompactorConfig,
    topics: Mapping[uuid.UUID, TopicInfo],
    now_ms: int,
) -> list[ParquetTask]:
    tasks: list[ParquetTask] = []
    for topic in sorted(topics.values(), key=lambda t: t.name):
        if not parquet_enabled(topic):
            continue
        for partition in range(topic.partitions):
            rows = await meta.partition_batches(
                topic.id,
                partition,
                min_level=cfg.parquet_min_level,
                max_level=MAX_LEVEL,  # not the quarantine level of undecodable batches
                limit=cfg.parquet_max_batches,
            )
            if len(rows) < cfg.parquet_min_batches:
                continue
            spec = (
                await _compact_spec(meta, topic, partition, rows, now_ms)
                if is_compacted(topic)
                else None
            )
            tasks.append(
                ParquetTask(
                    new_task_id(),
                    topic.id,
                    topic.name,
                    partition,
                    rows,
                    cfg.row_group_rows,
                    cfg.parquet_prefix,
                    spec,
                    cfg.read_concurrency,
                    split_days=iceberg_enabled(topic),
                    value_format=topic_setting(topic, "floe.value.format"),
                    value_schema=value_settings(topic),
                )
            )
    return tasks


def value_settings(topic: TopicInfo) -> str | None:
    """What the Parquet writer needs to type the topic's values: the JSON Schema
    (json), the writer's Avro schema (avro), or the descriptor set and message
    name as JSON (protobuf); for avro from a schema registry, its URL and wait
    as JSON (``{"registry": ..., "wait_ms": ...}``)."""
    fmt = topic_setting(topic, "floe.value.format")
    registry = topic_setting(topic, "floe.value.schema.registry.url").strip()
    if fmt == "avro" and registry:
        import json

        wait_ms = int(topic_setting(topic, "floe.value.schema.registry.wait.ms"))
        return json.dumps({"registry": registry, "wait_ms": wait_ms})
    if fmt == "avro":
        return topic_setting(topic, "floe.value.avro.schema") or None
    if fmt == "protobuf":
        import json

        return json.dumps(
            {
                "descriptor": topic_setting(topic, "floe.value.protobuf.descriptor"),
                "message": topic_setting(topic, "floe.value.protobuf.message"),
            }
        )
    return topic_setting(topic, "floe.value.json.schema") or None
