"""Agent CPU per Produce request: the cost librdkafka's defaults pay (issue 13).

    python -m loadtest.reqcost [--requests 60000] [--connections 2] [--window 500]
        [--partitions 16] [--per-request 1] [--backend dev|postgres-s3|kafka]

Where it sits: a focused companion of ``python -m loadtest run``. It starts
``floe agent`` (dev: SQLite + ``file://``) as its own process, creates one
16-partition topic, and drives it from a separate process with raw, pipelined
Produce v9 requests of one 1 KiB record each (what librdkafka sends with
``linger.ms`` 5 at these rates), ``--window`` requests in flight per
connection, as fast as the agent answers. It reports requests/s and the
agent's CPU microseconds per request (user + system from /proc over the run),
which depends far less on what else the box runs than a latency does.

Width (issue 18): ``--partitions N --per-request P`` spreads the requests over
a topic of N partitions, P one-record batches (P distinct partitions) in each
request, round-robin, so 16 and 10,000 partitions can be compared with the
same request shape and a load generator that costs next to nothing (the
requests are encoded once, before the run). ``--backend postgres-s3`` runs the
agent on a private Postgres + moto; ``--backend kafka`` the same driver against
an Apache Kafka 4.1 broker (loadtest/kafka_broker.py), whose CPU is measured
the same way.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import socket
import struct
import time
from math import gcd
from typing import Any

from loadtest.proc import cpu_seconds

TOPIC = "reqcost"
PARTITIONS = 16


def _frames(size: int, acks: int, partitions: int = PARTITIONS, per_request: int = 1) -> list[bytes]:
    """This benchmark's requests: ``per_request`` one-record batches each."""
    return produce_frames(TOPIC, partitions, per_request, 1, size, acks=acks, client_id="reqcost")


