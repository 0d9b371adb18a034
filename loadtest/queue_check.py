"""Jepsen-style queue checker: idempotent producers under faults, then read everything back.

``python -m loadtest.queue_check [--agents 2] [--nemesis kill|s3-stall|journal-stall|slow-agent|overload|none]
[--duration 60] [--out DIR] ...`` prints one JSON summary (the details go to ``--out``).

Where it sits: on top of the whole system, from the outside (issues 40 and 43). It
starts a deployment with :mod:`loadtest.services` (a private Postgres, moto's S3
server, N ``floe agent`` processes; or one ``floe dev``), runs P idempotent
confluent-kafka producers (acks=all) writing unique values ``<session>:<seq>`` to
a topic of K partitions at a fixed rate while the nemeses hurt the deployment on
a schedule, heals it, waits a recovery period, then reads every partition from the
beginning (read_committed) and checks the history (:func:`check`):

* **lost**: acknowledged (delivery callback without error) but never read;
* **duplicated**: read more than once; **unexpected**: read but never sent;
* **reordered**: within one producer session and partition, a value read after a
  value sent later than it (the idempotent producer promises send order).

Nemeses: ``kill`` (SIGKILL one agent, restart it after a pause), ``s3-stall``
(SIGSTOP the objects' moto 8-14 s, a stall starting every 15 s), ``journal-stall``
(SIGSTOP journal moto 0 for 30 s, once), ``slow-agent`` (SIGSTOP an agent 2 s every
10 s), ``overload`` (``--flood-producers`` producers at full speed into another
topic for 10 s of every 20), ``none``. ``--journal-moto K`` starts K more moto servers, bucket ``journalK`` on
server K; ``{journal}`` (all URLs, comma-separated) and ``{journalK}`` in an
``--agent-arg=...`` are replaced by their ``s3://`` URLs, and without any
``--journal`` agent argument the agents get ``--journal {journal}``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from loadtest.services import Agent, scrape, start_agent, start_moto

EPOCH_METRIC = "floe_producer_epoch_bumps_total"
ABORTED_METRIC = "floe_produce_aborted_total"  # reason: stalled_upload, client_gone (withdrawn)
TOPIC = "queue-check"
FLOOD_TOPIC = "queue-check-flood"  # the overload nemesis writes here; never checked
REGION = "us-east-1"


# -- the history and its check (pure) ---------------------------------------------------


@dataclass
class History:
    """What the clients saw: value -> status (unknown | acked | failed) and where it went."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    status: dict[str, str] = field(default_factory=dict)
    partition: dict[str, int] = field(default_factory=dict)
    errors: Counter[str] = field(default_factory=Counter)

    def sent(self, value: str, partition: int) -> None:
        with self.lock:
            self.status[value] = "unknown"
            self.partition[value] = partition

    def delivered(self, value: str, error: str | None) -> None:
        with self.lock:
            self.status[value] = "failed" if error else "acked"
            if error:
                self.errors[error] += 1


def _seq(value: str) -> tuple[str, int]:
    session, _, seq = value.rpartition(":")
    return session, int(seq)


