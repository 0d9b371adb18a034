"""Round trip right after topic creation: every acknowledged record is read back (issue 43, item 5).

``python -m loadtest.interop_roundtrip [--rounds 200] [--workers 2] [--partitions 3]
[--records 50] [--timeout 30] [--bootstrap HOST:PORT]``

Starts ``floe dev`` with ``--workers`` workers (SQLite + ``file://`` in a temp dir,
the compactor on, as a user runs it) unless ``--bootstrap`` names a running
cluster. Then, ``--rounds`` times: create a fresh topic with ``--partitions``
partitions (AdminClient CreateTopics), produce ``--records`` records to each
partition with confluent-kafka (acks=all), flush (every delivery report must be
a success), and read the topic back with a fresh consumer assigned to every
partition from OFFSET_BEGINNING until it holds every record or ``--timeout``
seconds pass. A round fails when a record acknowledged is not read (or read
twice, or changed). What each round read per partition goes into the report.

The consumer keeps librdkafka's ``auto.offset.reset`` (latest), as the interop
helpers do: a fetch from offset 0 answered OFFSET_OUT_OF_RANGE then jumps to the
end and reads nothing, which is how issue 43 showed. Its cause was retention:
records stamped before ``retention.ms`` (the interop helpers stamp Nov 2023) are
removed by floe dev's compactor on its next pass (every 10 s), Kafka's semantics
at a shorter check interval. ``--timestamp-ms 1700000000000`` reproduces it
(``--compactor-interval-ms 300`` on the dev makes every round fail);
``--topic-config retention.ms=-1`` keeps such records. ``--debug consumer,fetch``
shows librdkafka's lines of a failed round.

Prints one JSON object: rounds, failures (with per-partition counts, the
consumer's positions), and the time each round took. Exit status 1 if any round
failed.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from loadtest.services import free_port_run, wait_http
from metastore.pgserver import free_port


def start_dev(workdir: Path, workers: int) -> tuple[subprocess.Popen[bytes], str, list[int]]:
    """``floe dev --workers N`` on free ports: (process, bootstrap, admin ports)."""
    kport, aport = free_port(), free_port_run(workers)
    cmd = [
        sys.executable, "-m", "floe_cli.main", "dev", "--data-dir", str(workdir / "data"),
        "--port", str(kport), "--admin-port", str(aport), "--workers", str(workers), "--log-level", "WARNING",
    ]  # fmt: skip
    log = open(workdir / "dev.log", "wb")
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env={**os.environ})
    admin = [aport + i for i in range(workers)]
    if not all(wait_http(f"http://127.0.0.1:{p}/healthz", 60, proc) for p in admin):
        proc.kill()
        raise RuntimeError("floe dev did not start:\n" + (workdir / "dev.log").read_text()[-3000:])
    return proc, f"127.0.0.1:{kport}", admin


class _Lines(logging.Handler):
    """librdkafka's debug lines of one round (reported only when the round fails)."""

    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def one_round(
    bootstrap: str, partitions: int, records: int, timeout: float, debug: str = "", timestamp_ms: int = 0,
    topic_config: dict[str, str] | None = None,
) -> dict[str, Any]:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic

    topic = f"rt-{uuid.uuid4().hex[:10]}"
    t0 = time.monotonic()
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1, config=topic_config or {})], operation_timeout=30)[topic].result(30)
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})
    errors: list[str] = []

    def report(err: Any, _msg: Any) -> None:
        if err is not None:
            errors.append(str(err))

    sent = {(p, f"{p}-{i}") for p in range(partitions) for i in range(records)}
    for p in range(partitions):
        for i in range(records):
            producer.produce(
                topic, value=f"{p}-{i}".encode(), partition=p, on_delivery=report,
                timestamp=timestamp_ms + i if timestamp_ms else 0,
            )  # fmt: skip
    left = producer.flush(30)
    produced_s = time.monotonic() - t0
    if left or errors:
        return {"topic": topic, "ok": False, "produce_errors": errors[:5], "unflushed": left}
    lines = _Lines()
    logger = logging.getLogger(f"rdkafka.{topic}")
    logger.propagate = False
    logger.addHandler(lines)
    logger.setLevel(logging.DEBUG)
    extra: dict[str, Any] = {"debug": debug, "logger": logger} if debug else {}
    consumer = Consumer({
        # auto.offset.reset stays librdkafka's default (latest), as in the issue's
        # interop helper: an offset wrongly found out of range then skips the records.
        "bootstrap.servers": bootstrap, "group.id": f"g-{topic}", "enable.auto.commit": False,
        **extra,
    })  # fmt: skip
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
    got: list[tuple[int, str]] = []
    cerrors: list[str] = []
    positions: dict[int, int] = {}
    deadline = time.monotonic() + timeout
    try:
        while len(got) < len(sent) and time.monotonic() < deadline:
            for m in consumer.consume(500, 0.5):
                if m.error() is None:
                    got.append((m.partition() or 0, (m.value() or b"").decode()))
                elif len(cerrors) < 5:
                    cerrors.append(str(m.error()))
        positions = {tp.partition: tp.offset for tp in consumer.position(
            [TopicPartition(topic, p) for p in range(partitions)])}
    finally:
        consumer.close()
    per = {p: sum(1 for q, _ in got if q == p) for p in range(partitions)}
    ok = len(got) == len(sent) and set(got) == sent
    out: dict[str, Any] = {
        "topic": topic, "ok": ok, "per_partition": per, "produce_s": round(produced_s, 3),
        "total_s": round(time.monotonic() - t0, 3),
    }  # fmt: skip
    if not ok:
        out["positions"], out["consumer_errors"] = positions, cerrors
        if debug:
            out["debug"] = lines.lines[-400:]
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=200)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--partitions", type=int, default=3)
    ap.add_argument("--records", type=int, default=50)
    ap.add_argument("--timeout", type=float, default=30.0)
    ap.add_argument(
        "--timestamp-ms", type=int, default=0,
        help="CreateTime of the records (default: the producer's clock); e.g. 1700000000000, the interop"
        " helpers' 2023 stamp, older than the default retention.ms",
    )
    ap.add_argument("--topic-config", default="", help="topic configs k=v,k=v (e.g. retention.ms=-1)")
    ap.add_argument("--bootstrap", help="a running cluster (nothing started)")
    ap.add_argument("--debug", default="", help="librdkafka debug contexts of the consumer, shown for failed rounds")
    ap.add_argument("--keep", action="store_true", help="keep the temp dir (dev.log) afterwards")
    args = ap.parse_args(argv)
    workdir = Path(tempfile.mkdtemp(prefix="floe-roundtrip-"))
    proc = None
    bootstrap = args.bootstrap
    if bootstrap is None:
        proc, bootstrap, _ = start_dev(workdir, args.workers)
    config = dict(kv.split("=", 1) for kv in args.topic_config.split(",") if kv.strip())
    rounds: list[dict[str, Any]] = []
    try:
        for i in range(args.rounds):
            r = one_round(
                bootstrap, args.partitions, args.records, args.timeout, args.debug, args.timestamp_ms, config
            )
            r["round"] = i
            rounds.append(r)
            if not r["ok"]:
                print(json.dumps({"failed": r}, indent=1), file=sys.stderr, flush=True)
                r.pop("debug", None)
    finally:
        if proc is not None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)
    failures = [r for r in rounds if not r["ok"]]
    times = sorted(r.get("total_s", 0.0) for r in rounds)
    print(json.dumps({
        "rounds": len(rounds), "failures": len(failures), "workers": args.workers,
        "partitions": args.partitions, "records": args.records,
        "round_s_p50": times[len(times) // 2] if times else None, "round_s_max": times[-1] if times else None,
        "failed": failures[:20], "workdir": str(workdir) if args.keep else None,
    }, indent=1))  # fmt: skip
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
