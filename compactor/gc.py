"""Retention, deletion of retired objects, and the orphan sweep.

* Retention: per partition one bounded ``Metastore.enforce_retention`` step
  (retention.ms, retention.bytes; only for ``cleanup.policy`` containing
  ``delete``), which also removes the batch rows DeleteRecords left below the
  log start offset and retires objects nothing references any more.
* Retired objects: ``deleting`` for longer than ``delete_grace_ms`` (far longer
  than any reader's cached lookup) and held by no live read lease (a Spark
  batch that planned them, an agent's fetches) are claimed
  (``Metastore.claim_objects_to_delete``), deleted from storage, then their
  rows. Live objects no batch references (a deleted topic's, say) are retired
  first. An object under a lease waits for the lease to end or expire.
* Orphans: objects in the bucket that the metastore does not know at all and
  that are older than ``orphan_grace_ms`` by the store's clock (a crash between
  PUT and commit, or between a compactor's PUT and its swap). ``dry_run`` lists
  them without deleting.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

from compactor.planner import topic_setting
from metastore.protocol import Metastore
from metastore.types import ErrorCode, TopicInfo
from objectstore.base import ObjectInfo, ObjectStore

_LIST_PAGE = 1000


@dataclass(slots=True)
class RetentionSummary:
    partitions_advanced: int = 0
    batches_removed: int = 0
    bytes_removed: int = 0
    objects_retired: list[str] = field(default_factory=list)


async def retention_pass(
    meta: Metastore, topics: Mapping[uuid.UUID, TopicInfo], now_ms: int, max_batches: int
) -> RetentionSummary:
    out = RetentionSummary()
    for ps in await meta.partition_summaries():
        topic = topics.get(ps.topic_id)
        if topic is None:
            continue
        policies = [p.strip() for p in topic_setting(topic, "cleanup.policy").split(",")]
        delete_before: int | None = None
        max_bytes: int | None = None
        if "delete" in policies:
            rms = int(topic_setting(topic, "retention.ms"))
            rbytes = int(topic_setting(topic, "retention.bytes"))
            delete_before = now_ms - rms if rms >= 0 else None
            max_bytes = rbytes if rbytes >= 0 else None
        res = await meta.enforce_retention(
            ps.topic_id,
            ps.partition,
            delete_before_ms=delete_before,
            use_append_time=topic_setting(topic, "message.timestamp.type") == "LogAppendTime",
            max_bytes=max_bytes,
            max_batches=max_batches,
        )
        if res.error != ErrorCode.NONE:
            continue
        if res.log_start_offset > ps.log_start_offset:
            out.partitions_advanced += 1
        out.batches_removed += res.removed_batches
        out.bytes_removed += res.removed_bytes
        out.objects_retired.extend(res.objects_deleting)
    return out


BeforeDelete = Callable[[Sequence[str]], Awaitable[None]]


async def delete_retired(
    meta: Metastore,
    store: ObjectStore,
    now_ms: int,
    grace_ms: int,
    limit: int = 1000,
    *,
    before_delete: BeforeDelete | None = None,
) -> list[str]:
    """Delete objects retired more than ``grace_ms`` ago and under no live read lease;
    returns their keys. ``before_delete`` runs first (the Iceberg step expires the
    snapshots that still name them: metadata first, files after)."""
    await meta.mark_objects_deleting(created_before_ms=now_ms - grace_ms)
    deleted: list[str] = []
    while True:
        due = await meta.claim_objects_to_delete(now_ms - grace_ms, limit)
        if not due:
            return deleted
        keys = [o.key for o in due]
        if before_delete is not None:
            await before_delete(keys)
        await store.delete_many(keys)
        await meta.delete_object_rows(keys)
        deleted.extend(keys)
        if len(due) < limit:
            return deleted


async def find_orphans(
    meta: Metastore,
    store: ObjectStore,
    grace_ms: int,
    *,
    prefix: str = "",
    now: datetime | None = None,
    exclude: Sequence[str] = (),
) -> list[ObjectInfo]:
    """Objects under ``prefix`` unknown to the metastore and older than ``grace_ms``
    (keys under an ``exclude`` prefix, e.g. Iceberg metadata, are not considered)."""
    cutoff = (now or datetime.now(UTC)).timestamp() - grace_ms / 1000.0
    orphans: list[ObjectInfo] = []
    page: list[ObjectInfo] = []

    async def check() -> None:
        known = await meta.registered_keys([o.key for o in page])
        orphans.extend(
            o for o in page if o.key not in known and o.last_modified.timestamp() <= cutoff
        )
        page.clear()

    async for info in store.list(prefix):
        if exclude and info.key.startswith(tuple(exclude)):
            continue
        page.append(info)
        if len(page) >= _LIST_PAGE:
            await check()
    if page:
        await check()
    return orphans


async def collect_orphans(
    meta: Metastore,
    store: ObjectStore,
    grace_ms: int,
    *,
    prefix: str = "",
    dry_run: bool = False,
    exclude: Sequence[str] = (),
    before_delete: BeforeDelete | None = None,
) -> list[ObjectInfo]:
    orphans = await find_orphans(meta, store, grace_ms, prefix=prefix, exclude=exclude)
    if orphans and not dry_run:
        # Re-check right before deleting: a commit may have registered one meanwhile.
        known = await meta.registered_keys([o.key for o in orphans])
        orphans = [o for o in orphans if o.key not in known]
        if before_delete is not None and orphans:
            await before_delete([o.key for o in orphans])
        await store.delete_many([o.key for o in orphans])
    return orphans


def wall_ms() -> int:
    return time.time_ns() // 1_000_000
