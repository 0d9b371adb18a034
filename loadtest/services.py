"""Start what a benchmark runs against: services (Postgres, moto S3) and agent processes.

Shared by ``loadtest.produce`` and the OMB-style driver (``python -m loadtest run``).

* ``dev``: SQLite metastore + ``file://`` objects in a temp dir, one agent process.
* ``postgres-s3``: a private PostgreSQL (``metastore.pgserver``, fsync off) and
  moto's S3 server as its own process, one agent process.
* ``kafka``: a real Apache Kafka 4.1 broker (KRaft, one node) from Maven
  Central's jars (:mod:`loadtest.kafka_broker`), the same driver against it.
* ``bootstrap=HOST:PORT``: an already running cluster; nothing is started (and
  there is no /metrics unless ``--admin-url`` is given).

``store_latency`` (``s3-standard``, ``s3-express``, ``none`` or latency URL
options, :mod:`objectstore.latency`) puts the dev and postgres-s3 agents'
object store behind the simulated-latency wrapper: it is added to the
``--objects`` URL, so ``Backend.objects_url`` carries it too and whatever else
opens that store (the raw baselines) runs under the same profile.
``Backend.store_latency`` describes the profile for the result files.

``journal=N`` gives the dev and postgres-s3 agents a journal tier of N buckets
(``file://`` directories under ``journal_latency``, default ``s3-express``);
creating ``Backend.journal_stall_files[i]`` stalls bucket i until it is removed.

Every agent is ``python -m floe_cli.main agent`` started directly (no wrapper),
so ``Agent.pid`` is the Python process to point py-spy at.

Multi-agent hook: :func:`start_backend` takes ``agents=N``; today only 1 is
supported (the ring/peer settings of a cluster are not wired yet) and N > 1
raises with a clear message.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from metastore.pgserver import free_port


def wait_http(url: str, timeout: float, proc: subprocess.Popen[bytes] | None = None) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            return False
        try:
            urllib.request.urlopen(url, timeout=1).close()
            return True
        except OSError:
            time.sleep(0.05)
    return False


def start_moto() -> tuple[subprocess.Popen[bytes], str]:
    """moto's S3 server as its own process on a free loopback port."""
    port = free_port()
    endpoint = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-p", str(port), "-H", "127.0.0.1"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    if not wait_http(endpoint + "/", 30, proc):
        proc.kill()
        raise RuntimeError("moto server did not start")
    return proc, endpoint


@dataclass
class Agent:
    proc: subprocess.Popen[bytes]
    kafka_port: int
    admin_port: int
    log_path: Path
    workers: int = 1

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def admin_urls(self) -> list[str]:
        """One per worker (``--workers N`` serves worker i's /metrics on admin port + i)."""
        return [f"http://127.0.0.1:{self.admin_port + i}" for i in range(self.workers)]

    def pids(self) -> list[int]:
        """The processes doing the work: the agent, or each worker of a supervisor."""
        if self.workers == 1:
            return [self.proc.pid]
        out = []
        for url in self.admin_urls:
            with urllib.request.urlopen(f"{url}/healthz", timeout=5) as r:
                out.append(int(json.loads(r.read())["pid"]))
        return out

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.kafka_port}"

    @property
    def admin_url(self) -> str:
        return f"http://127.0.0.1:{self.admin_port}"

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)


def start_agent(
    metastore: str,
    objects: str,
    workdir: Path,
    *,
    flush_interval_ms: int | None = None,
    flush_bytes: int | None = None,
    flush_min_interval_ms: int | None = None,
    log_level: str = "WARNING",
    name: str = "agent",
    workers: int = 1,
    virtual_brokers: int | None = None,
    journal: str = "",
    journal_quorum: int = 2,
    command: str = "agent",  # or "dev" (floe dev: agent + in-process compactor)
    extra_args: tuple[str, ...] | list[str] = (),
    kafka_port: int | None = None,  # fixed ports: a restart on the same addresses
    admin_port: int | None = None,
    env: dict[str, str] | None = None,  # extra environment (FLOE_AGENT_ID, FLOE_DEBUG_FAULTS, ...)
) -> Agent:
    kport = kafka_port or free_port()
    aport = admin_port or free_port_run(workers)
    log_path = workdir / f"{name}.log"
    cmd = [
        sys.executable, "-m", "floe_cli.main", command, "--host", "127.0.0.1",
        "--port", str(kport), "--admin-port", str(aport),
        "--metastore", metastore, "--objects", objects, "--log-level", log_level,
        "--cluster-id", "floe-loadtest",
        "--auto-create-topics",  # the harness's topics come from the first produce
    ]
    if flush_interval_ms is not None:
        cmd += ["--flush-interval-ms", str(flush_interval_ms)]
    if flush_bytes is not None:
        cmd += ["--flush-bytes", str(flush_bytes)]
    if flush_min_interval_ms is not None:
        cmd += ["--flush-min-interval-ms", str(flush_min_interval_ms)]
    cmd += ["--workers", str(workers)]
    if virtual_brokers is not None:
        cmd += ["--virtual-brokers", str(virtual_brokers)]
    if journal:
        cmd += ["--journal", journal, "--journal-quorum", str(journal_quorum)]
    cmd += list(extra_args)
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env={**os.environ, **(env or {})})
    agent = Agent(proc, kport, aport, log_path, workers)
    if not all(wait_http(f"{u}/healthz", 60, proc) for u in agent.admin_urls):
        agent.stop()
        raise RuntimeError("agent did not start:\n" + log_path.read_text()[-3000:])
    return agent


