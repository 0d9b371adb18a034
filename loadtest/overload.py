"""Overload: offered load past the sustainable rate, memory, recovery, nothing lost (issue 43).

``python -m loadtest.overload [--duration 60] [--workers 2] [--budget-mib N]``

Where it sits: a benchmark over a ``floe dev``-like backend (SQLite + ``file://``
objects, ``--workers`` processes, :func:`loadtest.services.start_agent`), with
idempotent librdkafka producers (acks=all) writing ``"<producer>:<seq>:"`` +
padding while ``--consumers`` groups read the tail. Phases: **probe**
(``--probe`` s at max rate; the acked rate of its second half is the sustainable
rate R, or ``--sustainable R``), **overload** (``--duration`` s at ``--factor``
x R) and **recovery** (``--recover`` s at ``--after`` x R): seconds from the
drop to the first second whose acked rate is >= 90% of what was offered with
nothing shed by the client's queue (kept to ~2 s of R, so a client backlog does
not hide the server's recovery). Then every acknowledged (producer, sequence)
must be read back (``lost``), none twice (``duplicated``). RSS is sampled every
second, summed over the agent's process tree. Prints one JSON summary. Must show:
RSS per worker <= budget + 300 MiB, recovery <= 10 s, lost == 0."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from loadtest.services import Agent, scrape_all, start_agent

MiB = 1 << 20
TOPIC = "overload"


def _descendants(pid: int) -> list[int]:
    out, todo = [pid], [pid]
    while todo:
        p = todo.pop()
        for task in Path(f"/proc/{p}/task").glob("*/children"):
            try:
                kids = [int(k) for k in task.read_text().split()]
            except OSError:
                continue
            out += kids
            todo += kids
    return out


def rss_bytes(pid: int) -> int:
    """Resident set size of one process from /proc (0 when it is gone)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


class Sampler(threading.Thread):
    """RSS summed over the agent's process tree, once a second."""

    def __init__(self, root: int) -> None:
        super().__init__(daemon=True)
        self.root, self.stop, self.samples = root, threading.Event(), list[tuple[float, int]]()
        self.peaks: dict[int, int] = {}  # pid -> its peak RSS (the supervisor, each worker)

    def run(self) -> None:
        while not self.stop.wait(1.0):
            each = {p: rss_bytes(p) for p in _descendants(self.root)}
            for p, v in each.items():
                self.peaks[p] = max(v, self.peaks.get(p, 0))
            self.samples.append((time.monotonic(), sum(each.values())))


class Reader(threading.Thread):
    """A consumer reading the topic's tail as fast as it can (fetch memory in the agent)."""

    def __init__(self, idx: int, bootstrap: str) -> None:
        super().__init__(daemon=True)
        self.idx, self.bootstrap, self.stop, self.read = idx, bootstrap, threading.Event(), 0

    def run(self) -> None:
        from confluent_kafka import Consumer

        c = Consumer({
            "bootstrap.servers": self.bootstrap, "group.id": f"overload-reader-{self.idx}",
            "auto.offset.reset": "earliest", "enable.auto.commit": False,
        })  # fmt: skip
        c.subscribe([TOPIC])
        while not self.stop.is_set():
            self.read += sum(1 for m in c.consume(1000, 0.5) if m.error() is None)
        c.close()


class Load(threading.Thread):
    """One idempotent producer at ``rate`` msg/s (0: as fast as it can); acked per second."""

    def __init__(self, idx: int, bootstrap: str, args: argparse.Namespace, t0: float) -> None:
        super().__init__(daemon=True)
        from confluent_kafka import Producer

        self.idx, self.args, self.t0 = idx, args, t0
        self.rate, self.stop = 0.0, threading.Event()  # rate: msg/s, set by the phases
        self.p = Producer({
            "bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all",
            "linger.ms": 5, "message.timeout.ms": 300_000,
        })  # fmt: skip
        self.pad = b"x" * args.value_bytes
        self.acked: bytearray = bytearray()  # 1 at seq once acknowledged
        self.per_s: dict[int, int] = {}  # second since t0 -> acked
        self.full_s: dict[int, int] = {}  # second since t0 -> produce() refused (client queue full)
        self.errors, self.sent = 0, 0

    def _done(self, err: Any, msg: Any) -> None:
        if err is not None:
            self.errors += 1
            return
        seq = int(msg.value().split(b":", 2)[1])
        if seq >= len(self.acked):
            self.acked.extend(bytes(seq + 1 - len(self.acked) + 65536))
        self.acked[seq], s = 1, int(time.monotonic() - self.t0)
        self.per_s[s] = self.per_s.get(s, 0) + 1

    def _shed(self, wait: float) -> None:
        s = int(time.monotonic() - self.t0)
        self.full_s[s] = self.full_s.get(s, 0) + 1
        self.p.poll(wait)

    def run(self) -> None:
        next_t = time.monotonic()
        parts = self.args.partitions
        while not self.stop.is_set():
            if self.rate > 0:
                wait = next_t - time.monotonic()
                if wait > 0:
                    self.p.poll(min(wait, 0.05))
                    continue
                next_t = max(next_t + 1 / self.rate, time.monotonic() - 0.5)
                if len(self.p) > 2 * self.rate + 1000:  # ~2 s queued: the open-loop offer is shed
                    self._shed(0)
                    continue
            value = f"{self.idx}:{self.sent}:".encode() + self.pad
            try:
                self.p.produce(TOPIC, value, partition=self.sent % parts, on_delivery=self._done)
            except BufferError:
                self._shed(0.01)
                continue
            self.sent += 1
            if self.sent % 64 == 0:
                self.p.poll(0)
        self.p.flush(120)


