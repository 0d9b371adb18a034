"""Iceberg side of Parquet merges: one rewrite ("replace") snapshot per table.

Where it sits: the runner calls :func:`commit_merges` for the "parquet merge"
phase between the PUTs and the swaps, as :meth:`IcebergSync.commit_parquet` does
for the Parquet phase (crash-safe the same way: a snapshot whose swap never
happens is undone by the next :meth:`IcebergSync.reconcile`). The snapshot
removes the merged inputs and adds the merged objects in one commit, so the
table's rows are the same before and after; the inputs stay readable by time
travel until the GC expires the snapshots naming them (``expire_for``) and
deletes them after the grace period.

The snapshot's operation is ``replace`` (Iceberg's "data files were rewritten,
no data changed", which streaming readers skip): pyiceberg 0.12 has no public
rewrite producer and refuses ``replace`` in its summary update, so
:class:`_ReplaceFiles` is its overwrite producer with the summary computed as an
overwrite and then labelled ``replace``. Should pyiceberg's internals change, the
commit falls back to a plain overwrite (delete + add in one snapshot).
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from compactor.iceberg import IcebergSync
from compactor.planner import iceberg_enabled
from compactor.tasks import ParquetMergeTask, Task, TaskResult
from metastore.types import TopicInfo
from objectstore import iceberg_layout as layout

log = logging.getLogger(__name__)


def _producer(tx: Any, props: dict[str, str]) -> Any:
    """A snapshot producer of operation ``replace`` (overwrite if unavailable)."""
    try:
        from pyiceberg.table.snapshots import Operation, Summary
        from pyiceberg.table.update.snapshot import _OverwriteFiles

        class _ReplaceFiles(_OverwriteFiles):
            def _summary(self, snapshot_properties: Any = None) -> Any:
                self._operation = Operation.OVERWRITE
                try:
                    summary = super()._summary(snapshot_properties or {})
                finally:
                    self._operation = Operation.REPLACE
                return Summary(operation=Operation.REPLACE, **summary.additional_properties)

        return _ReplaceFiles(
            operation=Operation.REPLACE,
            transaction=tx,
            io=tx._table.io,
            snapshot_properties=props,
        )
    except (ImportError, AttributeError, TypeError) as e:  # pragma: no cover
        log.info("iceberg: no replace snapshot in this pyiceberg (%r); overwriting", e)
        return tx.update_snapshot(snapshot_properties=props).overwrite()


def _rewrite(sync: IcebergSync, topic: TopicInfo, removed: set[str], added: dict[str, int]) -> bool:
    """Commit the rewrite; False when the table does not hold every input (then the
    runner's reconcile after the phase makes it equal the metastore instead)."""
    import pyarrow.parquet as pq

    table = sync._table(topic)
    current = {t.file.file_path: t.file for t in table.scan().plan_files()}
    if not removed <= current.keys():
        return False
    footers = []
    for loc, size in added.items():
        with table.io.new_input(loc).open() as f:
            footers.append((loc, size, pq.read_metadata(f)))
    sync._evolve(table, [md for _, _, md in footers])
    table = sync.catalog.load_table(sync.identifier(topic.name))
    with table.transaction() as tx:
        with _producer(tx, {"floe.operation": "parquet-merge"}) as o:
            for loc in sorted(removed):
                o.delete_data_file(current[loc])
            for loc, size, md in footers:
                o.append_data_file(layout.data_file(tx.table_metadata, loc, size, md))
    sync.summary.snapshots += 1
    sync.summary.files_added += len(added)
    sync.summary.files_removed += len(removed)
    log.info(
        "iceberg: %s rewrite: %d file(s) -> %d",
        ".".join(sync.identifier(topic.name)),
        len(removed),
        len(added),
    )
    return True


async def commit_merges(
    sync: IcebergSync,
    topics: Mapping[uuid.UUID, TopicInfo],
    tasks: Sequence[Task],
    results: Sequence[TaskResult | BaseException],
) -> None:
    """The rewrite snapshot of a "parquet merge" phase, before its swaps."""
    changes: dict[uuid.UUID, tuple[set[str], dict[str, int]]] = {}
    for task, res in zip(tasks, results, strict=True):
        if not isinstance(task, ParquetMergeTask) or isinstance(res, BaseException):
            continue
        topic = topics.get(task.topic_id)
        if topic is None or not iceberg_enabled(topic) or not res.new_objects:
            continue
        removed, added = changes.setdefault(topic.id, (set(), {}))
        still = {b.object_key for b in res.replacements}
        removed.update(sync._location(b.object_key) for b in task.rows if b.object_key not in still)
        added.update((sync._location(o.key), o.size) for o in res.new_objects)
    for tid, (removed, added) in changes.items():
        topic = topics[tid]
        try:
            await asyncio.to_thread(_rewrite, sync, topic, removed, added)
        except Exception as e:  # the log is unaffected; reconcile repairs the table
            log.warning("iceberg: rewrite %s: %r", topic.name, e)
            sync.summary.errors.append(f"{topic.name}: {e!r}")
