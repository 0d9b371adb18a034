"""One compactor pass over an Iceberg topic in a process of its own that SIGKILLs itself
at a crash point (``after_put``: Parquet written, no snapshot; ``after_snapshot``:
snapshot committed, batch rows not swapped). Used by ``test_iceberg_kill.py``::

    python -m tests.compactor.iceberg_kill_job <data dir> <point> <now ms>

The data dir holds ``meta.db`` (SQLite metastore + SQL catalog) and ``objects/``,
as the compactor tests' fixtures lay them out.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path


def kill_at(point: str):  # type: ignore[no-untyped-def]
    def fail(name: str) -> None:
        if name == point:
            os.kill(os.getpid(), signal.SIGKILL)  # no exception handler, no finally: a real kill

    return fail


async def main(data: Path, point: str, now: int) -> None:
    from compactor.iceberg import IcebergSync, open_catalog
    from compactor.runner import Compactor
    from metastore import open_metastore
    from objectstore import open_object_store
    from tests.compactor.test_iceberg import CFG

    meta_url, objects_url = f"sqlite:///{data / 'meta.db'}", f"file://{data / 'objects'}"
    meta = await open_metastore(meta_url, now_ms=lambda: now)
    store = open_object_store(objects_url)
    async with store:
        sync = IcebergSync(meta, open_catalog("", meta_url, objects_url), objects_url)
        comp = Compactor(
            meta, store, CFG, now_ms=lambda: now, iceberg=sync, fail_point=kill_at(point)
        )
        await comp.run_pass()
    await meta.close()
    sys.exit(3)  # the crash point was never reached


if __name__ == "__main__":
    asyncio.run(main(Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])))
