"""``python -m loadtest.width``: the control plane at width (issue 18).

For one topic of each size (default 16, 1,000 and 10,000 partitions), against
an agent process on ``dev`` (SQLite + file store) or ``postgres-s3`` (private
Postgres + moto), optionally beside a real Apache Kafka 4.1 broker
(``--kafka``, loadtest/kafka_broker.py), over plain sockets with Floe's own
codec:

- CreateTopics: wall time of the request (the answer comes after the commit);
- Metadata (v12) for that topic: the first request after creation (cache
  miss: every leader computed and encoded), the median of the next ones (wall
  time, including this client's decode of every partition) and the server
  CPU per request;
- ListOffsets (v7) latest for every partition: one request;
- idle Fetch (v12, ``max_wait_ms`` 0, nothing to read): agent CPU per request,
  as ``utime + stime`` of the agent process over ``--fetches`` requests
  (/proc, 10 ms ticks, so many requests), with a fetch session (KIP-227: one
  full fetch naming every partition, then empty incremental ones, as a
  consumer of an idle topic sends them) and without one (every request names
  every partition).

Results print as a table and go to ``--out`` as JSON. Numbers go in
loadtest/HISTORY.md with the load average ``box-bench`` prints (and the current
figures in loadtest/RESULTS.md).
"""

from __future__ import annotations

import argparse
import json
import socket
import statistics
import struct
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from kafka_protocol.framing import RequestHeader, encode_request
from kafka_protocol.messages import (
    RESPONSES,
    CreateTopicsRequest,
    FetchRequest,
    ListOffsetsRequest,
    MetadataRequest,
)
from kafka_protocol.messages._runtime import skip_tagged_fields
from loadtest.proc import cpu_seconds as proc_cpu_seconds

FT = FetchRequest.FetchTopic
FP = FetchRequest.FetchTopic.FetchPartition
ZERO = uuid.UUID(int=0)


class Wire:
    """One connection, one request at a time."""

    def __init__(self, bootstrap: str) -> None:
        host, port = bootstrap.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=120)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.correlation = 0

    def _read(self, n: int) -> bytes:
        buf = bytearray()
        while len(buf) < n:
            chunk = self.sock.recv(min(n - len(buf), 1 << 20))
            if not chunk:
                raise ConnectionError("closed")
            buf += chunk
        return bytes(buf)

    def call(self, req: Any, version: int) -> Any:
        self.correlation += 1
        self.sock.sendall(encode_request(RequestHeader(req.API_KEY, version, self.correlation, "width-bench"), req))
        (size,) = struct.unpack(">i", self._read(4))
        frame = memoryview(self._read(size))
        cls: Any = RESPONSES[req.API_KEY]
        pos = skip_tagged_fields(frame, 4) if cls.header_version(version) >= 1 else 4
        return cls.decode(frame[pos:], version)

    def close(self) -> None:
        self.sock.close()


def cpu_seconds(pid: int | None) -> float:
    return float("nan") if pid is None else proc_cpu_seconds(pid)


