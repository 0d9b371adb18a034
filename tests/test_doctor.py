"""`floe doctor` against a good configuration and four broken ones (issue 22).

Each broken configuration must give one FAIL line naming the problem, a
non-zero exit and no traceback: a bad DSN (Postgres on a closed port), a
missing bucket (moto), no write permission (an S3 endpoint that lists but
answers PUT with 403 AccessDenied, as a read-only IAM policy does), and the
Kafka port already in use.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from tests.fixtures.s3 import REGION, free_port

pytestmark = [pytest.mark.postgres, pytest.mark.s3]

REPO = Path(__file__).resolve().parents[1]
ENV_AWS = {"AWS_ACCESS_KEY_ID": "x", "AWS_SECRET_ACCESS_KEY": "x", "AWS_DEFAULT_REGION": REGION}


def doctor(*args: str) -> subprocess.CompletedProcess[str]:
    import os

    env = {k: v for k, v in os.environ.items() if not k.startswith("FLOE_")} | ENV_AWS
    return subprocess.run(
        [sys.executable, "-m", "floe_cli.main", "doctor", "--host", "127.0.0.1", "--timeout", "5", *args],
        capture_output=True, text=True, timeout=120, cwd=REPO, env=env,
    )  # fmt: skip


class _ReadOnlyS3(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # answers Expect: 100-continue, as S3 does
    def _send(self, code: int, body: bytes) -> None:
        self.send_response(code)
        self.send_header("Content-Type", "application/xml")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:  # ListObjectsV2: an empty bucket
        self._send(200, b'<?xml version="1.0" encoding="UTF-8"?><ListBucketResult><Name>ro</Name>'
                   b"<KeyCount>0</KeyCount><IsTruncated>false</IsTruncated></ListBucketResult>")  # fmt: skip

    def do_PUT(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self._send(403, b'<?xml version="1.0" encoding="UTF-8"?><Error><Code>AccessDenied</Code>'
                   b"<Message>Access Denied</Message></Error>")  # fmt: skip

    def log_message(self, *a: object) -> None:
        pass


@pytest.fixture
def readonly_s3() -> Iterator[str]:
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _ReadOnlyS3)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{srv.server_address[1]}"
    finally:
        srv.shutdown()


def _fails(res: subprocess.CompletedProcess[str], check: str, words: str) -> None:
    assert res.returncode == 1 and "Traceback" not in res.stdout + res.stderr, res.stdout + res.stderr
    fails = [line for line in res.stdout.splitlines() if line.startswith("FAIL")]
    assert len(fails) == 1 and fails[0].startswith(f"FAIL {check}:") and words in fails[0], res.stdout
    print(f"\n$ floe doctor ({check} broken)\n{res.stdout}", end="")


def test_doctor(postgres_url: str, s3_url: str, moto_server: str, readonly_s3: str) -> None:
    kafka_port = free_port()
    good = ["--metastore", postgres_url, "--objects", s3_url, "--port", str(kafka_port), "--admin-port", "0",
            "--cluster-id", "floe-test"]  # fmt: skip
    res = doctor(*good)
    assert res.returncode == 0, res.stdout + res.stderr
    assert not [line for line in res.stdout.splitlines() if not line.startswith("ok")], res.stdout
    assert {"metastore", "migrations", "bucket", "write", "kafka listener"} <= {
        line.split()[1].rstrip(":") if line.split()[1] != "kafka" else "kafka listener"
        for line in res.stdout.splitlines()
    }
    print(f"\n$ floe doctor (good)\n{res.stdout}", end="")

    def with_(flag: str, value: str) -> list[str]:
        args = list(good)
        args[args.index(flag) + 1] = value
        return args

    closed = free_port()
    _fails(doctor(*with_("--metastore", f"postgresql://postgres@127.0.0.1:{closed}/floe")), "metastore", "cannot use")
    missing = f"s3://no-such-bucket-{closed}/p?endpoint={moto_server}&region={REGION}"
    _fails(doctor(*with_("--objects", missing)), "bucket", "no-such-bucket")
    ro = f"s3://ro/p?endpoint={readonly_s3}&region={REGION}"
    _fails(doctor(*with_("--objects", ro)), "write", "Access Denied")
    with socket.create_server(("127.0.0.1", kafka_port)):
        _fails(doctor(*good), "kafka listener", f"127.0.0.1:{kafka_port}")


def test_cluster_id_required_and_checked(tmp_path: Path) -> None:
    """`floe agent` on a metastore without a cluster id needs one; with another
    deployment's id it refuses to start; `floe doctor` says the same in one line."""
    import asyncio
    import os

    from metastore import open_metastore

    db = f"sqlite:///{tmp_path / 'meta.db'}"
    base = [sys.executable, "-m", "floe_cli.main", "agent", "--port", "0", "--admin-port", "0",
            "--objects", "memory://", "--metastore", db]  # fmt: skip
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLOE_")}
    res = subprocess.run(base, capture_output=True, text=True, timeout=60, cwd=REPO, env=env)
    assert res.returncode == 1 and "Traceback" not in res.stderr, res.stderr
    assert res.stderr.strip().splitlines()[-1] == (
        "floe: no cluster id: set FLOE_CLUSTER_ID (or --cluster-id) for the first agent of a"
        " deployment; later agents may omit it and use the one stored in the metastore"
    )

    async def store() -> None:
        ms = await open_metastore(db)
        try:
            assert await ms.claim_cluster_id("prod-eu") == "prod-eu"
        finally:
            await ms.close()

    asyncio.run(store())
    res = subprocess.run([*base, "--cluster-id", "prod-us"], capture_output=True, text=True, timeout=60,
                         cwd=REPO, env=env)  # fmt: skip
    assert res.returncode == 1 and "Traceback" not in res.stderr, res.stderr
    assert "cluster id 'prod-us' does not match 'prod-eu'" in res.stderr.strip().splitlines()[-1]
    doc = doctor("--metastore", db, "--objects", f"file://{tmp_path / 'objects'}", "--port", "0",
                 "--admin-port", "0", "--cluster-id", "prod-us")  # fmt: skip
    _fails(doc, "cluster id", "configured 'prod-us' but the metastore holds 'prod-eu'")
    doc = doctor("--metastore", db, "--objects", f"file://{tmp_path / 'objects'}", "--port", "0", "--admin-port", "0")
    assert "ok   cluster id: prod-eu (stored in the metastore)" in doc.stdout, doc.stdout
    # An empty database: reachable, and the one failing line says which command to run.
    empty = f"sqlite:///{tmp_path / 'empty.db'}"
    doc = doctor("--metastore", empty, "--objects", f"file://{tmp_path / 'objects'}", "--port", "0",
                 "--admin-port", "0", "--cluster-id", "x")  # fmt: skip
    assert "ok   metastore: reachable (no Floe schema yet)" in doc.stdout, doc.stdout
    _fails(doc, "migrations", "no schema, this release needs")
    assert "floe metastore migrate" in doc.stdout


