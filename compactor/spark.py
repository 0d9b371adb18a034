"""Run compaction tasks as a PySpark job; the driver plans and commits.

``SparkExecutor`` is a drop-in :class:`~compactor.runner.TaskExecutor`: the
planned tasks (plain picklable values) are parallelised one per Spark
partition, each executor opens the object store by URL, runs
:func:`compactor.execute.execute_task` (reads inputs, PUTs new objects) and
returns a :class:`~compactor.tasks.TaskResult`; the driver then swaps the batch
rows exactly as the in-process runner does. Executors never touch the
metastore, so a failed or speculative Spark task at worst leaves an orphan
object for the GC. The collect() runs in a thread so the driver's loop stays free.
"""

from __future__ import annotations

import asyncio
import pickle
from collections.abc import Sequence
from typing import Any

from compactor.execute import execute_task
from compactor.tasks import Task, TaskResult


def _run_one(item: tuple[str, bytes]) -> tuple[bool, bytes]:
    """Executor side: ``(ok, pickled TaskResult | error text)``."""
    from objectstore import open_object_store

    url, blob = item
    task: Task = pickle.loads(blob)

    async def go() -> TaskResult:
        async with open_object_store(url) as store:
            return await execute_task(task, store)

    try:
        return True, pickle.dumps(asyncio.run(go()))
    except Exception as e:  # reported to the driver, which counts it as a failed task
        return False, f"{type(e).__name__}: {e}".encode()


class SparkTaskError(Exception):
    """A task failed inside a Spark executor."""


class SparkExecutor:
    def __init__(self, spark: Any, objects_url: str) -> None:
        self.spark = spark
        self.objects_url = objects_url

    async def run(self, tasks: Sequence[Task]) -> list[TaskResult | BaseException]:
        if not tasks:
            return []
        items = [(self.objects_url, pickle.dumps(t)) for t in tasks]
        sc = self.spark.sparkContext

        def job() -> list[tuple[bool, bytes]]:
            sc.setJobDescription(f"floe compactor: {len(items)} task(s)")
            return list(sc.parallelize(items, len(items)).map(_run_one).collect())

        raw = await asyncio.to_thread(job)
        out: list[TaskResult | BaseException] = []
        for ok, payload in raw:
            out.append(pickle.loads(payload) if ok else SparkTaskError(payload.decode()))
        return out


def local_spark_session(master: str = "local[*]", app: str = "floe-compactor") -> Any:
    """A SparkSession for ``floe compactor run --spark`` (PYSPARK_PYTHON = this interpreter)."""
    import os
    import sys

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    return (
        SparkSession.builder.master(master)
        .appName(app)
        .config("spark.ui.enabled", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