def _acked_between(loads: list[Load], a: int, b: int) -> int:
    return sum(ld.per_s.get(s, 0) for ld in loads for s in range(a, b))


def read_back(bootstrap: str, loads: list[Load], timeout: float) -> tuple[int, int]:
    """(lost, duplicated): acknowledged values not read, and values read twice."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    parts = loads[0].args.partitions
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"overload-{os.getpid()}", "enable.auto.commit": False})
    highs = {p: c.get_watermark_offsets(TopicPartition(TOPIC, p), timeout=10)[1] for p in range(parts)}
    c.assign([TopicPartition(TOPIC, p, OFFSET_BEGINNING) for p in range(parts)])
    seen, dup = [bytearray(len(ld.acked)) for ld in loads], 0
    done = {p for p, h in highs.items() if h <= 0}
    deadline = time.monotonic() + timeout
    while len(done) < parts and time.monotonic() < deadline:
        for m in c.consume(2000, 1.0):
            if m.error() is not None:
                continue
            idx, seq = (int(x) for x in (m.value() or b"0:0").split(b":", 2)[:2])
            seen[idx].extend(bytes(max(0, seq + 1 - len(seen[idx]))))
            dup += seen[idx][seq]
            seen[idx][seq] = 1
            if (m.offset() or 0) + 1 >= highs[m.partition() or 0]:
                done.add(m.partition() or 0)
    c.close()
    lost = sum(1 for ld, s in zip(loads, seen, strict=True) for i, a in enumerate(ld.acked) if a and (i >= len(s) or not s[i]))
    return lost, dup


def _phase(loads: list[Load], rate: float, seconds: float) -> tuple[int, int]:
    """Offer ``rate`` msg/s in all (0: max) for ``seconds``; (start, end) second marks."""
    for ld in loads:
        ld.rate = rate / len(loads)
    start = int(time.monotonic() - loads[0].t0)
    time.sleep(seconds)  # a benchmark phase's length, not a synchronisation
    return start, int(time.monotonic() - loads[0].t0)


def run(args: argparse.Namespace) -> dict[str, Any]:
    from loadtest.run import _create_topics

    budget_env = [f"FLOE_MEMORY_BUDGET_BYTES={args.budget_mib * MiB}"] if args.budget_mib else []
    for k, _, v in (kv.partition("=") for kv in [*budget_env, *args.agent_env]):
        os.environ[k] = v  # the agent's environment, e.g. FLOE_FETCH_CACHE_BYTES=67108864
    # the derived default: the block cache plus produce and responses (agent.produce.admission)
    budget = args.budget_mib * MiB if args.budget_mib else 512 * MiB
    tmp = Path(tempfile.mkdtemp(prefix="floe-overload-"))
    (tmp / "objects").mkdir()
    agent: Agent = start_agent(
        f"sqlite:///{tmp / 'meta.db'}", f"file://{tmp / 'objects'}", tmp, command="dev", workers=args.workers,
        extra_args=["--data-dir", str(tmp), *(["--no-compactor"] if args.no_compactor else [])],
    )  # fmt: skip
    out: dict[str, Any] = {"workers": args.workers, "budget_bytes_per_worker": budget, "agent_env": args.agent_env,
                           "compactor": not args.no_compactor}
    try:
        _create_topics(agent.bootstrap, [TOPIC], args.partitions)
        t0 = time.monotonic()
        loads = [Load(i, agent.bootstrap, args, t0) for i in range(args.producers)]
        sampler = Sampler(agent.pid)
        sampler.start()
        readers = [Reader(i, agent.bootstrap) for i in range(args.consumers)]
        for th in [*loads, *readers]:
            th.start()
        a, b = _phase(loads, 0, args.probe)
        mid = (a + b) // 2
        rate = args.sustainable or _acked_between(loads, mid, b) / max(1, b - mid)
        o0, o1 = _phase(loads, args.factor * rate, args.duration)
        offered_after = args.after * rate
        r0, r1 = _phase(loads, offered_after, args.recover)
        for th in [*loads, *readers]:
            th.stop.set()  # type: ignore[attr-defined]
        for th in [*loads, *readers]:
            th.join(150)
        sampler.stop.set()
        recovery = None
        for s in range(r0, r1):
            acked = sum(ld.per_s.get(s, 0) for ld in loads)
            shed = sum(ld.full_s.get(s, 0) for ld in loads)
            if acked >= 0.9 * offered_after and shed == 0:
                recovery = s - r0
                break
        metrics = scrape_all(agent.admin_urls)
        lost, dup = read_back(agent.bootstrap, loads, args.read_timeout)
        peak = max((v for t, v in sampler.samples), default=0)
        over = [v for t, v in sampler.samples if o0 <= t - t0 < o1]
        out.update({
            "sustainable_msgs_per_s": round(rate), "offered_msgs_per_s": round(args.factor * rate),
            "overload_acked_msgs_per_s": round(_acked_between(loads, o0, o1) / max(1, o1 - o0)),
            "peak_rss_sum_bytes": peak, "peak_rss_per_worker_mib": round(peak / args.workers / MiB, 1),
            "peak_rss_supervisor_mib": round(sampler.peaks.get(agent.pid, 0) / MiB),
            "peak_rss_workers_mib": sorted(round(v / MiB) for p, v in sampler.peaks.items() if p != agent.pid),
            "consumed": sum(r.read for r in readers),
            "overload_mean_rss_sum_mib": round(sum(over) / max(1, len(over)) / MiB, 1),
            "rss_bound_per_worker_mib": round((budget + 300 * MiB) / MiB),
            "recovery_s": recovery, "acked": sum(sum(ld.acked) for ld in loads),
            "delivery_errors": sum(ld.errors for ld in loads), "lost": lost, "duplicated": dup,
            "rejected": {k: v for k, v in metrics.items() if k.startswith("floe_produce_rejected_total")},
            "produce_timeouts": metrics.get("floe_produce_timeouts_total", 0.0),
            "epoch_bumps": sum(v for k, v in metrics.items() if k.startswith("floe_producer_epoch_bumps_total")),
            "rss_samples_mib": [round(v / MiB) for _, v in sampler.samples],
        })  # fmt: skip
        out["ok"] = bool(
            out["peak_rss_per_worker_mib"] <= out["rss_bound_per_worker_mib"]
            and recovery is not None and recovery <= 10 and lost == 0
        )  # fmt: skip
    finally:
        agent.stop()
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)
    return out


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m loadtest.overload", description=__doc__.split("\n")[0])
    ap.add_argument("--duration", type=float, default=60, help="seconds of overload (default 60)")
    ap.add_argument("--probe", type=float, default=10, help="seconds at max rate to find the sustainable rate")
    ap.add_argument("--recover", type=float, default=20, help="seconds at the lower rate after the overload")
    ap.add_argument("--sustainable", type=float, default=0, help="sustainable msg/s (default: probed)")
    ap.add_argument("--factor", type=float, default=2.0, help="overload = factor x sustainable (default 2)")
    ap.add_argument("--after", type=float, default=0.5, help="recovery rate = after x sustainable (default 0.5)")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--partitions", type=int, default=16)
    ap.add_argument("--producers", type=int, default=2)
    ap.add_argument("--consumers", type=int, default=2, help="tail readers during the run (default 2)")
    ap.add_argument("--value-bytes", type=int, default=1024)
    ap.add_argument("--budget-mib", type=int, default=0, help="memory_budget_bytes per worker (default: derived)")
    ap.add_argument("--read-timeout", type=float, default=300)
    ap.add_argument("--agent-env", action="append", default=[], metavar="KEY=VALUE", help="environment of the agent")
    ap.add_argument("--keep", action="store_true", help="keep the data directory")
    ap.add_argument("--no-compactor", action="store_true", help="floe dev without its compactor (supervisor)")
    return ap


def main(argv: list[str] | None = None) -> dict[str, Any]:
    out = run(parser().parse_args(argv))
    samples = out.pop("rss_samples_mib", [])
    print(json.dumps(out, indent=2))
    print(json.dumps({"rss_samples_mib": samples}))
    return out


if __name__ == "__main__":
    main()