def test_cli_errors_are_one_line(tmp_path: Path) -> None:
    """An unreachable Postgres: one line naming it (password hidden), exit 1, no
    traceback; --debug (anywhere on the line) shows the traceback."""
    closed = free_port()
    argv = [sys.executable, "-m", "floe_cli.main", "agent", "--port", "0", "--objects", "memory://",
            "--metastore", f"postgresql://floe:secret@127.0.0.1:{closed}/floe"]  # fmt: skip
    res = subprocess.run(argv, capture_output=True, text=True, timeout=60, cwd=REPO)
    assert res.returncode == 1 and "Traceback" not in res.stderr, res.stderr
    (line,) = res.stderr.strip().splitlines()
    assert f"cannot connect to the metastore at postgresql://floe:***@127.0.0.1:{closed}/floe" in line
    assert "secret" not in line
    res = subprocess.run([*argv, "--debug"], capture_output=True, text=True, timeout=60, cwd=REPO)
    assert res.returncode != 0 and "Traceback" in res.stderr


def test_compactor_once_with_s3_down_fails_fast(tmp_path: Path) -> None:
    """S3 unreachable: `floe compactor run --once` says so in one line within the
    probe deadline (it used to retry for 137 s)."""
    import os
    import time

    closed = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLOE_")} | ENV_AWS
    env["FLOE_METASTORE"] = f"sqlite:///{tmp_path / 'm.db'}"
    env["FLOE_OBJECTS"] = f"s3://b/p?endpoint=http://127.0.0.1:{closed}&region={REGION}"
    t0 = time.monotonic()
    res = subprocess.run(
        [sys.executable, "-m", "floe_cli.main", "compactor", "run", "--once", "--probe-timeout-s", "10"],
        capture_output=True, text=True, timeout=120, cwd=REPO, env=env,
    )  # fmt: skip
    took = time.monotonic() - t0
    assert res.returncode == 1 and "Traceback" not in res.stderr, res.stderr
    assert "object store s3://b/p unreachable" in res.stderr.strip().splitlines()[-1]
    assert took < 60, took


def test_docs_commands_exist() -> None:
    """Every `floe <command> [<subcommand>]` that docs/operations.md names exists."""
    import re

    from floe_cli.main import build_parser

    doc = (REPO / "docs" / "operations.md").read_text()
    commands = build_parser()._subparsers._group_actions[0].choices  # type: ignore[union-attr]
    named = set(re.findall(r"`floe ([a-z][a-z-]*)(?: ([a-z][a-z-]*))?", doc))
    assert ("doctor", "") in named and ("metastore", "migrate") in named, named
    for cmd, sub in named:
        assert cmd in commands, f"docs name `floe {cmd}`, which does not exist"
        subs = [a for a in commands[cmd]._actions if a.__class__.__name__ == "_SubParsersAction"]
        if sub and subs:
            assert sub in subs[0].choices, f"docs name `floe {cmd} {sub}`, which does not exist"
