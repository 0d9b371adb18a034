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
    assert {"metastore", "migrations", "bucket", "write", "PLAINTEXT listener"} <= {
        line[5:].split(":")[0] for line in res.stdout.splitlines()
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
        _fails(doctor(*good), "PLAINTEXT listener", f"127.0.0.1:{kafka_port}")


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


# -- the security configuration (issue 42) -------------------------------------------


def _doctor_env(extra: dict[str, str], *args: str, timeout: str = "5") -> subprocess.CompletedProcess[str]:
    import os

    env = {k: v for k, v in os.environ.items() if not k.startswith("FLOE_")} | ENV_AWS | extra
    argv = [sys.executable, "-m", "floe_cli.main", "doctor", "--host", "127.0.0.1", *args]
    if timeout:
        argv += ["--timeout", timeout]
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, cwd=REPO, env=env)


def _self_signed(directory: Path, name: str, *, days: float, start_days: float = -1) -> tuple[Path, Path]:
    """A self-signed certificate valid from now+start_days to now+days, and its key."""
    import datetime as dt

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    now = dt.datetime.now(dt.UTC)
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    cert = (x509.CertificateBuilder().subject_name(subject).issuer_name(subject).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now + dt.timedelta(days=start_days)).not_valid_after(now + dt.timedelta(days=days))
            .sign(key, hashes.SHA256()))  # fmt: skip
    directory.mkdir(parents=True, exist_ok=True)
    cert_path, key_path = directory / f"{name}.pem", directory / f"{name}.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))  # fmt: skip
    return cert_path, key_path


def _lines(res: subprocess.CompletedProcess[str]) -> dict[str, str]:
    """check name -> its whole line."""
    return {line[5:].split(":")[0]: line for line in res.stdout.splitlines() if line[:4] in ("ok  ", "WARN", "FAIL")}


@pytest.fixture
def secure_setup(tmp_path: Path) -> tuple[list[str], dict[str, str]]:
    """A migrated SQLite metastore with one SCRAM user, and the flags/env of an
    agent with PLAINTEXT + SASL_SSL listeners, a 90-day certificate and PLAIN users."""
    import asyncio

    from agent.security.sasl.scram import make_credential
    from metastore import open_metastore

    db = f"sqlite:///{tmp_path / 'meta.db'}"

    async def seed() -> None:
        ms = await open_metastore(db)
        try:
            await ms.put_scram_credential(make_credential("carol", "SCRAM-SHA-256", "pw"))
        finally:
            await ms.close()

    asyncio.run(seed())
    cert, key = _self_signed(tmp_path / "tls", "good", days=90)
    args = ["--metastore", db, "--objects", f"file://{tmp_path / 'objects'}", "--admin-port", "0", "--cluster-id", "x"]
    env = {
        "FLOE_LISTENERS": f"PLAINTEXT://127.0.0.1:{free_port()},SASL_SSL://127.0.0.1:{free_port()}",
        "FLOE_SSL_CERTFILE": str(cert), "FLOE_SSL_KEYFILE": str(key),
        "FLOE_SASL_MECHANISMS": "PLAIN,SCRAM-SHA-256", "FLOE_SASL_USERS": "alice:a-secret",
    }  # fmt: skip
    return args, env


def test_doctor_security_good(secure_setup: tuple[list[str], dict[str, str]]) -> None:
    args, env = secure_setup
    res = _doctor_env(env, *args)
    assert res.returncode == 0, res.stdout + res.stderr
    lines = _lines(res)
    assert all(line.startswith("ok") for line in lines.values()), res.stdout
    port = env["FLOE_LISTENERS"].rsplit(":", 1)[1]
    assert f"127.0.0.1:{port} is free" in lines["SASL_SSL listener"]  # the configured port, not 9092
    assert "matches the certificate CN=good" in lines["tls key"]
    assert "valid until" in lines["tls certificate"]
    assert "1 user(s) in FLOE_SASL_USERS" in lines["sasl PLAIN"]
    assert "1 user(s) in the metastore" in lines["sasl SCRAM-SHA-256"]
    print(f"\n$ floe doctor (TLS + SASL, good)\n{res.stdout}", end="")


