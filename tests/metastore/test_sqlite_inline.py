"""SQLite's fast paths: inline reads (metastore.sqlite_inline), the one-call commit
(metastore.sqlite_commit).

What a user relies on: a read sees every commit that returned before it, a
read transaction cannot write, reads start no thread (the point of the inline
engine: no GIL hand-off per row behind a busy event loop), in-memory or URI
databases keep reading with the one engine they have, and a commit that fails
in SQLite is a MetastoreError that left nothing behind.
"""

from __future__ import annotations

import sqlite3
import threading
import uuid
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text
from sqlalchemy.exc import OperationalError

import metastore.log
import metastore.sqlite_log
from metastore import ErrorCode, MetastoreError, ObjectToCommit, open_metastore
from metastore.engine import create_read_engine
from metastore.sql import SqlMetastore
from metastore.sqlite_inline import InlineConnection
from tests.metastore.helpers import batch


async def _open(tmp_path: Path) -> SqlMetastore:
    ms = await open_metastore(f"sqlite:///{tmp_path / 'meta.db'}")
    assert isinstance(ms, SqlMetastore)
    return ms


async def test_reads_see_each_acknowledged_commit_at_once(tmp_path: Path) -> None:
    ms = await _open(tmp_path)
    try:
        assert ms.read_engine is not ms.engine
        topic = (await ms.create_topic("t", 3)).topic
        assert topic is not None
        for i in range(20):
            (res,) = await ms.commit_object(f"obj/{i}", 100, "a", [batch(topic.id, i % 3, 2)])
            assert res.error is ErrorCode.NONE
            # Committed on a writer thread, read inline on the loop: the very next read sees it.
            found = await ms.find_batches(topic.id, i % 3, res.base_offset, 1 << 20)
            assert found.error is ErrorCode.NONE and found.high_watermark == res.base_offset + 2
            assert [b.base_offset for b in found.batches] == [res.base_offset]
        many = await ms.find_batches_many([(topic.id, p, 0, 1 << 20) for p in range(3)])
        assert [len(f.batches) for f in many] == [7, 7, 6]
        offsets = await ms.partition_offsets(topic.id)
        assert [o.high_watermark for o in offsets] == [14, 14, 12]
    finally:
        await ms.close()


def _threads() -> set[int]:
    """Live threads but the WAL checkpointer's (metastore.sqlite_checkpoint), which
    starts on its own clock, not because of a read."""
    return {t.ident or 0 for t in threading.enumerate() if not t.name.startswith("floe-sqlite-checkpoint")}


async def test_reads_start_no_thread(tmp_path: Path) -> None:
    ms = await _open(tmp_path)
    try:
        topic = (await ms.create_topic("t", 2)).topic
        assert topic is not None
        await ms.commit_object("obj/1", 100, "a", [batch(topic.id, 0), batch(topic.id, 1)])
        before = _threads()
        for _ in range(50):
            await ms.find_batches_many([(topic.id, 0, 0, 1000), (topic.id, 1, 0, 1000)])
            await ms.list_topics()
        assert _threads() == before
        async with ms.read_engine.connect() as conn:
            raw = await conn.get_raw_connection()
            assert isinstance(raw.driver_connection, InlineConnection)
    finally:
        await ms.close()


async def test_hot_reads_take_no_pooled_connection_and_fail_as_metastore_errors(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A Fetch's reads (batch lookups, topic watermarks, read_committed's stable
    offsets) run on the inline reader: no SQLAlchemy checkout, BEGIN listener or
    transaction end per read; an SQLite error there is a MetastoreError."""
    from sqlalchemy import event

    ms = await _open(tmp_path)
    try:
        topic = (await ms.create_topic("t", 2)).topic
        assert topic is not None
        await ms.commit_object("obj/1", 100, "a", [batch(topic.id, 0), batch(topic.id, 1)])
        checkouts: list[object] = []
        event.listen(ms.read_engine.sync_engine.pool, "checkout", lambda *a: checkouts.append(a))
        assert (await ms.find_batches(topic.id, 0, 0, 1000)).batches
        assert [len(f.batches) for f in await ms.find_batches_many([(topic.id, p, 0, 1000) for p in (0, 1)])] == [1, 1]
        assert (await ms.topic_offsets(topic.id)).txn_free
        assert [s.last_stable_offset for s in await ms.stable_offsets([(topic.id, 0, 0), (topic.id, 1, 0)])] == [1, 1]
        assert checkouts == []

        def broken(*a: Any) -> Any:
            raise sqlite3.OperationalError("disk I/O error")

        monkeypatch.setattr(metastore.sqlite_log, "sqlite_find_many", broken)
        with pytest.raises(MetastoreError, match="disk I/O error"):
            await ms.find_batches_many([(topic.id, 0, 0, 1000)])
    finally:
        await ms.close()


async def test_a_read_transaction_cannot_write(tmp_path: Path) -> None:
    ms = await _open(tmp_path)
    try:
        with pytest.raises(OperationalError, match="readonly"):
            async with ms.read_engine.connect() as conn:
                await conn.execute(text("DELETE FROM topics"))
    finally:
        await ms.close()


@pytest.mark.parametrize("url", ["sqlite:///:memory:", "sqlite://"])
async def test_memory_and_uri_databases_read_with_their_one_engine(url: str) -> None:
    assert create_read_engine(url) is None
    ms = await open_metastore(url)
    try:
        assert isinstance(ms, SqlMetastore) and ms.read_engine is ms.engine
        assert (await ms.create_topic("t", 1)).error is ErrorCode.NONE
        assert [t.name for t in await ms.list_topics()] == ["t"]
    finally:
        await ms.close()


def test_postgres_and_uri_databases_have_no_inline_read_engine(tmp_path: Path) -> None:
    assert create_read_engine(f"sqlite:///file:{tmp_path / 'm.db'}?uri=true") is None
    assert create_read_engine(f"postgresql://u@localhost/{uuid.uuid4().hex}") is None


async def test_a_commit_failing_in_sqlite_is_a_metastore_error_and_leaves_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ms = await _open(tmp_path)
    try:
        topic = (await ms.create_topic("t", 2)).topic
        assert topic is not None
        await ms.commit_object("obj/0", 100, "a", [batch(topic.id, 0, 3)])
        real = metastore.log.sqlite_commit

        def fails_after_writing(db: sqlite3.Connection, *args: Any) -> Any:
            real(db, *args)  # every statement of the group ran ...
            raise sqlite3.OperationalError("disk I/O error")  # ... and then SQLite failed

        monkeypatch.setattr(metastore.log, "sqlite_commit", fails_after_writing)
        group = [ObjectToCommit("obj/1", 100, "a", [batch(topic.id, 0, 2), batch(topic.id, 1, 5)])]
        with pytest.raises(MetastoreError, match="disk I/O error"):
            await ms.commit_objects(group)
        monkeypatch.setattr(metastore.log, "sqlite_commit", real)
        # Rolled back: no object, no batch, no watermark moved; the retry commits normally.
        assert await ms.get_object("obj/1") is None
        assert [o.high_watermark for o in await ms.partition_offsets(topic.id)] == [3, 0]
        (again,) = await ms.commit_objects(group)
        assert [(r.error, r.base_offset) for r in again.results] == [(ErrorCode.NONE, 3), (ErrorCode.NONE, 0)]
    finally:
        await ms.close()
