"""``floe metastore serve`` over TLS, and its clients' verification (issue 42).

The service runs in-process on loopback over a SQLite metastore with a
certificate signed by a throwaway CA (tests/fixtures/pki.py); clients are
:class:`~metastore.remote.RemoteMetastore`, as agents, the CLI and the compactor
use it. A client trusting that CA works; one that does not (the system trust
store, another CA, a certificate for another name), a TLS client against a plain
service and a plain client against a TLS one all fail at once with a
``MetastoreError`` that says what is wrong, never a hang. A certificate replaced
on disk is served to the next connection without a restart.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import pytest

from metastore import Metastore, MetastoreError, open_metastore
from metastore.remote import CA_ENV, RemoteMetastore, client_ssl_context
from metastore.service import ServerTls, serve
from tests.fixtures.agent_process import REPO_ROOT
from tests.fixtures.pki import Issued, TestCA

TOKEN = "tls-metastore-token-0123456789"
FAST_S = 5.0  # a refused handshake answers in milliseconds; a hang would take the 30 s timeout


@dataclass
class Served:
    inner: Metastore
    port: int
    ca: TestCA
    cert: Issued
    tls: ServerTls | None

    @property
    def https(self) -> str:
        return f"https://127.0.0.1:{self.port}"


async def _serve(tmp_path: Path, *, tls: bool, names: tuple[str, ...] = ("localhost",)) -> AsyncIterator[Served]:
    ca = TestCA(tmp_path / "pki")
    cert = ca.issue("metastore", dns=names, ips=("127.0.0.1",) if "localhost" in names else ())
    server_tls = ServerTls(str(cert.cert), str(cert.key), check_every_s=0.0) if tls else None
    inner = await open_metastore(f"sqlite:///{tmp_path / 'meta.db'}")
    runner, port, service = await serve(inner, "127.0.0.1", 0, token=TOKEN, tls=server_tls)
    try:
        yield Served(inner, port, ca, cert, server_tls)
    finally:
        await service.close()
        await runner.cleanup()
        await inner.close()


@pytest.fixture
async def served(tmp_path: Path) -> AsyncIterator[Served]:
    async for s in _serve(tmp_path, tls=True):
        yield s


async def _refused(url: str, ca_file: str | None) -> str:
    started = time.monotonic()
    remote = RemoteMetastore(url, token=TOKEN, ca_file=ca_file)
    try:
        with pytest.raises(MetastoreError) as info:
            await remote.list_topics()
    finally:
        await remote.close()
    assert time.monotonic() - started < FAST_S
    return str(info.value)


async def test_a_client_trusting_the_ca_works_over_https(served: Served, monkeypatch: pytest.MonkeyPatch) -> None:
    async with RemoteMetastore(served.https, token=TOKEN, ca_file=str(served.ca.cert)) as remote:
        await remote.create_topic("over-tls", 3, {})  # type: ignore[attr-defined]
        assert [t.name for t in await remote.list_topics()] == ["over-tls"]  # type: ignore[attr-defined]
    # open_metastore, as the agents and the CLI open it, with the CA from the environment.
    monkeypatch.setenv(CA_ENV, str(served.ca.cert))
    meta = await open_metastore(served.https, internal_token=TOKEN)
    try:
        assert [t.name for t in await meta.list_topics()] == ["over-tls"]
    finally:
        await meta.close()


async def test_the_system_trust_store_refuses_a_private_ca(served: Served) -> None:
    message = await _refused(served.https, "")
    assert "TLS certificate is not trusted" in message and CA_ENV in message, message


async def test_a_certificate_from_another_ca_is_refused(served: Served, tmp_path: Path) -> None:
    other = TestCA(tmp_path / "other", name="another CA")
    message = await _refused(served.https, str(other.cert))
    assert "not trusted" in message and "certificate verify failed" in message, message


async def test_a_certificate_for_another_name_is_refused(tmp_path: Path) -> None:
    async for s in _serve(tmp_path, tls=True, names=("metastore.internal",)):
        message = await _refused(s.https, str(s.ca.cert))
        assert "not trusted" in message and "mismatch" in message, message


async def test_https_client_against_a_plain_service_fails_at_once(tmp_path: Path) -> None:
    async for s in _serve(tmp_path, tls=False):
        message = await _refused(s.https, str(s.ca.cert))
        assert "TLS handshake failed" in message, message


async def test_plain_client_against_an_https_service_fails_at_once(served: Served) -> None:
    message = await _refused(f"http://127.0.0.1:{served.port}", None)
    assert "unreachable" in message, message
    # Nothing is answered in clear, not even /healthz.
    async with aiohttp.ClientSession() as s:
        with pytest.raises(aiohttp.ClientError):
            await s.get(f"http://127.0.0.1:{served.port}/healthz", timeout=aiohttp.ClientTimeout(total=FAST_S))


async def test_a_missing_ca_bundle_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(MetastoreError, match=CA_ENV):
        client_ssl_context("https://127.0.0.1:1", str(tmp_path / "nope.pem"))
    assert client_ssl_context("http://127.0.0.1:1", str(tmp_path / "nope.pem")) is None


async def test_a_renewed_certificate_is_served_without_restart(served: Served, tmp_path: Path) -> None:
    renewed_ca = TestCA(tmp_path / "renewed", name="renewed CA")
    renewed = renewed_ca.issue("metastore2", dns=("localhost",), ips=("127.0.0.1",))
    # Written the way an operator's tooling should: each file replaced atomically.
    for src, dst in ((renewed.key, served.cert.key), (renewed.cert, served.cert.cert)):
        tmp = dst.with_suffix(".new")
        tmp.write_bytes(src.read_bytes())
        os.replace(tmp, dst)
    async with RemoteMetastore(served.https, token=TOKEN, ca_file=str(renewed_ca.cert)) as remote:
        assert await remote.list_topics() == []  # type: ignore[attr-defined]
    message = await _refused(served.https, str(served.ca.cert))
    assert "not trusted" in message


def test_serve_refuses_a_certificate_without_its_key(tmp_path: Path) -> None:
    cert = TestCA(tmp_path / "pki").issue("metastore", dns=("localhost",))
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLOE_")}
    env["PYTHONPATH"] = str(REPO_ROOT)
    base = [sys.executable, "-m", "floe_cli.main", "metastore", "serve",
            "--metastore", f"sqlite:///{tmp_path / 'm.db'}", "--host", "127.0.0.1", "--port", "0"]  # fmt: skip
    r = subprocess.run([*base, "--tls-cert", str(cert.cert)], env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode != 0 and "--tls-cert and --tls-key go together" in r.stderr + r.stdout
    r = subprocess.run(
        [*base, "--tls-cert", str(cert.cert), "--tls-key", str(cert.cert)],  # not a key
        env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert r.returncode != 0 and "cannot load --tls-cert/--tls-key" in r.stderr + r.stdout