def test_doctor_security_broken(tmp_path: Path, secure_setup: tuple[list[str], dict[str, str]]) -> None:
    """Each broken piece: one FAIL line naming it (or a WARN that does not fail)."""
    args, env = secure_setup
    _fails(_doctor_env(env | {"FLOE_SSL_CERTFILE": str(tmp_path / "missing.pem")}, *args),
           "tls certificate", "missing.pem")  # fmt: skip
    _other_cert, other_key = _self_signed(tmp_path / "tls", "other", days=90)
    _fails(_doctor_env(env | {"FLOE_SSL_KEYFILE": str(other_key)}, *args), "tls key", "is not the key of the certificate")
    expired, expired_key = _self_signed(tmp_path / "tls", "expired", days=-1, start_days=-30)
    _fails(_doctor_env(env | {"FLOE_SSL_CERTFILE": str(expired), "FLOE_SSL_KEYFILE": str(expired_key)}, *args),
           "tls certificate", "expired on")  # fmt: skip
    soon, soon_key = _self_signed(tmp_path / "tls", "soon", days=5)
    res = _doctor_env(env | {"FLOE_SSL_CERTFILE": str(soon), "FLOE_SSL_KEYFILE": str(soon_key)}, *args)
    assert res.returncode == 0 and _lines(res)["tls certificate"].startswith("WARN"), res.stdout
    assert "day(s): renew it" in _lines(res)["tls certificate"]
    # Nobody can log in: no PLAIN user and only a SCRAM mechanism nobody has a credential for.
    _fails(_doctor_env(env | {"FLOE_SASL_USERS": "", "FLOE_SASL_MECHANISMS": "PLAIN,SCRAM-SHA-512"}, *args),
           "sasl", "no user can log in with PLAIN, SCRAM-SHA-512")  # fmt: skip
    # The configured SASL_SSL port is in use.
    port = int(env["FLOE_LISTENERS"].rsplit(":", 1)[1])
    with socket.create_server(("127.0.0.1", port)):
        _fails(_doctor_env(env, *args), "SASL_SSL listener", f"127.0.0.1:{port}")
    # A served metastore without its token (the metastore line fails too: nothing listens).
    served = list(args)
    served[served.index("--metastore") + 1] = f"http://127.0.0.1:{free_port()}"
    lines = _lines(_doctor_env(env, *served))
    assert lines["metastore token"].startswith("FAIL") and "FLOE_METASTORE_TOKEN" in lines["metastore token"]


class _Jwks(BaseHTTPRequestHandler):
    body = b""

    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(self.body)))
        self.end_headers()
        self.wfile.write(self.body)

    def log_message(self, *a: object) -> None:
        pass


def test_doctor_jwks_and_timeout(secure_setup: tuple[list[str], dict[str, str]]) -> None:
    """OAUTHBEARER: a reachable JWKS is ok; a closed port fails; a black-holed one
    fails within --timeout (here from FLOE_DOCTOR_TIMEOUT), not a fixed deadline."""
    import json
    import time

    import jwt
    from cryptography.hazmat.primitives.asymmetric import ec

    args, env = secure_setup
    jwk = json.loads(jwt.algorithms.ECAlgorithm.to_jwk(ec.generate_private_key(ec.SECP256R1()).public_key()))
    _Jwks.body = json.dumps({"keys": [jwk | {"kid": "k1"}]}).encode()
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _Jwks)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    oauth = env | {"FLOE_SASL_MECHANISMS": "OAUTHBEARER"}
    try:
        res = _doctor_env(oauth | {"FLOE_OAUTH_JWKS": f"http://127.0.0.1:{srv.server_address[1]}/jwks"}, *args)
        assert res.returncode == 0 and "1 key(s)" in _lines(res)["jwks"], res.stdout
    finally:
        srv.shutdown()
    _fails(_doctor_env(oauth | {"FLOE_OAUTH_JWKS": f"http://127.0.0.1:{free_port()}/jwks"}, *args),
           "jwks", "Connection refused")  # fmt: skip
    with socket.create_server(("127.0.0.1", 0)) as hole:  # accepts (backlog), never answers
        url = f"http://127.0.0.1:{hole.getsockname()[1]}/jwks"
        t0 = time.monotonic()
        res = _doctor_env(oauth | {"FLOE_OAUTH_JWKS": url, "FLOE_DOCTOR_TIMEOUT": "1.5"}, *args, timeout="")
        took = time.monotonic() - t0
    _fails(res, "jwks", "no answer within 1.5 s")
    assert took < 30, took