def produce_frames(
    topic: str, partitions: int, per_request: int, records: int, size: int, *, acks: int = -1,
    client_id: str = "produce-cpu",
) -> list[bytes]:
    """Encoded Produce v9 requests, each with ``per_request`` batches of ``records``
    random ``size``-byte records for consecutive partitions (mod ``partitions``);
    sent in turn they cover every partition evenly."""
    from kafka_protocol.framing import RequestHeader, encode_request
    from kafka_protocol.messages import ProduceRequest
    from kafka_protocol.records import RecordBatchBuilder

    Part = ProduceRequest.TopicProduceData.PartitionProduceData
    now = int(time.time() * 1000)
    out = []
    for k in range(partitions // gcd(partitions, per_request)):
        parts = []
        for j in range(per_request):
            b = RecordBatchBuilder()
            for _ in range(records):
                b.append(None, os.urandom(size), timestamp_ms=now)
            parts.append(Part(index=(k * per_request + j) % partitions, records=b.build()))
        req = ProduceRequest(
            acks=acks, timeout_ms=30_000,
            topic_data=[ProduceRequest.TopicProduceData(name=topic, partition_data=parts)],
        )
        out.append(encode_request(RequestHeader(0, 9, k, client_id), req))
    return out


def read_responses(s: socket.socket, buf: bytearray) -> tuple[int, int]:
    """Receive once from ``s`` into ``buf`` and take every whole Produce v9 response out
    of it: (responses, partition errors among them)."""
    from kafka_protocol.framing import skip_tagged_fields
    from kafka_protocol.messages import ProduceResponse

    chunk = s.recv(1 << 20)
    if not chunk:
        raise RuntimeError("agent closed the connection")
    buf += chunk
    pos = got = errors = 0
    while len(buf) - pos >= 4:
        (ln,) = struct.unpack_from(">i", buf, pos)
        if len(buf) - pos - 4 < ln:
            break
        # response: correlation id, the header's tagged fields (v9 is flexible), the body
        frame = memoryview(bytes(buf[pos + 4 : pos + 4 + ln]))
        resp = ProduceResponse.decode(frame[skip_tagged_fields(frame, 4) :], 9)
        errors += sum(1 for t in resp.responses for r in t.partition_responses if r.error_code)
        pos += 4 + ln
        got += 1
    del buf[:pos]
    return got, errors


def pipeline(s: socket.socket, frames: list[bytes], n: int, window: int, acks: int = -1) -> int:
    """Send ``n`` Produce v9 ``frames`` round-robin on ``s``, ``window`` in flight, and
    read their responses (none with ``acks`` 0); the number of partition errors seen."""
    sent = got = errors = 0
    nframes = len(frames)
    buf = bytearray()
    while got < n:
        if sent < n and sent - got < window:
            k = min(window - (sent - got), n - sent, 64)
            s.sendall(b"".join(frames[(sent + i) % nframes] for i in range(k)))
            sent += k
            if acks == 0:
                got = sent
            continue
        k, e = read_responses(s, buf)
        got, errors = got + k, errors + e
    return errors


def _client(
    bootstrap: str, n: int, window: int, size: int, acks: int, q: Any,
    partitions: int = PARTITIONS, per_request: int = 1,
) -> None:
    host, port = bootstrap.rsplit(":", 1)
    frames = _frames(size, acks, partitions, per_request)
    s = socket.create_connection((host, int(port)))
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    t0 = time.perf_counter()
    errors = pipeline(s, frames, n, window, acks)
    q.put((time.perf_counter() - t0, errors))
    s.close()


_UPDATES_SQL = "SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables WHERE relname = 'partitions'"


def _pg(backend: Any, sql: str) -> Any:
    """Run ``sql`` on the backend's private Postgres (``--pg-sql``; the
    partition rows' update statistics after a run); the first row's values."""
    import asyncio

    import asyncpg

    from metastore.engine import asyncpg_dsn

    async def go() -> Any:
        con = await asyncpg.connect(asyncpg_dsn(backend.metastore_url))
        try:
            await con.execute("SELECT pg_stat_force_next_flush()")
            row = await con.fetchrow(sql)
            return None if row is None else list(row.values())
        finally:
            await con.close()

    return asyncio.run(go())


def run(args: argparse.Namespace) -> dict[str, Any]:
    from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic

    from loadtest.run import _postgres_cpu_seconds
    from loadtest.services import start_backend

    kw = {} if args.backend == "kafka" else {"flush_min_interval_ms": args.flush_min_interval_ms}
    backend = start_backend(args.backend, **kw)
    shape = (args.partitions, args.per_request)
    try:
        if args.pg_sql:
            _pg(backend, args.pg_sql)
        admin = AdminClient({"bootstrap.servers": backend.bootstrap})
        t_create = time.perf_counter()
        # Kafka's controller refuses more than 10,000 records in one operation (a
        # 10,000-partition CreateTopics is one more): create half, then add the rest.
        first = args.partitions if args.backend != "kafka" else min(args.partitions, 5000)
        admin.create_topics([NewTopic(TOPIC, first, 1)])[TOPIC].result(120)
        if first < args.partitions:
            admin.create_partitions([NewPartitions(TOPIC, args.partitions)])[TOPIC].result(120)
        create_s = time.perf_counter() - t_create
        ctx = mp.get_context("spawn")
        # warm-up: the topic cache, the first segments (every partition written once),
        # repeated until every partition takes writes (Kafka makes its leaders after
        # CreateTopics answers: NOT_LEADER_OR_FOLLOWER until then)
        q: Any = ctx.Queue()
        warm = max(2000, args.partitions // args.per_request + 1)
        deadline = time.monotonic() + 600
        while True:
            w = ctx.Process(target=_client, args=(backend.bootstrap, warm, 100, args.size, args.acks, q, *shape))
            w.start()
            _, warm_errors = q.get(timeout=600)
            w.join()
            if not warm_errors:
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"warm-up: {warm_errors} partition errors after 600 s")
        pid = backend.server_pid
        assert pid is not None
        per = args.requests // args.connections
        procs = [
            ctx.Process(target=_client, args=(backend.bootstrap, per, args.window, args.size, args.acks, q, *shape))
            for _ in range(args.connections)
        ]
        cpu0, pg0 = cpu_seconds(pid), _postgres_cpu_seconds(backend)
        t0 = time.perf_counter()
        for p in procs:
            p.start()
        spy = None
        if args.profile:
            import subprocess
            import sys
            from pathlib import Path

            spy = subprocess.Popen(
                [str(Path(sys.executable).parent / "py-spy"), "record", "-p", str(pid), "-d",
                 str(args.profile_seconds), "-f", "raw", "-o", args.profile, "--nonblocking"],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            )
        done = [q.get(timeout=600) for _ in procs]
        walls = [d[0] for d in done]
        if spy is not None:
            spy.wait(60)
        wall = time.perf_counter() - t0
        cpu1, pg1 = cpu_seconds(pid), _postgres_cpu_seconds(backend)
        for p in procs:
            p.join()
        total = per * args.connections
        out = {
            "backend": args.backend,
            "partitions": args.partitions,
            "per_request": args.per_request,
            "create_topic_s": round(create_s, 2),
            "requests": total,
            "wall_s": round(wall, 2),
            "client_wall_s": [round(x, 2) for x in walls],
            "partition_errors": sum(d[1] for d in done),
            "requests_per_s": round(total / max(walls), 1),
            "records_per_s": round(total * args.per_request / max(walls), 1),
            "agent_cpu_s": round(cpu1 - cpu0, 2),
            "agent_cpu_us_per_request": round((cpu1 - cpu0) / total * 1e6, 1),
            "agent_cpu_s_per_gb": round((cpu1 - cpu0) / (total * args.per_request * args.size / 1e9), 1),
            "postgres_cpu_s": None if pg0 is None or pg1 is None else round(pg1 - pg0, 2),
            "load_avg": os.getloadavg(),
            "partition_row_updates": _pg(backend, _UPDATES_SQL) if backend.kind == "postgres-s3" else None,
        }
        return out
    finally:
        backend.close()


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m loadtest.reqcost", description=__doc__.split("\n\n")[0])
    p.add_argument("--requests", type=int, default=60_000)
    p.add_argument("--connections", type=int, default=2)
    p.add_argument("--window", type=int, default=500, help="requests in flight per connection")
    p.add_argument("--size", type=int, default=1024, help="record value bytes")
    p.add_argument("--acks", type=int, default=-1)
    p.add_argument("--partitions", type=int, default=PARTITIONS, help="partitions of the topic")
    p.add_argument("--per-request", type=int, default=1, help="one-record batches (partitions) per request")
    p.add_argument("--backend", choices=("dev", "postgres-s3", "kafka"), default="dev")
    p.add_argument("--pg-sql", help="postgres-s3: a statement run on the metastore before the topic is created")
    p.add_argument("--flush-min-interval-ms", type=int, default=None)
    p.add_argument("--profile", help="py-spy raw profile of the agent to this file")
    p.add_argument("--profile-seconds", type=int, default=10)
    args = p.parse_args(argv)
    print(json.dumps(run(args)))


if __name__ == "__main__":
    main()
