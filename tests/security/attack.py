"""Connection-flood attack on a SASL_SSL agent (issue 42), rerunnable by a reviewer.

    .venv/bin/python -m tests.security.attack [--half-open 20000] [--handshakes 20000]
        [--agent-root /path/to/a/floe/checkout] [--json out.json]

Starts ``floe agent`` (a real process, defaults except the listener, a
throwaway certificate and one PLAIN user) with one SASL_SSL listener, then
from 16 loopback addresses (127.0.1.1..16; all of 127/8 is loopback on Linux):

1. opens ``--half-open`` TCP connections that never send a byte;
2. opens ``--handshakes`` connections that send a real ClientHello and never
   answer the server's reply (a TLS handshake that never finishes);

holding all of them, and measures the agent's RSS (VmRSS, and VmHWM: the peak
since it started) and how long a legitimate SASL_SSL client takes to connect
afresh and get one record acknowledged (it should be under 1 s). Raises
RLIMIT_NOFILE for itself and the agent first (root can raise the hard limit).
``--agent-root`` runs the agent from another checkout (e.g. a copy of the code
before the fix) with the same attack. Not a pytest test: it takes a minute
and 40,000 sockets; the bounded versions are in test_accept_limits.py.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
MiB = 1024 * 1024
SOURCES = [f"127.0.1.{i}" for i in range(1, 17)]
PER_HOLDER = 10_000


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def rss(pid: int) -> tuple[float, float]:
    """(VmRSS, VmHWM) of ``pid`` in MiB."""
    from tests.agent.test_memory_attacks import rss as rss_bytes

    now, peak = rss_bytes(pid)
    return now / MiB, peak / MiB


def metric(admin: int, name: str) -> float:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{admin}/metrics", timeout=10) as r:
            text = r.read().decode()
    except OSError:
        return float("nan")
    return sum(float(line.rpartition(" ")[2]) for line in text.splitlines()
               if line.startswith(name) and not line.startswith("#"))  # fmt: skip


def client_hello() -> bytes:
    """The bytes of a real TLS ClientHello (what a client sends first)."""
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    inc, out = ssl.MemoryBIO(), ssl.MemoryBIO()
    obj = ctx.wrap_bio(inc, out, server_hostname="localhost")
    try:
        obj.do_handshake()
    except ssl.SSLWantReadError:
        pass
    return out.read()


def legit_produce(port: int, ca: Path, timeout: float = 30) -> float:
    """A new SASL_SSL client connects and gets one record acknowledged; seconds (inf: failed)."""
    from confluent_kafka import Producer

    t0 = time.monotonic()
    p = Producer({
        "bootstrap.servers": f"127.0.0.1:{port}", "security.protocol": "SASL_SSL",
        "ssl.ca.location": str(ca), "sasl.mechanisms": "PLAIN", "sasl.username": "alice",
        "sasl.password": "alice-secret", "linger.ms": 0, "message.timeout.ms": int(timeout * 1000),
    })  # fmt: skip
    errors: list[Any] = []
    p.produce("legit", b"x", on_delivery=lambda e, m: errors.append(e) if e else None)
    left = p.flush(timeout + 5)
    return time.monotonic() - t0 if left == 0 and not errors else float("inf")


def open_many(n: int, port: int, payload: bytes | None) -> tuple[list[socket.socket], int]:
    """``n`` connections spread over SOURCES; those not established in 3 s count as failed."""
    socks, failed = [], 0
    for i in range(n):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        s.bind((SOURCES[i % len(SOURCES)], 0))
        s.settimeout(3)
        try:
            s.connect(("127.0.0.1", port))
            if payload:
                s.send(payload)
        except OSError:
            failed += 1
            s.close()
            continue
        socks.append(s)
    return socks, failed


def hold(phase: str, n: int, port: int) -> int:
    """Child process of one phase: open ``n`` connections, say how many, hold them
    until stdin closes (one process per phase: RLIMIT_NOFILE is per process)."""
    raise_nofile(n + 100)
    socks, failed = open_many(n, port, client_hello() if phase == "handshakes" else None)
    print(json.dumps({"opened": len(socks), "failed_to_connect": failed}), flush=True)
    sys.stdin.read()
    return 0


def raise_nofile(want: int) -> tuple[int, int]:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    try:  # root may raise the hard limit (not in every container); the agent inherits it
        resource.setrlimit(resource.RLIMIT_NOFILE, (max(want, soft), max(want, hard)))
    except (ValueError, OSError):
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)


def fill(port: int, ca: Path | None, topic: str, mib: int) -> None:
    """``mib`` records of ~1 MiB in partition 0 of ``topic``, over SASL_SSL (SASL_PLAINTEXT
    without ``ca``)."""
    from confluent_kafka import Producer

    conf: dict[str, Any] = {
        "bootstrap.servers": f"127.0.0.1:{port}", "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanisms": "PLAIN", "sasl.username": "alice", "sasl.password": "alice-secret",
        "linger.ms": 20, "batch.size": 1_000_000, "message.max.bytes": 2_000_000, "compression.type": "none",
    }  # fmt: skip
    if ca is not None:
        conf.update({"security.protocol": "SASL_SSL", "ssl.ca.location": str(ca)})
    p = Producer(conf)
    value = b"v" * (MiB - 1024)
    for _ in range(mib):
        while True:
            try:
                p.produce(topic, value=value, partition=0)
                break
            except BufferError:
                p.poll(0.1)
    assert p.flush(300) == 0


def non_reading_fetcher(port: int, ca: Path, topic: str) -> ssl.SSLSocket:
    """A SASL_SSL client (PLAIN) that sends a Fetch of 2^31-1 bytes and never reads it."""
    from kafka_protocol.framing import RequestHeader, encode_request
    from kafka_protocol.messages import SaslAuthenticateRequest, SaslHandshakeRequest
    from tests.agent.test_memory_attacks import fetch_frame, read_response

    raw = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    raw.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    raw.connect(("127.0.0.1", port))
    s = ssl.create_default_context(cafile=str(ca)).wrap_socket(raw, server_hostname="localhost")
    s.sendall(encode_request(RequestHeader(17, 1, 1, "fetcher"), SaslHandshakeRequest(mechanism="PLAIN")))
    read_response(s)
    s.sendall(encode_request(RequestHeader(36, 0, 2, "fetcher"),
                             SaslAuthenticateRequest(auth_bytes=b"\0alice\0alice-secret")))  # fmt: skip
    read_response(s)
    s.sendall(fetch_frame(None, topic, 3))
    return s


def main() -> int:
    if len(sys.argv) == 5 and sys.argv[1] == "--hold":
        return hold(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--half-open", type=int, default=20_000)
    ap.add_argument("--handshakes", type=int, default=20_000)
    ap.add_argument("--fetchers", type=int, default=0, help="then N SASL_SSL clients fetch 2^31-1 bytes at once, never read")
    ap.add_argument("--fill-mib", type=int, default=150, help="MiB in the fetchers' topic")
    ap.add_argument("--agent-root", type=Path, default=REPO)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()

    nofile = raise_nofile(max(args.half_open, args.handshakes) + 1000)  # the agent inherits it
    print(f"RLIMIT_NOFILE (each attacker process and the agent): {nofile}", flush=True)

    sys.path.insert(0, str(REPO))
    from tests.fixtures.pki import TestCA

    tmp = Path(tempfile.mkdtemp(prefix="floe-attack-"))
    ca = TestCA(tmp / "pki")
    server = ca.issue("localhost", dns=("localhost",), ips=("127.0.0.1",))
    port, admin = free_port(), free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLOE_")}
    env.update({
        "FLOE_LISTENERS": f"SASL_SSL://127.0.0.1:{port}", "FLOE_SSL_CERTFILE": str(server.cert),
        "FLOE_SSL_KEYFILE": str(server.key), "FLOE_SASL_USERS": "alice:alice-secret",
        "FLOE_AUTO_CREATE_TOPICS": "true", "PYTHONPATH": str(args.agent_root), "PYTHONUNBUFFERED": "1",
    })  # fmt: skip
    argv = [sys.executable, "-m", "floe_cli.main", "agent", "--host", "127.0.0.1", "--advertised-host", "127.0.0.1",
            "--workers", "1", "--admin-port", str(admin), "--metastore", f"sqlite:///{tmp / 'meta.db'}",
            "--objects", f"file://{tmp / 'objects'}", "--cluster-id", "attack"]  # fmt: skip
    log = open(tmp / "agent.log", "wb")
    agent = subprocess.Popen(argv, env=env, cwd=args.agent_root, stdout=log, stderr=subprocess.STDOUT)
    report: dict[str, Any] = {"agent_root": str(args.agent_root), "log": str(tmp / "agent.log")}
    holders: list[subprocess.Popen[str]] = []
    try:
        deadline = time.monotonic() + 60
        while metric(admin, "floe_connections") != metric(admin, "floe_connections"):  # nan until up
            if time.monotonic() > deadline or agent.poll() is not None:
                raise SystemExit(f"agent did not start; see {tmp / 'agent.log'}")
            time.sleep(0.2)
        report["first_produce_s"] = legit_produce(port, ca.cert)
        report["base_rss_mib"] = rss(agent.pid)[0]
        print(f"agent up: RSS {report['base_rss_mib']:.0f} MiB, first produce {report['first_produce_s']:.2f} s",
              flush=True)  # fmt: skip

        for phase, n in (("half_open", args.half_open), ("handshakes", args.handshakes)):
            t0 = time.monotonic()
            opened = {"opened": 0, "failed_to_connect": 0}
            for part in range(0, n, PER_HOLDER):  # one process per 10,000: RLIMIT_NOFILE is per process
                holder = subprocess.Popen(
                    [sys.executable, "-m", "tests.security.attack", "--hold", phase, str(min(PER_HOLDER, n - part)),
                     str(port)], cwd=REPO, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                )  # fmt: skip
                holders.append(holder)
                assert holder.stdout is not None
                for k, v in json.loads(holder.stdout.readline()).items():
                    opened[k] += v
            now, peak = rss(agent.pid)
            took = legit_produce(port, ca.cert)
            report[phase] = {
                **opened, "open_s": round(time.monotonic() - t0, 1),
                "rss_mib": now, "peak_rss_mib": peak, "legit_produce_s": took,
                "refused_total": metric(admin, "floe_connections_refused_total"),
                "expired_total": metric(admin, "floe_connections_expired_total"),
                "agent_alive": agent.poll() is None,
            }  # fmt: skip
            print(f"{phase}: {report[phase]}", flush=True)
        # Every attacker still held; the handshake deadline (if any) has passed by now.
        time.sleep(12)  # not synchronisation: measuring after the agent's own deadlines
        now, peak = rss(agent.pid)
        report["after_deadlines"] = {"rss_mib": now, "peak_rss_mib": peak,
                                     "legit_produce_s": legit_produce(port, ca.cert),
                                     "refused_total": metric(admin, "floe_connections_refused_total"),
                                     "expired_total": metric(admin, "floe_connections_expired_total"),
                                     "agent_alive": agent.poll() is None}  # fmt: skip
        print(f"after deadlines: {report['after_deadlines']}", flush=True)
        if args.fetchers:
            fill(port, ca.cert, "big", args.fill_mib)
            before = metric(admin, "floe_fetched_bytes_total")
            t0 = time.monotonic()
            fetchers = [non_reading_fetcher(port, ca.cert, "big") for _ in range(args.fetchers)]
            deadline = time.monotonic() + 60  # until the fetches have been built (or capped)
            while metric(admin, "floe_fetched_bytes_total") - before < args.fetchers * MiB and time.monotonic() < deadline:
                time.sleep(0.5)
            tooks = [legit_produce(port, ca.cert) for _ in range(3)]
            now, peak = rss(agent.pid)
            report["fetchers"] = {"clients": args.fetchers, "rss_mib": now, "peak_rss_mib": peak,
                                  "waited_s": round(time.monotonic() - t0, 1),
                                  "built_mib": (metric(admin, "floe_fetched_bytes_total") - before) / MiB,
                                  "legit_produce_s": tooks, "agent_alive": agent.poll() is None}  # fmt: skip
            print(f"fetchers: {report['fetchers']}", flush=True)
            for f in fetchers:
                f.close()
    finally:
        for h in holders:
            if h.stdin is not None:
                h.stdin.close()
            h.wait(30)
        agent.terminate()
        try:
            agent.wait(30)
        except subprocess.TimeoutExpired:
            agent.kill()
        log.close()
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