def test_doctor_timeout_flag() -> None:
    from floe_cli.main import build_parser

    ns = build_parser().parse_args(["doctor"])
    assert ns.timeout == 15.0
    with pytest.raises(SystemExit):
        build_parser().parse_args(["doctor", "--timeout", "0"])


def test_doctor_tokens() -> None:
    """Where the internal credentials are needed: a served metastore needs its token;
    a shared one (Postgres) the peer token once the admin port is reachable."""
    from agent.config import AgentConfig
    from floe_cli.doctor_security import token_checks

    def lines(**kw: object) -> dict[str, str]:
        cfg = AgentConfig(objects="memory://", **kw)  # type: ignore[arg-type]
        return {name: f"{status} {detail}" for name, status, detail in token_checks(cfg)}

    assert lines(metastore="sqlite:///x.db", admin_port=9644) == {}  # one process: nothing to share
    pg = "postgresql://floe@db/floe"
    assert lines(metastore=pg, admin_port=0) == {}  # no admin port: no peer routes
    assert lines(metastore=pg, admin_port=9644)["peer token"].startswith("WARN not set")
    assert lines(metastore=pg, admin_port=9644, admin_host="127.0.0.1")["peer token"].startswith("ok")
    assert lines(metastore=pg, admin_port=9644, peer_token="short")["peer token"].startswith("WARN only 5")
    assert lines(metastore=pg, admin_port=9644, internal_token="x" * 32)["peer token"] == "ok set"
    assert lines(metastore="https://meta:8081")["metastore token"].startswith("FAIL")
    assert lines(metastore="https://meta:8081", metastore_token="t" * 32)["metastore token"] == "ok set"
    assert lines(metastore="http://meta:8081", metastore_token="t" * 32)["metastore token"].startswith("WARN")
    assert lines(metastore="http://127.0.0.1:8081", metastore_token="t" * 32)["metastore token"] == "ok set"


def test_passwords_redacted_everywhere(tmp_path: Path) -> None:
    """An unreachable Postgres URL with a password: every command names it, none prints the password."""
    import os

    url = f"postgresql://floe:hunter2secret@127.0.0.1:{free_port()}/floe"
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLOE_")} | ENV_AWS
    commands = [
        ["topics", "--metastore", url, "list"],
        ["users", "--metastore", url, "list"],
        ["groups", "--metastore", url, "list"],
        ["compactor", "--metastore", url, "--objects", f"file://{tmp_path / 'o'}", "run", "--once"],
        ["doctor", "--metastore", url, "--objects", f"file://{tmp_path / 'o'}", "--port", "0", "--timeout", "5"],
    ]
    for argv in commands:
        res = subprocess.run([sys.executable, "-m", "floe_cli.main", *argv], capture_output=True, text=True,
                             timeout=120, cwd=REPO, env=env)  # fmt: skip
        out = res.stdout + res.stderr
        assert res.returncode == 1 and "Traceback" not in out, (argv, out)
        assert "hunter2secret" not in out and "floe:***@127.0.0.1" in out, (argv, out)