def measure(
    bootstrap: str, pid: int | None, partitions: int, *, fetches: int, nosession_fetches: int, metadata_reps: int
) -> dict[str, Any]:
    name = f"width-{partitions}-{uuid.uuid4().hex[:6]}"
    w = Wire(bootstrap)
    out: dict[str, Any] = {"partitions": partitions}
    try:
        CT = CreateTopicsRequest.CreatableTopic
        t0 = time.perf_counter()
        r = w.call(CreateTopicsRequest(topics=[CT(name=name, num_partitions=partitions, replication_factor=1)], timeout_ms=60_000), 5)
        out["create_s"] = time.perf_counter() - t0
        assert r.topics[0].error_code == 0, r.topics[0]

        md_req = MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=name)], allow_auto_topic_creation=False)
        times = []
        topic_id = ZERO
        deadline = time.monotonic() + 60
        while True:  # the first answer naming every partition (a real broker propagates)
            t0 = time.perf_counter()
            md = w.call(md_req, 12)
            first = time.perf_counter() - t0
            if md.topics[0].error_code == 0 and len(md.topics[0].partitions) == partitions:
                topic_id = md.topics[0].topic_id
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"{name} not in Metadata after 60 s")
        out["metadata_first_ms"] = first * 1000
        c0 = cpu_seconds(pid)
        for _ in range(metadata_reps):
            t0 = time.perf_counter()
            w.call(md_req, 12)
            times.append(time.perf_counter() - t0)
        out["metadata_cpu_ms"] = (cpu_seconds(pid) - c0) / metadata_reps * 1000
        out["metadata_p50_ms"] = statistics.median(times) * 1000  # wall, with the client's decode

        LT = ListOffsetsRequest.ListOffsetsTopic
        lo = ListOffsetsRequest(replica_id=-1, topics=[LT(name=name, partitions=[LT.ListOffsetsPartition(partition_index=p, timestamp=-1) for p in range(partitions)])])
        t0 = time.perf_counter()
        w.call(lo, 7)
        out["list_offsets_ms"] = (time.perf_counter() - t0) * 1000

        full = [FT(topic=name, topic_id=topic_id, partitions=[FP(partition=p, fetch_offset=0, partition_max_bytes=1 << 20, current_leader_epoch=-1) for p in range(partitions)])]

        def fetch(topics: list[Any], session_id: int, epoch: int) -> Any:
            return w.call(FetchRequest(replica_id=-1, max_wait_ms=0, min_bytes=1, max_bytes=50 << 20, isolation_level=0,
                                       session_id=session_id, session_epoch=epoch, topics=topics, forgotten_topics_data=[]), 12)

        # Without a session: every request names every partition.
        n = fetches if partitions <= 100 else nosession_fetches
        c0, t0 = cpu_seconds(pid), time.perf_counter()
        for _ in range(n):
            fetch(full, 0, -1)
        out["fetch_nosession_cpu_ms"] = (cpu_seconds(pid) - c0) / n * 1000
        out["fetch_nosession_wall_ms"] = (time.perf_counter() - t0) / n * 1000
        # With a session: one full fetch, then empty incremental ones.
        first = fetch(full, 0, 0)
        assert first.error_code == 0 and first.session_id != 0, (first.error_code, first.session_id)
        sid = first.session_id
        c0, t0 = cpu_seconds(pid), time.perf_counter()
        for i in range(fetches):
            r = fetch([], sid, i + 1)
            assert r.error_code == 0, r.error_code
        out["fetch_session_cpu_ms"] = (cpu_seconds(pid) - c0) / fetches * 1000
        out["fetch_session_wall_ms"] = (time.perf_counter() - t0) / fetches * 1000
    finally:
        w.close()
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m loadtest.width", description=__doc__.split("\n\n")[0])
    ap.add_argument("--backend", default="dev", help="dev | postgres-s3 | kafka (a real Kafka 4.1 broker)")
    ap.add_argument("--partitions", type=int, nargs="+", default=[16, 1000, 10_000])
    ap.add_argument("--fetches", type=int, default=1000, help="idle fetches per measurement")
    ap.add_argument("--nosession-fetches", type=int, default=20, help="fetches without a session above 100 partitions")
    ap.add_argument("--metadata-reps", type=int, default=50)
    ap.add_argument("--out", help="write the results as JSON here")
    args = ap.parse_args(argv)

    from loadtest.services import start_backend

    cleanup: list[Any] = []
    if args.backend == "kafka":
        from loadtest.kafka_broker import KafkaBroker

        kb = KafkaBroker.start()
        cleanup.append(kb.stop)
        bootstrap, pid = kb.bootstrap, kb.pid
    else:
        b = start_backend(args.backend)
        cleanup.append(b.close)
        bootstrap, pid = b.bootstrap, b.agents[0].pid
    rows = []
    try:
        for n in args.partitions:
            row = measure(bootstrap, pid, n, fetches=args.fetches, nosession_fetches=args.nosession_fetches,
                          metadata_reps=args.metadata_reps)
            row["backend"] = args.backend
            rows.append(row)
            print(json.dumps(row), flush=True)
    finally:
        for c in reversed(cleanup):
            c()
    print(f"\n{'backend':<12}{'parts':>7}{'create s':>10}{'md first ms':>12}{'md p50 ms':>10}{'md cpu ms':>10}"
          f"{'LO ms':>9}{'fetch no-sess cpu ms':>21}{'fetch sess cpu ms':>18}")
    for r in rows:
        print(f"{r['backend']:<12}{r['partitions']:>7}{r['create_s']:>10.3f}{r['metadata_first_ms']:>12.1f}"
              f"{r['metadata_p50_ms']:>10.2f}{r['metadata_cpu_ms']:>10.2f}{r['list_offsets_ms']:>9.1f}"
              f"{r['fetch_nosession_cpu_ms']:>21.3f}{r['fetch_session_cpu_ms']:>18.3f}")
    if args.out:
        Path(args.out).write_text(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