def check(status: dict[str, str], reads: list[tuple[int, int, str]]) -> dict[str, Any]:
    """``status``: value -> acked|failed|unknown; ``reads``: (partition, offset, value) as read."""
    count = Counter(v for _, _, v in reads)
    by_status = Counter(status.values())
    lost = sorted(v for v, s in status.items() if s == "acked" and v not in count)
    dups = {v: c for v, c in count.items() if c > 1}
    # where each copy was read: two offsets = stored twice; one offset = read twice
    dup_at: dict[str, list[tuple[int, int]]] = {}
    for part, offset, v in reads:
        if v in dups:
            dup_at.setdefault(v, []).append((part, offset))
    unexpected = sorted(v for v in count if v not in status)
    reordered: list[dict[str, Any]] = []
    seen: set[str] = set()
    high: dict[tuple[str, int], tuple[int, int]] = {}  # (session, partition) -> (max seq, offset)
    for part, offset, v in sorted(reads):
        if v in seen or v not in status:
            continue  # duplicates and strangers are counted on their own
        seen.add(v)
        session, seq = _seq(v)
        top = high.get((session, part))
        if top is not None and seq < top[0]:
            reordered.append({"value": v, "partition": part, "offset": offset,
                              "after_seq": top[0], "after_offset": top[1]})
        else:
            high[(session, part)] = (seq, offset)
    return {
        "acked": by_status["acked"], "failed": by_status["failed"], "unknown": by_status["unknown"],
        "read": len(reads), "lost": len(lost), "duplicated": len(dups),
        "duplicate_reads": sum(c - 1 for c in dups.values()),
        "duplicates_stored_twice": sum(1 for at in dup_at.values() if len(set(at)) > 1),
        "duplicated_acked": sum(1 for v in dups if status.get(v) == "acked"), "reordered": len(reordered),
        "unexpected": len(unexpected),
        # indeterminate outcomes that did land (fine: the client never heard either way)
        "failed_but_read": sum(1 for v, s in status.items() if s == "failed" and v in count),
        "unknown_but_read": sum(1 for v, s in status.items() if s == "unknown" and v in count),
        "_details": {"lost": lost, "duplicated": dups, "duplicated_at": dup_at, "reordered": reordered,
                     "unexpected": unexpected},
    }


# -- the deployment ---------------------------------------------------------------------


def _stop_proc(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGCONT)
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


class Deployment:
    """N restartable agents (fixed ports) on Postgres + moto, or one ``floe dev``."""

    def __init__(self, args: argparse.Namespace, logs: Path) -> None:
        import boto3

        self.logs, self.backend, self.paused = logs, args.backend, set[int]()
        self.tmp = Path(tempfile.mkdtemp(prefix="floe-queue-check-"))
        self.pg: Any = None
        self.moto: subprocess.Popen[bytes] | None = None
        self.journal_motos: list[subprocess.Popen[bytes]] = []
        self.agents: list[Agent] = []
        self.starts: list[int] = []
        os.environ.setdefault("AWS_ACCESS_KEY_ID", "queue-check")
        os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "queue-check")
        try:
            journal_urls = []
            for k in range(args.journal_moto):
                proc, endpoint = start_moto()
                self.journal_motos.append(proc)
                boto3.client("s3", endpoint_url=endpoint, region_name=REGION).create_bucket(Bucket=f"journal{k}")
                journal_urls.append(f"s3://journal{k}/j?endpoint={endpoint}&region={REGION}")
            self.journal_urls = journal_urls
            subst = {"journal": ",".join(journal_urls), **{f"journal{k}": u for k, u in enumerate(journal_urls)}}
            self.agent_args = [a.format(**subst) for a in args.agent_arg]
            if journal_urls and not any(a.startswith("--journal") for a in self.agent_args):
                self.agent_args += ["--journal", subst["journal"]]
            if args.backend == "dev":
                self.metastore, self.objects = f"sqlite:///{self.tmp / 'meta.db'}", f"file://{self.tmp / 'objects'}"
                self.agent_args += ["--data-dir", str(self.tmp)]
                n = 1
            else:
                from metastore.pgserver import PostgresServer

                self.pg = PostgresServer().start()
                self.moto, endpoint = start_moto()
                boto3.client("s3", endpoint_url=endpoint, region_name=REGION).create_bucket(Bucket="queue-check")
                self.metastore = self.pg.url()
                self.objects = f"s3://queue-check/floe?endpoint={endpoint}&region={REGION}"
                n = args.agents
            for i in range(n):  # one after the other: the first one migrates the metastore
                self.starts.append(0)
                self.agents.append(self._start(i))
        except BaseException:
            self.close()
            raise

    def _start(self, i: int, old: Agent | None = None) -> Agent:
        self.starts[i] += 1
        return start_agent(
            self.metastore, self.objects, self.logs, name=f"agent{i}-{self.starts[i]}",
            command="dev" if self.backend == "dev" else "agent", extra_args=self.agent_args,
            kafka_port=old.kafka_port if old else None, admin_port=old.admin_port if old else None,
        )

    @property
    def bootstrap(self) -> str:
        return ",".join(a.bootstrap for a in self.agents)

    def kill(self, i: int) -> None:
        a = self.agents[i]
        a.proc.kill()
        a.proc.wait(30)
        self.paused.discard(a.pid)

    def restart(self, i: int) -> None:
        old = self.agents[i]
        if old.proc.poll() is None:
            return
        self.agents[i] = self._start(i, old)

    def pause(self, pid: int) -> None:
        os.kill(pid, signal.SIGSTOP)
        self.paused.add(pid)

    def resume(self, pid: int) -> None:
        self.paused.discard(pid)
        with contextlib.suppress(ProcessLookupError):  # killed while stopped
            os.kill(pid, signal.SIGCONT)

    def heal(self) -> None:
        for pid in list(self.paused):
            self.resume(pid)
        for i in range(len(self.agents)):
            self.restart(i)

    def close(self) -> None:
        for pid in list(self.paused):
            self.resume(pid)
        for a in self.agents:
            a.stop()
        for p in [*self.journal_motos, *([self.moto] if self.moto else [])]:
            _stop_proc(p)
        if self.pg is not None:
            self.pg.stop()
        shutil.rmtree(self.tmp, ignore_errors=True)


