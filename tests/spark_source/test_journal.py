"""The Spark source over the journal tier (issue 40): batch rows naming ``journal/`` keys.

* the executor's reader takes a journal key from the journal buckets in turn: a
  missing copy or a failing bucket moves on to the next one;
* the agents' plan presigns a journal object against a bucket that holds a copy
  (and still presigns everything else), so credential-free executors read it;
* end to end: an agent whose journal is never consolidated during the test; every
  record is read once through the agents (bucket 0 wiped) and in direct mode.
"""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

from agent.planning_grants import presign_grants
from objectstore.journal import JournaledStore
from objectstore.local import key_path
from objectstore.memory import MemoryStore
from objectstore.quorum import QuorumStore
from spark_source.options import OptionError, parse_options
from spark_source.reader import Storage
from spark_source.source import FloeBatchReader, FloeStreamReader
from tests.agent.test_journal import _journal
from tests.spark_source.test_agents import N, produce
from tests.spark_source.test_unit import read_all

KEY = "journal/agent-1/000000000042"


def _put(root: Path, key: str, data: bytes) -> None:
    p = Path(key_path(str(root), key))
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_bytes(data)


def test_reader_falls_back_between_journal_buckets(tmp_path: Path) -> None:
    dirs, urls = _journal(tmp_path)
    std = f"file://{tmp_path / 'objects'}"
    # bucket 0 lacks the copy, bucket 1 fails (a directory where the object should be)
    Path(key_path(str(dirs[1]), KEY)).mkdir(parents=True)
    _put(dirs[2], KEY, b"0123456789")
    s = Storage(std, journal=urls.split(","))
    assert s.read_range(KEY, 2, 5) == b"23456"
    _put(dirs[0], KEY, b"abcdefghij")  # the first bucket holding it answers
    assert s.read_range(KEY, 0, 3) == b"abc"
    with pytest.raises(OSError, match="no journal bucket could serve it"):
        s.read_range("journal/agent-1/000000000043", 0, 3)
    with pytest.raises(OSError, match="option 'journal'"):
        Storage(std).read_range(KEY, 0, 3)


def test_journal_option() -> None:
    base = {"metastore": "sqlite:///x", "objects": "file:///o", "subscribe": "t"}
    o = parse_options({**base, "journal": "file:///j0, s3://b/p?endpoint=http://x ,"}, streaming=False)
    assert o.journal == ("file:///j0", "s3://b/p?endpoint=http://x")
    assert parse_options(base, streaming=False).journal == ()
    with pytest.raises(OptionError, match="journal"):
        parse_options({**base, "journal": "http://x"}, streaming=False)


class _Signing(MemoryStore):
    """A memory store that presigns (URLs naming the store, key and range)."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.label = name

    async def presign_ranges(
        self, key: str, expires_s: int, ranges: Sequence[tuple[int, int]]
    ) -> list[str]:
        return [f"https://{self.label}/{key}?r={lo}-{hi}" for lo, hi in ranges]

    async def presign_get(
        self, key: str, expires_s: int, byte_range: tuple[int, int] | None = None
    ) -> str:
        return f"https://{self.label}/{key}"


def test_plan_presigns_journal_objects_against_a_bucket_holding_a_copy() -> None:
    async def go() -> None:
        buckets = [_Signing(f"j{i}") for i in range(3)]
        store = JournaledStore(_Signing("std"), QuorumStore(buckets, 2))
        await buckets[1].put(KEY, b"x" * 100)  # bucket 0 lacks its copy
        runs = {KEY: [(0, 40), (60, 100)], "segments/s1": [(0, 10)]}
        urls, ranged = await presign_grants(store, ["p/t.parquet"], runs, 60_000)
        assert urls == {"p/t.parquet": "https://std/p/t.parquet"}
        assert ranged[KEY] == [
            [0, 40, f"https://j1/{KEY}?r=0-40"],
            [60, 100, f"https://j1/{KEY}?r=60-100"],
        ]
        assert ranged["segments/s1"] == [[0, 10, "https://std/segments/s1?r=0-10"]]

    asyncio.run(go())


@pytest.mark.slow
def test_batches_in_the_journal_are_read_once_in_both_modes(
    agent_factory: Callable[..., Any], tmp_path: Path
) -> None:
    dirs, urls = _journal(tmp_path)
    # Never consolidated during the test: every batch row names a journal object.
    agent = agent_factory(journal=urls, consolidate_interval_ms=600_000, consolidate_bytes=1 << 30)
    sent = produce(agent.bootstrap, "jt")

    async def keys() -> set[str]:
        t = await agent.broker.meta.get_topic("jt")
        return {b.object_key for p in range(3) for b in await agent.broker.meta.partition_batches(t.id, p)}

    assert {k.split("/")[0] for k in agent.call(keys())} == {"journal"}
    want = sorted((part, key, value, ts) for part, key, value, ts in sent)

    def check(got: list[Any]) -> None:
        assert len(got) == N  # each record once
        assert sorted((r[1], r[3], r[4], r[5]) for r in got) == want

    # Agents mode: the plan names the journal buckets; bucket 0 lost its copies.
    assert any(p.is_file() for p in dirs[0].rglob("*"))
    for f in dirs[0].iterdir():
        shutil.rmtree(f) if f.is_dir() else f.unlink()
    o = parse_options({"kafka.bootstrap.servers": agent.bootstrap, "subscribe": "jt"}, streaming=False)
    got, _ = read_all(FloeBatchReader(o))
    check(got)
    so = parse_options(
        {"kafka.bootstrap.servers": agent.bootstrap, "subscribe": "jt", "startingOffsets": "earliest"},
        streaming=True,
    )
    sr = FloeStreamReader(so)
    start = sr.initialOffset()
    end = sr.latestOffset(start, sr.getDefaultReadLimit())
    got, _ = read_all(sr, sr.partitions(start, end))
    check(got)
    sr.commit(end)
    sr.stop()
    # Direct mode: the 'journal' option; without it, a clear error.
    cfg = agent.broker.config
    direct = {"metastore": cfg.metastore, "objects": cfg.objects, "subscribe": "jt"}
    got, _ = read_all(FloeBatchReader(parse_options({**direct, "journal": urls}, streaming=False)))
    check(got)
    with pytest.raises(OSError, match="option 'journal'"):
        read_all(FloeBatchReader(parse_options(direct, streaming=False)))