def free_port_run(n: int) -> int:
    """A port p with p .. p + n - 1 all free (the admin ports of n workers)."""
    import random
    import socket

    for _ in range(100):
        # Below the ephemeral range, so no worker's own port (bound to 0) takes one of them.
        p = free_port() if n == 1 else random.randrange(20000, 30000)
        socks = []
        try:
            for i in range(n):
                sk = socket.socket()
                socks.append(sk)
                sk.bind(("127.0.0.1", p + i))
            return p
        except OSError:
            continue
        finally:
            for sk in socks:
                sk.close()
    raise RuntimeError(f"no run of {n} free ports")


def journal_buckets(
    workdir: Path, n: int, latency: str | None = "s3-express"
) -> tuple[list[str], list[Path], dict[str, Any] | None]:
    """A journal tier of ``n`` ``file://`` buckets under ``workdir`` (issue 40): their
    URLs, the files that stall each bucket while they exist, and the latency profile
    they run under (None without buckets or latency)."""
    urls: list[str] = []
    stalls: list[Path] = []
    described: dict[str, Any] | None = None
    for i in range(n):
        (workdir / f"journal{i}").mkdir()
        stalls.append(workdir / f"stall-journal{i}")
        # fsync off: the S3 Express profile stands for the bucket's latency, not this disk's
        url = f"file://{workdir / f'journal{i}'}?fsync=false&latency_stall_file={stalls[-1]}"
        if latency:
            from objectstore.latency import parse_latency, split_latency_url, with_latency

            url = with_latency(url, latency)
            described = parse_latency(split_latency_url(url)[1])[0].describe()
        urls.append(url)
    return urls, stalls, described


@dataclass
class Backend:
    """A running system under test plus what is needed to measure its baselines."""

    kind: str  # dev | postgres-s3 | kafka | bootstrap
    bootstrap: str
    metastore_url: str | None = None  # None when we did not start it
    objects_url: str | None = None
    s3_endpoint: str | None = None
    agents: list[Agent] = field(default_factory=list)
    admin_urls: list[str] = field(default_factory=list)
    workdir: Path | None = None
    postgres: Any = None  # metastore.pgserver.PostgresServer
    kafka_pid: int | None = None
    store_latency: dict[str, Any] | None = None  # the profile the object store runs under
    journal_latency: dict[str, Any] | None = None  # the journal buckets' profile (None: no journal)
    journal_stall_files: list[Path] = field(default_factory=list)  # exists: that bucket stalls
    store_stall_file: Path | None = None  # exists: the standard store stalls (with a latency profile)
    _cleanups: list[Callable[[], None]] = field(default_factory=list)

    @property
    def server_pid(self) -> int | None:
        """The process py-spy looks at (with workers: the supervisor; py-spy --subprocesses follows them)."""
        return self.agents[0].pid if self.agents else self.kafka_pid

    def server_pids(self) -> list[int]:
        """The processes whose CPU the benchmark charges to the system under test."""
        if self.agents:
            return [p for a in self.agents for p in a.pids()]
        return [self.kafka_pid] if self.kafka_pid else []

    def close(self) -> None:
        for c in reversed(self._cleanups):
            try:
                c()
            except Exception:
                pass
        self._cleanups.clear()