# -- clients --------------------------------------------------------------------------


class ProducerLoop(threading.Thread):
    """One idempotent producer at a fixed rate; after a fatal error, a new session."""

    def __init__(self, idx: int, args: argparse.Namespace, bootstrap: str, history: History,
                 stop: threading.Event, log: Any) -> None:
        super().__init__(daemon=True, name=f"producer-{idx}")
        self.idx, self.args, self.bootstrap, self.history, self.stop, self.log = idx, args, bootstrap, history, stop, log
        self.gen, self.fatal, self.sessions = 0, "", 0
        self.pad = b"x" * args.value_bytes

    def _new(self) -> Any:
        from confluent_kafka import Producer

        self.gen += 1
        self.session, self.fatal = f"p{self.idx}.{self.gen}", ""
        return Producer({
            "bootstrap.servers": self.bootstrap, "client.id": f"qc-{self.session}",
            "enable.idempotence": True, "acks": "all", "linger.ms": self.args.linger_ms,
            "message.timeout.ms": self.args.message_timeout_ms, "error_cb": self._on_error,
        })

    def _on_error(self, err: Any) -> None:
        if err.fatal():
            self.fatal = err.str()

    def _on_delivery(self, err: Any, msg: Any) -> None:
        self.history.delivered(msg.key().decode(), err.name() if err else None)

    def run(self) -> None:
        from confluent_kafka import KafkaException

        p, seq = self._new(), 0
        interval = self.args.producers / self.args.rate
        next_t = time.monotonic()
        while not self.stop.is_set():
            if self.fatal:
                self.log("producer", "fatal", self.session, self.fatal)
                p.flush(5)  # whatever stays unresolved is 'unknown'
                p, seq = self._new(), 0
            wait = next_t - time.monotonic()
            if wait > 0:
                p.poll(min(wait, 0.1))
                continue
            value = f"{self.session}:{seq}"
            part = (seq + self.idx) % self.args.partitions
            try:
                p.produce(TOPIC, self.pad, key=value.encode(), partition=part, on_delivery=self._on_delivery)
            except BufferError:
                p.poll(0.05)
                continue
            except KafkaException as e:
                self.fatal = self.fatal or str(e)
                continue
            self.history.sent(value, part)
            seq += 1
            next_t = max(next_t + interval, time.monotonic() - 1.0)  # no long bursts after a stall
            p.poll(0)
        p.flush(self.args.message_timeout_ms / 1000 + 10)
        self.sessions = self.gen


