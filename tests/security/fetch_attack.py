"""Fetch-memory attack on a SASL agent (issue 42), rerunnable by a reviewer.

    .venv/bin/python -m tests.security.fetch_attack [--clients 32] [--fill-mib 150]
        [--agent-root /path/to/a/floe/checkout] [--json out.json]

Starts ``floe agent`` (a real process, defaults except the listeners, a
throwaway certificate and one PLAIN user) with a SASL_PLAINTEXT and a SASL_SSL
listener, fills a topic with ``--fill-mib`` MiB of 1 MiB records, then for each
listener and each mode runs ``--clients`` authenticated clients that send one
Fetch of 2^31-1 bytes (partition max 2^31-1) and never read the response:

* ``sequential``: one client after another, each once its Fetch has been built;
* ``at_once``: all clients authenticate first, then all send their Fetch together.

Each scenario runs on a fresh agent process, so its peak RSS (VmHWM) is its own.
Throughout, a well-behaved client (confluent-kafka over SASL_PLAINTEXT, one
connection, connected and acknowledged once before the attack starts) produces one
record every 100 ms, and the slowest acknowledgement during the attack is
reported: it must stay under 1 s. Not a pytest test (it takes a few minutes);
the bounded versions are tests/security/test_accept_limits.py and
tests/agent/test_memory_attacks.py.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from tests.security.attack import REPO, MiB, fill, free_port, metric, raise_nofile, rss

USER, PASSWORD = "alice", "alice-secret"


def _auth(s: socket.socket) -> None:
    from kafka_protocol.framing import RequestHeader, encode_request
    from kafka_protocol.messages import SaslAuthenticateRequest, SaslHandshakeRequest
    from tests.agent.test_memory_attacks import read_response

    s.sendall(encode_request(RequestHeader(17, 1, 1, "fetcher"), SaslHandshakeRequest(mechanism="PLAIN")))
    read_response(s)
    s.sendall(encode_request(RequestHeader(36, 0, 2, "fetcher"),
                             SaslAuthenticateRequest(auth_bytes=f"\0{USER}\0{PASSWORD}".encode())))  # fmt: skip
    read_response(s)


def fetcher(port: int, ca: Path | None) -> socket.socket:
    """An authenticated client (SASL_SSL when ``ca``, else SASL_PLAINTEXT) that reads nothing more."""
    raw = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    raw.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    raw.connect(("127.0.0.1", port))
    s: socket.socket = raw
    if ca is not None:
        s = ssl.create_default_context(cafile=str(ca)).wrap_socket(raw, server_hostname="localhost")
    _auth(s)
    return s


def _conf(port: int) -> dict[str, Any]:
    return {"bootstrap.servers": f"127.0.0.1:{port}", "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanisms": "PLAIN", "sasl.username": USER, "sasl.password": PASSWORD}  # fmt: skip


class WellBehaved(threading.Thread):
    """Produces a record every 100 ms; keeps each acknowledgement's latency."""

    def __init__(self, port: int) -> None:
        super().__init__(daemon=True)
        from confluent_kafka import Producer

        self.p = Producer({**_conf(port), "linger.ms": 0, "message.timeout.ms": 30_000})
        self.latencies: list[float] = []
        self.errors = 0
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            t0 = time.monotonic()
            done = threading.Event()

            def ack(err: Any, _msg: Any, t0: float = t0, done: threading.Event = done) -> None:
                if err is not None:
                    self.errors += 1
                self.latencies.append(time.monotonic() - t0)
                done.set()

            self.p.produce("legit", b"x", on_delivery=ack)
            while not done.is_set():
                self.p.poll(0.01)
            self.stop.wait(max(0.0, 0.1 - (time.monotonic() - t0)))


