"""Agent CPU per Produce request: the cost librdkafka's defaults pay (issue 13).

    python -m loadtest.reqcost [--requests 60000] [--connections 2] [--window 500]

Where it sits: a focused companion of ``python -m loadtest run``. It starts
``floe agent`` (dev: SQLite + ``file://``) as its own process, creates one
16-partition topic, and drives it from a separate process with raw, pipelined
Produce v9 requests of one 1 KiB record each (what librdkafka sends with
``linger.ms`` 5 at these rates), ``--window`` requests in flight per
connection, as fast as the agent answers. It reports requests/s and the
agent's CPU microseconds per request (user + system from /proc over the run),
which depends far less on what else the box runs than a latency does.
``--fetch`` adds a consumer connection that long-polls the same partitions.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import socket
import struct
import time
from typing import Any

TOPIC = "reqcost"
PARTITIONS = 16


def _frames(size: int, acks: int) -> list[bytes]:
    """One encoded Produce v9 request per partition, one record each."""
    from kafka_protocol.framing import RequestHeader, encode_request
    from kafka_protocol.messages import ProduceRequest
    from kafka_protocol.records import RecordBatchBuilder

    out = []
    for p in range(PARTITIONS):
        b = RecordBatchBuilder()
        b.append(None, os.urandom(size), timestamp_ms=int(time.time() * 1000))
        Part = ProduceRequest.TopicProduceData.PartitionProduceData
        req = ProduceRequest(
            acks=acks, timeout_ms=30_000,
            topic_data=[ProduceRequest.TopicProduceData(name=TOPIC, partition_data=[Part(index=p, records=b.build())])],
        )
        out.append(encode_request(RequestHeader(0, 9, p, "reqcost"), req))
    return out


def _client(bootstrap: str, n: int, window: int, size: int, acks: int, q: Any) -> None:
    host, port = bootstrap.rsplit(":", 1)
    frames = _frames(size, acks)
    s = socket.create_connection((host, int(port)))
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sent = got = 0
    buf = bytearray()
    t0 = time.perf_counter()
    while got < n:
        if sent < n and sent - got < window:
            k = min(window - (sent - got), n - sent, 64)
            s.sendall(b"".join(frames[(sent + i) % PARTITIONS] for i in range(k)))
            sent += k
            if acks == 0:
                got = sent
            continue
        chunk = s.recv(1 << 20)
        if not chunk:
            raise RuntimeError("agent closed the connection")
        buf += chunk
        pos = 0
        while len(buf) - pos >= 4:
            (ln,) = struct.unpack_from(">i", buf, pos)
            if len(buf) - pos - 4 < ln:
                break
            # response: correlation id, then the body; error code of the one partition
            pos += 4 + ln
            got += 1
        del buf[:pos]
    q.put(time.perf_counter() - t0)
    s.close()


def _cpu(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run(args: argparse.Namespace) -> dict[str, Any]:
    from confluent_kafka.admin import AdminClient, NewTopic

    from loadtest.services import start_backend

    backend = start_backend("dev", flush_min_interval_ms=args.flush_min_interval_ms)
    try:
        admin = AdminClient({"bootstrap.servers": backend.bootstrap})
        admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1)])[TOPIC].result(30)
        ctx = mp.get_context("spawn")
        # warm-up: the topic cache, the first segments
        q: Any = ctx.Queue()
        w = ctx.Process(target=_client, args=(backend.bootstrap, 2000, 100, args.size, args.acks, q))
        w.start()
        q.get(timeout=120)
        w.join()
        pid = backend.server_pid
        assert pid is not None
        per = args.requests // args.connections
        procs = [
            ctx.Process(target=_client, args=(backend.bootstrap, per, args.window, args.size, args.acks, q))
            for _ in range(args.connections)
        ]
        cpu0 = _cpu(pid)
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
        walls = [q.get(timeout=600) for _ in procs]
        if spy is not None:
            spy.wait(60)
        wall = time.perf_counter() - t0
        cpu1 = _cpu(pid)
        for p in procs:
            p.join()
        total = per * args.connections
        out = {
            "requests": total,
            "wall_s": round(wall, 2),
            "client_wall_s": [round(x, 2) for x in walls],
            "requests_per_s": round(total / max(walls), 1),
            "agent_cpu_s": round(cpu1 - cpu0, 2),
            "agent_cpu_us_per_request": round((cpu1 - cpu0) / total * 1e6, 1),
            "load_avg": os.getloadavg(),
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
    p.add_argument("--flush-min-interval-ms", type=int, default=None)
    p.add_argument("--profile", help="py-spy raw profile of the agent to this file")
    p.add_argument("--profile-seconds", type=int, default=10)
    args = p.parse_args(argv)
    print(json.dumps(run(args)))


if __name__ == "__main__":
    main()