def read_all(bootstrap: str, partitions: int, timeout: float) -> tuple[list[tuple[int, int, str]], bool]:
    """Every record of the topic from the beginning to the high watermark (read_committed)."""
    from confluent_kafka import (
        OFFSET_BEGINNING,
        Consumer,
        KafkaError,
        KafkaException,
        TopicPartition,
    )

    c = Consumer({
        "bootstrap.servers": bootstrap, "group.id": f"queue-check-{os.getpid()}",
        "enable.auto.commit": False, "isolation.level": "read_committed",
        "enable.partition.eof": True, "auto.offset.reset": "earliest",
    })
    deadline = time.monotonic() + timeout
    highs: dict[int, int] = {}
    while len(highs) < partitions and time.monotonic() < deadline:
        for p in range(partitions):
            try:
                highs.setdefault(p, c.get_watermark_offsets(TopicPartition(TOPIC, p), timeout=5)[1])
            except KafkaException:
                pass
    c.assign([TopicPartition(TOPIC, p, OFFSET_BEGINNING) for p in range(partitions)])
    done = {p for p, h in highs.items() if h <= 0}
    reads: list[tuple[int, int, str]] = []
    while len(done) < partitions and time.monotonic() < deadline:
        for m in c.consume(1000, 1.0):
            p, off, err = m.partition() or 0, m.offset() or 0, m.error()
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF and off >= highs.get(p, 0):
                    done.add(p)
                continue
            reads.append((p, off, (m.key() or b"").decode()))
            if off + 1 >= highs.get(p, 0):
                done.add(p)
    c.close()
    return reads, len(done) == partitions and len(highs) == partitions


# -- nemeses --------------------------------------------------------------------------


class Nemeses:
    """Each nemesis a thread on its own schedule; every action is logged with its time."""

    def __init__(self, dep: Deployment, args: argparse.Namespace, t0: float) -> None:
        self.dep, self.args, self.t0 = dep, args, t0
        self.rng = random.Random(args.seed)
        self.stop = threading.Event()
        self.lock = threading.Lock()  # one action on the deployment at a time
        self.events: list[dict[str, Any]] = []
        self.threads = [threading.Thread(target=getattr(self, "_" + n.replace("-", "_")), daemon=True)
                        for n in args.nemesis if n != "none"]

    def log(self, nemesis: str, action: str, target: str, detail: str = "") -> None:
        ev = {"t": round(time.monotonic() - self.t0, 3), "time": time.strftime("%H:%M:%S"),
              "nemesis": nemesis, "action": action, "target": target}
        if detail:
            ev["detail"] = detail
        self.events.append(ev)
        print(json.dumps(ev), file=sys.stderr, flush=True)

    def _pause(self, nemesis: str, pid: int, target: str, seconds: float) -> None:
        with self.lock:
            self.log(nemesis, "sigstop", target, f"{seconds:.1f}s")
            self.dep.pause(pid)
        try:
            self.stop.wait(seconds)
        finally:
            with self.lock:
                self.dep.resume(pid)
                self.log(nemesis, "sigcont", target)

    def _kill(self) -> None:
        i = 0
        while not self.stop.wait(self.args.kill_every):
            k = i % len(self.dep.agents)
            with self.lock:
                self.log("kill", "sigkill", f"agent{k}")
                self.dep.kill(k)
            self.stop.wait(self.args.kill_pause)
            with self.lock:
                self.dep.restart(k)
                self.log("kill", "restarted", f"agent{k}")
            i += 1

    def _s3_stall(self) -> None:
        assert self.dep.moto is not None
        gap = 5.0
        while not self.stop.wait(gap):
            stall = self.rng.uniform(8, 14)
            self._pause("s3-stall", self.dep.moto.pid, "moto-objects", stall)
            gap = max(1.0, self.args.stall_every - stall)

    def _journal_stall(self) -> None:
        if not self.stop.wait(self.args.journal_stall_at):
            self._pause("journal-stall", self.dep.journal_motos[0].pid, "moto-journal0", self.args.journal_stall_s)

    def _overload(self) -> None:
        """Non-idempotent producers at full speed into another topic, 10 s of every 20:
        the agents' memory budget and fast failure (NOT_ENOUGH_REPLICAS) meet the
        checked producers' traffic."""
        from confluent_kafka import Producer

        pad = b"o" * 1024
        while not self.stop.wait(5):
            self.log("overload", "start", "all", f"{self.args.flood_producers} producers")
            until = time.monotonic() + 10
            flood = [Producer({"bootstrap.servers": self.dep.bootstrap, "linger.ms": 20,
                               "queue.buffering.max.kbytes": 262144, "message.timeout.ms": 30_000,
                               "client.id": f"qc-flood{i}"}) for i in range(self.args.flood_producers)]
            while time.monotonic() < until and not self.stop.is_set():
                for f in flood:
                    for _ in range(500):
                        try:
                            f.produce(FLOOD_TOPIC, pad)
                        except BufferError:
                            break
                    f.poll(0)
            for f in flood:
                f.flush(0)  # what is still queued is abandoned: this topic is not checked
            self.log("overload", "stop", "all")
            self.stop.wait(5)

    def _slow_agent(self) -> None:
        i = 0
        while not self.stop.wait(10):
            k, i = i % len(self.dep.agents), i + 1
            if self.dep.agents[k].proc.poll() is None:  # not while the kill nemesis has it down
                self._pause("slow-agent", self.dep.agents[k].pid, f"agent{k}", 2)


