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


def test_compactor_health_check(tmp_path: Path) -> None:
    """`floe compactor health` (the module's container health check) passes while
    the running compactor makes progress; fails when it stops answering or when
    its last progress is older than --max-stall-s."""
    import os
    import signal
    import subprocess
    import sys
    import time

    from floe_cli.compactor_cmd import compactor_health
    from tests.fixtures.s3 import free_port

    meta_url, objects_url = f"sqlite:///{tmp_path / 'm.db'}", f"file://{tmp_path / 'o'}"
    asyncio.run(_seed(meta_url, objects_url))
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLOE_")}
    repo = Path(__file__).resolve().parents[2]
    for attempt in range(3):
        # free_port() releases the port before the compactor binds it: under
        # pytest-xdist another process may take it first (then start again).
        port = free_port()
        proc = subprocess.Popen(
            [sys.executable, "-m", "floe_cli.main", "compactor", "--metastore", meta_url, "--objects", objects_url,
             "run", "--metrics-port", str(port), "--interval-ms", "200"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env, cwd=repo,
        )  # fmt: skip
        health = [sys.executable, "-m", "floe_cli.main", "compactor", "health", "--metrics-port", str(port)]
        deadline = time.monotonic() + 60
        while True:  # bounded poll until the compactor serves its metrics
            res = subprocess.run(health, capture_output=True, text=True, timeout=30, env=env, cwd=repo)
            if res.returncode == 0 or time.monotonic() > deadline or proc.poll() is not None:
                break
            time.sleep(0.2)
        if res.returncode == 0 or proc.poll() is None:
            break
        assert proc.stderr is not None
        died = proc.stderr.read().decode()
        assert "address already in use" in died.lower() and attempt < 2, f"the compactor exited: {died}"
    try:
        assert res.returncode == 0 and "last progress" in res.stdout, res.stdout + res.stderr
        ok, line = compactor_health(port, max_stall_s=60, timeout_s=3, now_s=time.time() + 3600)
        assert not ok and "no compactor progress for" in line and "limit 60 s" in line
        proc.send_signal(signal.SIGSTOP)  # hung: its metrics server stops answering too
        try:
            res = subprocess.run([*health, "--timeout-s", "1"], capture_output=True, text=True, timeout=30,
                                 env=env, cwd=repo)  # fmt: skip
            assert res.returncode == 1 and "no compactor metrics" in res.stderr, res.stdout + res.stderr
        finally:
            proc.send_signal(signal.SIGCONT)
    finally:
        proc.terminate()
        proc.wait(30)
