"""``floe metastore serve`` under a 99 MB request (issue 15: 74 MB -> 3.5 GB RSS, 15.5 s stall).

The service runs as its own process (SQLite, a token). A 99 MB body is posted
anonymously (401 before the body is read) and with the token (413: over the
16 MiB cap while it streams in), and a body under the cap with millions of
JSON values (413 before parsing); meanwhile and afterwards an authenticated
client keeps being served. The service's RSS (``/proc/<pid>/status``) stays
under 300 MiB.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import aiohttp
import pytest

from metastore.pgserver import start_on_free_ports
from metastore.remote import RemoteMetastore
from tests.agent.test_memory_attacks import rss
from tests.fixtures.s3 import free_port

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

MiB = 1024 * 1024
TOKEN = "metastore-token-0123456789abcdef"
REPO = Path(__file__).resolve().parents[2]


def _wait_http(url: str, proc: subprocess.Popen[bytes], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, "floe metastore serve exited"
        try:
            with urllib.request.urlopen(url, timeout=1):
                return
        except OSError:
            time.sleep(0.1)  # bounded poll on readiness
    raise AssertionError(f"{url} not up")


def _serve(tmp_path: Path, env: dict[str, str]) -> tuple[subprocess.Popen[bytes], int]:
    """``floe metastore serve`` on a free port, listening. free_port() releases the
    port before the server binds it, so on a shared box another process may take it
    first ("address already in use"): then try another port."""

    def once() -> tuple[subprocess.Popen[bytes], int]:
        port = free_port()
        with open(tmp_path / "ms.log", "wb") as log:
            proc = subprocess.Popen(
                [sys.executable, "-m", "floe_cli.main", "metastore", "--metastore",
                 f"sqlite:///{tmp_path / 'm.db'}", "serve", "--host", "0.0.0.0", "--port", str(port)],
                stdout=log, stderr=subprocess.STDOUT, env=env,
            )  # fmt: skip
        try:
            _wait_http(f"http://127.0.0.1:{port}/healthz", proc)
        except AssertionError as e:
            proc.kill()
            proc.wait(30)
            raise AssertionError(f"{e}:\n{(tmp_path / 'ms.log').read_text()[-3000:]}") from e
        return proc, port

    return start_on_free_ports(once)


def test_99mb_request(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLOE_")}
    env.update(FLOE_INTERNAL_TOKEN=TOKEN, PYTHONPATH=str(REPO))
    proc, port = _serve(tmp_path, env)
    try:
        url = f"http://127.0.0.1:{port}"
        base, _ = rss(proc.pid)
        result = asyncio.run(_attack(url))
        now, peak = rss(proc.pid)
    finally:
        proc.terminate()
        proc.wait(30)
    print(f"metastore service: base RSS {base / MiB:.0f} MiB, now {now / MiB:.0f} MiB, peak {peak / MiB:.0f} MiB; {result}")
    assert result["anonymous"] == 401
    assert result["authenticated"] == 413
    assert result["values"] == 413
    assert result["served"] >= 1 and result["max_call_s"] < 5.0, result
    assert peak <= 300 * MiB, f"peak RSS {peak / MiB:.0f} MiB"
    text = (tmp_path / "ms.log").read_text()
    assert "Traceback" not in text, text[-3000:]


async def _attack(url: str) -> dict[str, float]:
    body = b'{"a": ["' + b"x" * (99 * 1000 * 1000) + b'"], "k": {}}'
    values = b'{"a": [[' + b"0," * (5 * MiB) + b'0]], "k": {}}'  # 10 MB, 5 M values
    out: dict[str, float] = {"served": 0, "max_call_s": 0.0}
    stop = asyncio.Event()

    async def client() -> None:
        remote = await RemoteMetastore(url, token=TOKEN).start()
        try:
            while not stop.is_set():
                t0 = time.monotonic()
                await remote.live_agents(0)
                out["max_call_s"] = max(out["max_call_s"], time.monotonic() - t0)
                out["served"] += 1
                await asyncio.sleep(0.05)
        finally:
            await remote.close()

    served = asyncio.create_task(client())
    async with aiohttp.ClientSession() as s:
        for name, data, headers in (
            ("anonymous", body, {}),
            ("authenticated", body, {"Authorization": f"Bearer {TOKEN}"}),
            ("values", values, {"Authorization": f"Bearer {TOKEN}"}),
        ):
            try:
                async with s.post(f"{url}/rpc/commit_offsets", data=data, headers=headers) as r:
                    out[name] = r.status
            except aiohttp.ClientError:  # the server may close after answering early
                out[name] = -1
    stop.set()
    await served
    return out