class EpochSampler(threading.Thread):
    """Keeps the last /metrics value of the epoch-bump counter of every agent start, and of
    the produce requests aborted (stalled upload) or withdrawn (client gone) per reason."""

    def __init__(self, dep: Deployment) -> None:
        super().__init__(daemon=True)
        self.dep, self.stop, self.last, self.seen = dep, threading.Event(), dict[tuple[int, int], float](), False
        self.aborted: dict[tuple[int, int], dict[str, float]] = {}

    def sample(self) -> None:
        for i, a in enumerate(list(self.dep.agents)):
            if a.proc.poll() is not None or a.pid in self.dep.paused:
                continue
            try:
                m = scrape(a.admin_url, timeout=2)
            except OSError:
                continue
            vals = [v for k, v in m.items() if k.split("{", 1)[0] == EPOCH_METRIC]
            if vals:
                self.seen = True
                self.last[(i, self.dep.starts[i])] = sum(vals)
            self.aborted[(i, self.dep.starts[i])] = {
                k.split('reason="', 1)[1].split('"', 1)[0]: v
                for k, v in m.items()
                if k.startswith(ABORTED_METRIC + "{") and 'reason="' in k
            }

    def run(self) -> None:
        while not self.stop.wait(1.0):
            self.sample()

    def total(self) -> float | None:
        return sum(self.last.values()) if self.seen else None

    def aborted_total(self) -> dict[str, float]:
        """Requests per reason over every agent start (each start's last sample)."""
        out: dict[str, float] = {}
        for by in self.aborted.values():
            for reason, v in by.items():
                out[reason] = out.get(reason, 0.0) + v
        return out


# -- the run --------------------------------------------------------------------------


def _wait_cluster(dep: Deployment, partitions: int, timeout: float = 60) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    ad = AdminClient({"bootstrap.servers": dep.bootstrap})
    made = ad.create_topics([NewTopic(TOPIC, partitions), NewTopic(FLOOD_TOPIC, partitions)], request_timeout=30)
    for f in made.values():
        f.result(30)
    deadline = time.monotonic() + timeout
    while len(ad.list_topics(timeout=5).brokers) < len(dep.agents):
        if time.monotonic() > deadline:
            raise RuntimeError("the agents did not see each other")
        time.sleep(0.2)  # bounded poll on a real condition (ring membership)


