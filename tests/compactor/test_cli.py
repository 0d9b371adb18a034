"""`floe compactor run --once` and `floe compactor orphans` on seeded data."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from floe_cli.main import main
from metastore import open_metastore
from objectstore import open_object_store
from tests.compactor.helpers import commit_segment, make_batch

NOW = 1_700_000_000_000


async def _seed(meta_url: str, objects_url: str) -> None:
    import time

    meta = await open_metastore(meta_url)
    store = open_object_store(objects_url)
    try:
        res = await meta.create_topic("cli", 1)
        assert res.topic is not None
        now = int(time.time() * 1000)
        for i in range(6):
            await commit_segment(
                meta,
                store,
                f"agent/{i}",
                [(res.topic.id, 0, make_batch([(b"k", b"v%d" % i)], now))],
            )
        await store.put("agent/crashed-upload", b"junk")
    finally:
        await store.close()
        await meta.close()


def test_cli_run_once_and_orphans(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "objects").mkdir()
    meta_url, objects_url = f"sqlite:///{tmp_path / 'meta.db'}", f"file://{tmp_path / 'objects'}"
    asyncio.run(_seed(meta_url, objects_url))
    common = ["compactor", "--metastore", meta_url, "--objects", objects_url]
    assert main([*common, "orphans", "--grace-ms", "0"]) == 0
    out = capsys.readouterr()
    assert "agent/crashed-upload" in out.out and "1 orphan(s) found (dry run)" in out.err
    assert main([*common, "run", "--once", "--force", "--orphan-grace-ms", "3600000"]) == 0
    err = capsys.readouterr().err
    assert "merge L0->L1: 1 task(s), 1 committed" in err
    assert main([*common, "orphans", "--grace-ms", "0", "--delete"]) == 0
    assert "1 orphan(s) deleted" in capsys.readouterr().err
