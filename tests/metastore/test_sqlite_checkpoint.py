"""WAL checkpoints off the commit path (metastore.sqlite_checkpoint).

What a user relies on: a file-backed SQLite metastore checkpoints in the
background, so its commits do not copy pages back into the database file; the
WAL is still bounded (the writer keeps a raised threshold as a safety net);
everything committed is there after a reopen; a checkpoint that SQLite refuses
is logged, not raised. The checkpoints are driven with ``run_once``: no sleeps.
"""

from __future__ import annotations

from pathlib import Path

from metastore import ObjectToCommit, open_metastore
from metastore.engine import SQLITE_WAL_AUTOCHECKPOINT_PAGES
from metastore.sql import SqlMetastore
from metastore.sqlite_checkpoint import WalCheckpointer
from tests.metastore.helpers import batch

PARTITIONS = 1000


async def _wide_commits(ms: SqlMetastore, n: int) -> None:
    topic = (await ms.create_topic("wide", PARTITIONS)).topic
    for i in range(n):
        (res,) = await ms.commit_objects(
            [ObjectToCommit(f"o{i}", 1 << 20, "a", [batch(topic.id, p, 2) for p in range(PARTITIONS)])]
        )
        assert all(r.error == 0 for r in res.results)


async def test_commits_leave_checkpoints_to_the_background_and_lose_nothing(tmp_path: Path) -> None:
    db = tmp_path / "meta.db"
    ms = await open_metastore(f"sqlite:///{db}")
    assert isinstance(ms, SqlMetastore) and ms.checkpointer is not None
    ms.checkpointer.interval = 3600.0  # driven by hand below
    async with ms.engine.connect() as conn:
        pages = (await conn.exec_driver_sql("PRAGMA wal_autocheckpoint")).scalar()
    assert pages == SQLITE_WAL_AUTOCHECKPOINT_PAGES  # commits no longer checkpoint every 1,000 pages
    await _wide_commits(ms, 12)
    # Twelve commits over 1,000 partitions write far more than SQLite's default 1,000
    # pages; none of them was copied back: the WAL still holds them all.
    (_, frames, _) = await ms.checkpointer.run_once() or (None, 0, 0)
    assert frames > 1_000
    busy, frames, done = await ms.checkpointer.run_once() or (1, 0, -1)
    assert busy == 0 and done == frames  # the background checkpoint copied every frame
    await ms.close()
    assert ms.checkpointer is None

    again = await open_metastore(f"sqlite:///{db}")
    try:
        topic = (await again.list_topics())[0]
        offsets = await again.partition_offsets(topic.id)
        assert [o.high_watermark for o in offsets] == [24] * PARTITIONS  # 12 commits x 2 records
    finally:
        await again.close()


async def test_in_memory_metastore_has_no_checkpointer() -> None:
    ms = await open_metastore("sqlite:///:memory:")
    try:
        assert isinstance(ms, SqlMetastore) and ms.checkpointer is None
    finally:
        await ms.close()


async def test_a_refused_checkpoint_is_logged_not_raised(tmp_path: Path, caplog) -> None:  # type: ignore[no-untyped-def]
    cp = WalCheckpointer(str(tmp_path))  # a directory: SQLite cannot open it
    assert await cp.run_once() is None
    assert "sqlite checkpoint" in caplog.text
    await cp.close()
    await cp.close()  # twice is harmless
