"""The cross-process writer lock of a file-backed SQLite metastore (metastore.sqlite_wlock)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from metastore import open_metastore
from metastore.sqlite_wlock import FileWriteLock, write_lock_for

pytestmark = pytest.mark.asyncio


async def test_second_holder_waits_until_the_first_releases(tmp_path: Path) -> None:
    # Two locks on one file are two open file descriptions: they exclude each other
    # as two processes would.
    a, b = FileWriteLock(str(tmp_path / "m.db.wlock")), FileWriteLock(str(tmp_path / "m.db.wlock"))
    await a.acquire()
    waiting = asyncio.ensure_future(b.acquire())
    await asyncio.sleep(0)  # let it reach its thread: it cannot finish while `a` holds
    assert not waiting.done()
    a.release()
    await asyncio.wait_for(waiting, 10)
    b.release()
    a.close()
    b.close()


async def test_a_cancelled_waiter_gives_the_lock_back(tmp_path: Path) -> None:
    path = str(tmp_path / "m.db.wlock")
    a, b, c = FileWriteLock(path), FileWriteLock(path), FileWriteLock(path)
    await a.acquire()
    waiting = asyncio.ensure_future(b.acquire())
    await asyncio.sleep(0)
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    a.release()  # b's thread now gets the lock and must hand it back at once
    await asyncio.wait_for(c.acquire(), 10)
    c.release()
    for lock in (a, b, c):
        lock.close()


async def test_only_file_databases_get_a_lock(tmp_path: Path) -> None:
    assert write_lock_for(None) is None
    assert write_lock_for(":memory:") is None
    lock = write_lock_for(str(tmp_path / "meta.db"))
    assert lock is not None and lock.path.endswith("meta.db.wlock")


async def test_two_metastores_on_one_file_commit_through_the_lock(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'meta.db'}"
    m1 = await open_metastore(url)
    m2 = await open_metastore(url)
    try:
        await m1.create_topic("t", 1)
        names = await asyncio.gather(
            *(m.create_topic(f"t{i}", 1) for i, m in enumerate([m1, m2] * 5))
        )
        assert len(names) == 10
        assert (tmp_path / "meta.db.wlock").exists()
        assert {t.name for t in await m2.list_topics()} >= {"t", *(f"t{i}" for i in range(10))}
    finally:
        await m1.close()
        await m2.close()