def start_backend(
    spec: str,
    *,
    agents: int = 1,
    workers: int = 1,
    virtual_brokers: int | None = None,
    flush_interval_ms: int | None = None,
    flush_bytes: int | None = None,
    flush_min_interval_ms: int | None = None,
    admin_url: str | None = None,
    keep: bool = False,
    store_latency: str | None = None,
    journal: int = 0,
    journal_latency: str | None = "s3-express",
    journal_quorum: int = 2,
    debug_faults: bool = False,
) -> Backend:
    """``spec`` is ``dev``, ``postgres-s3``, ``kafka`` or ``bootstrap=HOST:PORT``.

    ``agents`` > 1 starts that many agents on one metastore and object store
    (agent ids 1..N; the bootstrap lists them all); ``debug_faults`` lets the
    harness slow an agent down through its admin port (``agent.faults``).

    ``store_latency`` applies to the backends started here with an object store
    (dev, postgres-s3); the others ignore it (``Backend.store_latency`` stays None).
    """
    if spec.startswith("bootstrap="):
        b = Backend("bootstrap", spec.split("=", 1)[1])
        if admin_url:
            b.admin_urls.append(admin_url.rstrip("/"))
        return b
    if spec == "kafka":
        from loadtest.kafka_broker import KafkaBroker

        kafka = KafkaBroker.start()
        b = Backend("kafka", kafka.bootstrap, kafka_pid=kafka.pid, workdir=kafka.workdir)
        b._cleanups.append(kafka.stop)
        return b
    if spec not in ("dev", "postgres-s3"):
        raise ValueError(f"unknown backend {spec!r}: dev | postgres-s3 | kafka | bootstrap=HOST:PORT")
    if agents < 1 or (agents > 1 and journal):
        raise ValueError("agents >= 1; several agents with a journal tier are not wired here")
    import shutil

    tmp = Path(tempfile.mkdtemp(prefix="floe-bench-"))
    b = Backend(spec, "", workdir=tmp)
    if not keep:
        b._cleanups.append(lambda: shutil.rmtree(tmp, ignore_errors=True))
    try:
        if spec == "dev":
            (tmp / "objects").mkdir()
            b.metastore_url = f"sqlite:///{tmp / 'meta.db'}"
            b.objects_url = f"file://{tmp / 'objects'}"
        else:
            from metastore.pgserver import PostgresServer

            pg = PostgresServer().start()
            b.postgres = pg
            b._cleanups.append(pg.stop)
            b.metastore_url = pg.url()
            moto, endpoint = start_moto()

            def stop_moto() -> None:
                moto.terminate()
                try:
                    moto.wait(10)
                except subprocess.TimeoutExpired:
                    moto.kill()

            b._cleanups.append(stop_moto)
            b.s3_endpoint = endpoint
            os.environ.setdefault("AWS_ACCESS_KEY_ID", "bench")
            os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "bench")
            import boto3

            boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1").create_bucket(
                Bucket="bench"
            )
            b.objects_url = f"s3://bench/floe?endpoint={endpoint}&region=us-east-1"
        if store_latency:
            from objectstore.latency import parse_latency, split_latency_url, with_latency

            # the standard store stalls while this file exists (loadtest run --store-stall)
            b.store_stall_file = tmp / "stall-objects"
            sep = "&" if "?" in b.objects_url else "?"
            b.objects_url = f"{b.objects_url}{sep}latency_stall_file={b.store_stall_file}"
            b.objects_url = with_latency(b.objects_url, store_latency)
            profile, _ = parse_latency(split_latency_url(b.objects_url)[1])
            b.store_latency = profile.describe()
        journal_urls, b.journal_stall_files, b.journal_latency = journal_buckets(tmp, journal, journal_latency)
        for i in range(agents):
            env = {"FLOE_DEBUG_FAULTS": "true"} if debug_faults else {}
            if agents > 1:
                env["FLOE_AGENT_ID"] = str(i + 1)
            agent = start_agent(
                b.metastore_url, b.objects_url, tmp,
                flush_interval_ms=flush_interval_ms, flush_bytes=flush_bytes,
                flush_min_interval_ms=flush_min_interval_ms, workers=workers, virtual_brokers=virtual_brokers,
                journal=",".join(journal_urls), journal_quorum=journal_quorum,
                name="agent" if agents == 1 else f"agent{i + 1}", env=env,
            )
            b._cleanups.append(agent.stop)
            b.agents.append(agent)
            b.admin_urls.extend(agent.admin_urls)
        b.bootstrap = ",".join(a.bootstrap for a in b.agents)
        return b
    except BaseException:
        b.close()
        raise


# -- /metrics --------------------------------------------------------------------------


def scrape(admin_url: str, timeout: float = 5.0) -> dict[str, float]:
    """Prometheus text -> {sample name with labels: value} (``*_created`` dropped)."""
    text = urllib.request.urlopen(f"{admin_url}/metrics", timeout=timeout).read().decode()
    out: dict[str, float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        name, _, value = line.rpartition(" ")
        if name.split("{", 1)[0].endswith("_created"):
            continue
        try:
            out[name] = float(value)
        except ValueError:
            continue
    return out


def scrape_all(admin_urls: list[str]) -> dict[str, float]:
    total: dict[str, float] = {}
    for url in admin_urls:
        for k, v in scrape(url).items():
            total[k] = total.get(k, 0.0) + v
    return total


def diff(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    return {k: v - before.get(k, 0.0) for k, v in sorted(after.items()) if v != before.get(k, 0.0)}
