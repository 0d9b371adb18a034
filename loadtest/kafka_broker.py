"""A real Apache Kafka broker beside Floe: one KRaft node from Maven Central's jars.

Benchmarks (``python -m loadtest run ... --backend kafka``), the differential
conformance suite and the Spark drop-in tests compare Floe with the real thing.
This module fetches ``org.apache.kafka:kafka_2.13`` and its dependencies with
Maven (once; the jars stay in ``~/.m2`` and the resolved class path is cached
under ``.cache/kafka/<version>/`` of the checkout, which git ignores), formats a
fresh log directory with ``kafka.tools.StorageTool`` and starts ``kafka.Kafka``
as a combined broker + controller on loopback ports.

    with KafkaBroker.start() as kafka:
        Producer({"bootstrap.servers": kafka.bootstrap})

``python -m loadtest.kafka_broker fetch`` (``make kafka``) resolves the jars
ahead of time; ``python -m loadtest.kafka_broker run`` starts a broker and
prints its bootstrap address until interrupted.

The broker runs with the settings a single-node test cluster needs (replication
factor 1 for the internal topics, no initial rebalance delay); ``overrides``
adds or replaces ``server.properties`` entries.
"""

from __future__ import annotations

import argparse
import base64
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

from loadtest.maven import MavenUnavailable, cached_classpath, resolve_classpath
from metastore.pgserver import free_port, start_on_free_ports

KAFKA_VERSION = os.environ.get("FLOE_KAFKA_VERSION", "4.1.1")
SCALA = "2.13"
REPO_ROOT = Path(__file__).resolve().parent.parent
CACHE = Path(os.environ.get("FLOE_KAFKA_CACHE", REPO_ROOT / ".cache" / "kafka"))

_POM = """<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>floe.bench</groupId><artifactId>kafka-broker</artifactId><version>1</version>
  <dependencies>
    <dependency><groupId>org.apache.kafka</groupId><artifactId>kafka_{scala}</artifactId><version>{version}</version></dependency>
    <dependency><groupId>org.apache.logging.log4j</groupId><artifactId>log4j-slf4j-impl</artifactId><version>2.24.3</version></dependency>
  </dependencies>
</project>
"""

_LOG4J2 = """<Configuration status="warn">
  <Appenders><Console name="out" target="SYSTEM_OUT">
    <PatternLayout pattern="[%d] %p %m (%c)%n"/></Console></Appenders>
  <Loggers><Root level="{level}"><AppenderRef ref="out"/></Root></Loggers>
</Configuration>
"""


class KafkaUnavailable(RuntimeError):
    """The broker's jars could not be resolved or the JVM is missing."""


def classpath(version: str = KAFKA_VERSION) -> str:
    """The broker's class path, resolved with Maven once and cached."""
    cache = CACHE / version
    cached = cached_classpath(cache)
    if cached is None:
        mvn = shutil.which("mvn")
        if mvn is None:
            raise KafkaUnavailable("mvn is missing; install it with: make deps (or: sudo apt-get install -y maven)")
        what = f"org.apache.kafka:kafka_{SCALA}:{version}"
        try:
            cached = resolve_classpath(mvn, cache, _POM.format(scala=SCALA, version=version), what, 900)
        except MavenUnavailable as e:
            raise KafkaUnavailable(str(e)) from e
    return os.pathsep.join(cached)


def _java() -> str:
    java = shutil.which("java")
    if java is None:
        raise KafkaUnavailable("java is missing; install it with: make deps (or: sudo apt-get install -y openjdk-17-jdk-headless)")
    return java


def _cluster_id() -> str:
    """A random KRaft cluster id. Like Kafka's ``Uuid.randomUuid``, never one that
    starts with ``-``: ``kafka-storage format -t -x...`` reads it as an option
    (one id in 64 did, and failed a CI run)."""
    while True:
        cid = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cid.startswith("-"):
            return cid