def run(args: argparse.Namespace) -> dict[str, Any]:
    if args.backend == "dev" and "s3-stall" in args.nemesis:
        raise SystemExit("s3-stall needs --backend postgres-s3 (dev has no S3)")
    if "journal-stall" in args.nemesis and args.journal_moto < 1:
        raise SystemExit("journal-stall needs --journal-moto K >= 1")
    out = Path(args.out)
    (out / "logs").mkdir(parents=True, exist_ok=True)
    load_start = os.getloadavg()
    dep = Deployment(args, out / "logs")
    try:
        _wait_cluster(dep, args.partitions)
        t0 = time.monotonic()
        nem = Nemeses(dep, args, t0)
        history, stop = History(), threading.Event()
        producers = [ProducerLoop(i, args, dep.bootstrap, history, stop, nem.log) for i in range(args.producers)]
        sampler = EpochSampler(dep)
        for t in [*producers, sampler, *nem.threads]:
            t.start()
        time.sleep(args.duration)  # the run's length: the schedule, not a synchronisation
        nem.stop.set()
        for t in nem.threads:
            t.join()
        with nem.lock:
            dep.heal()
            nem.log("run", "healed", "all")
        stop.set()
        for t in producers:
            t.join()
        nem.log("run", "producers-done", "all")
        time.sleep(args.recovery)  # the recovery period the check allows (a parameter)
        reads, complete = read_all(dep.bootstrap, args.partitions, args.read_timeout)
        nem.log("run", "read", "all", f"{len(reads)} records, complete={complete}")
        sampler.stop.set()
        sampler.join()
        sampler.sample()
    finally:
        dep.close()
    with history.lock:
        status = dict(history.status)
    result = check(status, reads)
    details = result.pop("_details")
    summary = {
        "backend": args.backend, "agents": len(dep.agents), "nemesis": args.nemesis,
        "duration_s": args.duration, "producers": args.producers, "partitions": args.partitions,
        "rate": args.rate, "message_timeout_ms": args.message_timeout_ms, "agent_args": dep.agent_args,
        **result, "read_complete": complete, "epoch_bumps": sampler.total(),
        "produce_aborted": sampler.aborted_total(),
        "producer_sessions": sum(p.sessions for p in producers), "delivery_errors": dict(history.errors),
        "nemesis_events": nem.events, "agent_starts": dep.starts,
        "load_average": {"start": [round(x, 2) for x in load_start],
                         "end": [round(x, 2) for x in os.getloadavg()]},
        "out": str(out),
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    (out / "details.json").write_text(json.dumps(details, indent=1))
    with open(out / "history.jsonl", "w") as f:
        for v, s in status.items():
            f.write(json.dumps({"value": v, "partition": history.partition[v], "status": s}) + "\n")
    return summary


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m loadtest.queue_check", description=__doc__.split("\n\n")[0])
    ap.add_argument("--backend", choices=["postgres-s3", "dev"], default="postgres-s3")
    ap.add_argument("--agents", type=int, default=2)
    ap.add_argument("--agent-arg", action="append", default=[],
                    help="extra flag for every agent, e.g. --agent-arg=--journal --agent-arg={journal}")
    ap.add_argument("--journal-moto", type=int, default=0, help="extra moto servers for journal buckets")
    ap.add_argument("--nemesis", action="append", choices=["kill", "s3-stall", "journal-stall", "slow-agent", "overload", "none"])
    ap.add_argument("--duration", type=float, default=60)
    ap.add_argument("--recovery", type=float, default=5, help="seconds between the producers' end and the read")
    ap.add_argument("--read-timeout", type=float, default=120)
    ap.add_argument("--producers", type=int, default=4)
    ap.add_argument("--partitions", type=int, default=6)
    ap.add_argument("--rate", type=float, default=400, help="values per second, all producers together")
    ap.add_argument("--value-bytes", type=int, default=100)
    ap.add_argument("--linger-ms", type=int, default=5)
    ap.add_argument("--message-timeout-ms", type=int, default=10_000)
    ap.add_argument("--kill-every", type=float, default=15, help="kill: seconds between a restart and the next kill")
    ap.add_argument("--kill-pause", type=float, default=5, help="kill: seconds an agent stays dead")
    ap.add_argument("--stall-every", type=float, default=15, help="s3-stall: seconds from one stall's start to the next")
    ap.add_argument("--journal-stall-at", type=float, default=5)
    ap.add_argument("--journal-stall-s", type=float, default=30)
    ap.add_argument("--flood-producers", type=int, default=2, help="overload: producers at full speed")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out", default="queue-check-out")
    return ap


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parser().parse_args(argv)
    args.nemesis = args.nemesis or ["none"]
    summary = run(args)
    print(json.dumps({k: v for k, v in summary.items() if k != "nemesis_events"} | {
        "nemesis_events": len(summary["nemesis_events"])}))
    return summary


if __name__ == "__main__":
    main()