def start_agent(root: Path, tmp: Path, cert: Any) -> tuple[subprocess.Popen[bytes], int, int, int]:
    plain, tls, admin = free_port(), free_port(), free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLOE_")}
    env.update({
        "FLOE_LISTENERS": f"SASL_PLAINTEXT://127.0.0.1:{plain},SASL_SSL://127.0.0.1:{tls}",
        "FLOE_SSL_CERTFILE": str(cert.cert), "FLOE_SSL_KEYFILE": str(cert.key),
        "FLOE_SASL_USERS": f"{USER}:{PASSWORD}", "FLOE_AUTO_CREATE_TOPICS": "true",
        "PYTHONPATH": str(root), "PYTHONUNBUFFERED": "1",
    })  # fmt: skip
    argv = [sys.executable, "-m", "floe_cli.main", "agent", "--host", "127.0.0.1", "--advertised-host", "127.0.0.1",
            "--workers", "1", "--admin-port", str(admin), "--metastore", f"sqlite:///{tmp / 'meta.db'}",
            "--objects", f"file://{tmp / 'objects'}", "--cluster-id", "attack"]  # fmt: skip
    log = open(tmp / "agent.log", "ab")
    agent = subprocess.Popen(argv, env=env, cwd=root, stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 60
    while metric(admin, "floe_connections") != metric(admin, "floe_connections"):  # nan until up
        if time.monotonic() > deadline or agent.poll() is not None:
            raise SystemExit(f"agent did not start; see {tmp / 'agent.log'}")
        time.sleep(0.2)
    return agent, plain, tls, admin


def scenario(root: Path, tmp: Path, cert: Any, ca: Path, listener: str, mode: str, clients: int) -> dict[str, Any]:
    from tests.agent.test_memory_attacks import fetch_frame

    agent, plain, tls, admin = start_agent(root, tmp, cert)
    socks: list[socket.socket] = []
    legit = WellBehaved(plain)
    try:
        base = rss(agent.pid)[0]
        legit.start()
        warm = time.monotonic() + 30  # its connection and first produce before the attack
        while not legit.latencies and time.monotonic() < warm:
            time.sleep(0.02)
        port, cafile = (tls, ca) if listener == "SASL_SSL" else (plain, None)
        before = metric(admin, "floe_fetched_bytes_total")
        t0 = time.monotonic()
        if mode == "sequential":
            for i in range(clients):
                s = fetcher(port, cafile)
                socks.append(s)
                built = metric(admin, "floe_fetched_bytes_total")
                s.sendall(fetch_frame(None, "big", 100 + i))
                deadline = time.monotonic() + 30  # until this one's response is built
                while metric(admin, "floe_fetched_bytes_total") <= built and time.monotonic() < deadline:
                    time.sleep(0.05)
        else:
            socks = [fetcher(port, cafile) for _ in range(clients)]
            frames = [fetch_frame(None, "big", 100 + i) for i in range(clients)]
            for s, f in zip(socks, frames, strict=True):
                s.sendall(f)
            deadline = time.monotonic() + 30
            while metric(admin, "floe_fetched_bytes_total") - before < clients * MiB and time.monotonic() < deadline:
                time.sleep(0.1)
        time.sleep(3)  # not synchronisation: the well-behaved client keeps producing under the attack
        now, peak = rss(agent.pid)
        legit.stop.set()
        legit.join(10)
        during = legit.latencies[1:]
        return {
            "listener": listener, "mode": mode, "clients": clients, "base_rss_mib": round(base),
            "rss_mib": round(now), "peak_rss_mib": round(peak), "attack_s": round(time.monotonic() - t0, 1),
            "built_mib": round((metric(admin, "floe_fetched_bytes_total") - before) / MiB),
            "legit_produces": len(legit.latencies), "legit_errors": legit.errors,
            "legit_first_s": round(legit.latencies[0], 3) if legit.latencies else None,  # connect + produce, before
            "legit_p50_s": round(sorted(during)[len(during) // 2], 3) if during else None,
            "legit_max_s": round(max(during, default=float("inf")), 3),  # every produce during the attack
            "agent_alive": agent.poll() is None,
        }  # fmt: skip
    finally:
        legit.stop.set()
        for s in socks:
            s.close()
        agent.terminate()
        try:
            agent.wait(30)
        except subprocess.TimeoutExpired:
            agent.kill()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--clients", type=int, default=32)
    ap.add_argument("--fill-mib", type=int, default=150)
    ap.add_argument("--agent-root", type=Path, default=REPO)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    raise_nofile(4096)
    sys.path.insert(0, str(REPO))
    from tests.fixtures.pki import TestCA

    tmp = Path(tempfile.mkdtemp(prefix="floe-fetch-attack-"))
    ca = TestCA(tmp / "pki")
    cert = ca.issue("localhost", dns=("localhost",), ips=("127.0.0.1",))
    agent, plain, _, _ = start_agent(args.agent_root, tmp, cert)  # fill once; later agents share the data
    try:
        fill(plain, None, "big", args.fill_mib)
    finally:
        agent.terminate()
        agent.wait(30)
    results = []
    for listener in ("SASL_PLAINTEXT", "SASL_SSL"):
        for mode in ("sequential", "at_once"):
            r = scenario(args.agent_root, tmp, cert, ca.cert, listener, mode, args.clients)
            print(json.dumps(r), flush=True)
            results.append(r)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