@dataclass
class KafkaBroker:
    """A running single-node KRaft broker (``bootstrap`` is ``127.0.0.1:PORT``)."""

    proc: subprocess.Popen[bytes]
    port: int
    controller_port: int
    workdir: Path
    version: str
    owns_workdir: bool = True
    log_path: Path = field(init=False)

    def __post_init__(self) -> None:
        self.log_path = self.workdir / "kafka.log"

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        return self.proc.pid

    @classmethod
    def start(
        cls,
        *,
        version: str = KAFKA_VERSION,
        workdir: Path | None = None,
        overrides: dict[str, str] | None = None,
        heap: str = "1g",
        log_level: str = "warn",
        timeout: float = 90.0,
    ) -> KafkaBroker:
        """A broker on two free ports. free_port() releases a port before Kafka binds
        it, so on a shared box another process may take it first: in a work dir of
        its own the broker then starts again on new ports."""
        if workdir is not None:  # formatted by the first try: no second one
            return cls._start_once(version, workdir, overrides, heap, log_level, timeout)
        return start_on_free_ports(
            lambda: cls._start_once(version, workdir, overrides, heap, log_level, timeout)
        )

    @classmethod
    def _start_once(
        cls,
        version: str,
        workdir: Path | None,
        overrides: dict[str, str] | None,
        heap: str,
        log_level: str,
        timeout: float,
    ) -> KafkaBroker:
        cp = classpath(version)
        java = _java()
        owns = workdir is None
        wd = Path(tempfile.mkdtemp(prefix="floe-kafka-")) if workdir is None else workdir
        wd.mkdir(parents=True, exist_ok=True)
        port, cport = free_port(), free_port()
        props = {
            "process.roles": "broker,controller",
            "node.id": "1",
            "controller.quorum.voters": f"1@127.0.0.1:{cport}",
            "listeners": f"PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{cport}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{port}",
            "controller.listener.names": "CONTROLLER",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "inter.broker.listener.name": "PLAINTEXT",
            "log.dirs": str(wd / "logs"),
            "num.partitions": "1",
            "offsets.topic.replication.factor": "1",
            "offsets.topic.num.partitions": "4",
            "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1",
            "transaction.state.log.num.partitions": "4",
            "share.coordinator.state.topic.replication.factor": "1",
            "share.coordinator.state.topic.min.isr": "1",
            "group.initial.rebalance.delay.ms": "0",
        }
        props.update(overrides or {})
        config = wd / "server.properties"
        config.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
        (wd / "log4j2.xml").write_text(_LOG4J2.format(level=log_level))
        jvm = [java, f"-Xmx{heap}", f"-Xms{heap}", f"-Dlog4j2.configurationFile={wd / 'log4j2.xml'}", "-cp", cp]
        fmt = subprocess.run(
            [*jvm, "kafka.tools.StorageTool", "format", "-t", _cluster_id(), "-c", str(config)],
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        if fmt.returncode != 0:
            raise RuntimeError(f"kafka-storage format failed:\n{fmt.stdout}{fmt.stderr}")
        with open(wd / "kafka.log", "wb") as log:
            proc = subprocess.Popen([*jvm, "kafka.Kafka", str(config)], stdout=log, stderr=subprocess.STDOUT)
        broker = cls(proc, port, cport, wd, version, owns)
        try:
            broker.wait_ready(timeout)
        except BaseException:
            broker.stop()
            raise
        return broker

    def wait_ready(self, timeout: float) -> None:
        """Until the broker answers Metadata with itself as a registered broker."""
        from confluent_kafka.admin import AdminClient

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"kafka exited ({self.proc.returncode}):\n{self.tail()}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                    pass
            except OSError:
                time.sleep(0.2)
                continue
            admin = AdminClient({"bootstrap.servers": self.bootstrap})
            try:
                md = admin.list_topics(timeout=5)
                if md.brokers:
                    return
            except Exception:
                pass
            time.sleep(0.2)
        raise RuntimeError(f"kafka did not become ready in {timeout:.0f} s:\n{self.tail()}")

    def tail(self, n: int = 3000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-n:]
        except OSError:
            return ""

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        if self.owns_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def __enter__(self) -> KafkaBroker:
        return self

    def __exit__(
        self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m loadtest.kafka_broker", description=__doc__.split("\n\n")[0])
    ap.add_argument("command", choices=["fetch", "run"])
    ap.add_argument("--version", default=KAFKA_VERSION)
    args = ap.parse_args(argv)
    try:
        if args.command == "fetch":
            cp = classpath(args.version)
            print(f"kafka_{SCALA} {args.version}: {len(cp.split(os.pathsep))} jars resolved ({CACHE / args.version})")
            return 0
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
        broker = KafkaBroker.start(version=args.version)
    except KafkaUnavailable as e:
        print(e, file=sys.stderr)
        return 2
    print(f"kafka {args.version} on {broker.bootstrap} (logs {broker.log_path}); Ctrl-C stops it", flush=True)
    try:
        signal.sigwait({signal.SIGINT, signal.SIGTERM})
    finally:
        broker.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
