"""A private, throw-away PostgreSQL cluster for tests and benchmarks.

Used by the pytest plugin ``tests/fixtures/postgres.py`` and by
``python -m loadtest.metastore``; not used in production. ``initdb --no-sync -A
trust`` into a temp dir, then ``pg_ctl -w start`` on a free port on 127.0.0.1 with
fsync off and the unix socket inside the temp dir. ``initdb`` refuses to run as
root, so as root everything runs as the ``postgres`` user (``runuser``) and the
temp dir is handed to that user.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")

PG_BIN_GLOBS = ("/usr/lib/postgresql/*/bin", "/usr/local/pgsql/bin")


def find_pg_bin() -> Path | None:
    """Directory holding initdb and pg_ctl, or None."""
    found = shutil.which("initdb")
    if found and shutil.which("pg_ctl"):
        return Path(found).resolve().parent
    for pattern in PG_BIN_GLOBS:
        for candidate in sorted(glob.glob(pattern), reverse=True):
            if (Path(candidate) / "initdb").exists() and (Path(candidate) / "pg_ctl").exists():
                return Path(candidate)
    return None


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start_on_free_ports(start: Callable[[], T], attempts: int = 3) -> T:
    """``start()``, which takes its ports from :func:`free_port`, again while it fails
    with "address already in use": free_port() releases a port before the server
    binds it, so on a shared host another process may take it first."""
    for _ in range(attempts - 1):
        try:
            return start()
        except Exception as e:
            if "address already in use" not in str(e).lower():
                raise
    return start()


class PostgresServer:
    """``start()`` / ``stop()`` a private cluster; ``url(db)`` gives an asyncpg URL."""

    def __init__(self, bin_dir: Path | None = None, port: int | None = None) -> None:
        found = bin_dir or find_pg_bin()
        if found is None:
            raise FileNotFoundError("PostgreSQL server binaries (initdb, pg_ctl) not found")
        self.bin_dir = found
        self.port = port or free_port()
        self.tmp: Path | None = None
        self.run_as: str | None = "postgres" if os.geteuid() == 0 else None
        self._options = ""

    @property
    def data_dir(self) -> Path:
        assert self.tmp is not None, "server not started"
        return self.tmp / "data"

    def url(self, database: str = "postgres", driver: str = "postgresql+asyncpg") -> str:
        return f"{driver}://postgres@127.0.0.1:{self.port}/{database}"

    def _run(self, *args: str) -> None:
        cmd = [str(self.bin_dir / args[0]), *args[1:]]
        if self.run_as is not None:
            cmd = ["runuser", "-u", self.run_as, "--", *cmd]
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            raise RuntimeError(
                f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stdout}{proc.stderr}"
            )

    def start(self, extra_options: str = "") -> PostgresServer:
        """initdb + start; ``extra_options`` are more ``-c name=value`` server settings."""
        self.tmp = Path(tempfile.mkdtemp(prefix="floe-pg-"))
        if self.run_as is not None:
            user = pwd.getpwnam(self.run_as)
            os.chown(self.tmp, user.pw_uid, user.pw_gid)
        self._run(
            "initdb",
            "--no-sync",
            "-A",
            "trust",
            "-U",
            "postgres",
            "-E",
            "UTF8",
            "-D",
            str(self.data_dir),
        )
        options = (
            f"-p {self.port} -c listen_addresses=127.0.0.1 -c unix_socket_directories={self.tmp} "
            "-c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=200 "
            "-c shared_buffers=128MB"
        )
        if extra_options:
            options = f"{options} {extra_options}"
        self._options = options
        self.resume()
        return self

    def resume(self) -> None:
        """Start the server (again) on its data directory and port."""
        log = str(self.data_dir.parent / "server.log")
        self._run(
            "pg_ctl", "-w", "-t", "60", "-D", str(self.data_dir), "-l", log, "-o", self._options, "start"
        )

    def pause(self) -> None:
        """Stop the server but keep its data (outage tests); :meth:`resume` restarts it."""
        self._run("pg_ctl", "-w", "-D", str(self.data_dir), "-m", "immediate", "stop")

    def stop(self) -> None:
        if self.tmp is None:
            return
        try:
            self._run("pg_ctl", "-w", "-D", str(self.data_dir), "-m", "immediate", "stop")
        except RuntimeError:
            pass
        shutil.rmtree(self.tmp, ignore_errors=True)
        self.tmp = None

    def __enter__(self) -> PostgresServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
