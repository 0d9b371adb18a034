"""Connection caps and deadlines at accept, before TLS and before SASL (issue 42),
and the shared budget over partial frames and TLS-queued responses.

Real sockets on 127.0.0.1 against an in-process agent with real TLS (the
throwaway PKI of tests.fixtures.pki). Attackers connect from other loopback
addresses (127.0.0.2.., all of 127/8 is loopback on Linux) so that the
per-address cap holds them and not the well-behaved client on 127.0.0.1.
Waits poll a real condition with a bound, never a fixed sleep.
"""

from __future__ import annotations

import contextlib
import socket
import ssl
import struct
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.agent.test_memory_attacks import connect_from
from tests.fixtures.agent import RunningAgent
from tests.security.conftest import PLAIN_USERS, Pki, ck_tls

KiB = 1024
MiB = 1024 * KiB


def wait_until(cond: Callable[[], object], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)  # bounded poll on a real condition


def closed_by_peer(s: socket.socket, timeout: float = 10) -> bool:
    """True when the agent closes ``s`` (EOF or reset) within ``timeout``."""
    s.settimeout(timeout)
    try:
        while True:
            if not s.recv(65536):
                return True
    except (ConnectionResetError, BrokenPipeError):
        return True
    except TimeoutError:
        return False


@pytest.fixture
def socks() -> Iterator[list[socket.socket]]:
    out: list[socket.socket] = []
    yield out
    for s in out:
        s.close()


def tls_agent(agent_factory: Callable[..., RunningAgent], pki: Pki, **kw: Any) -> RunningAgent:
    return agent_factory(
        listeners="PLAINTEXT://127.0.0.1:0,SASL_SSL://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0",
        ssl_certfile=str(pki.server.cert),
        ssl_keyfile=str(pki.server.key),
        ssl_cafile=str(pki.ca.cert),
        sasl_users=PLAIN_USERS,
        failed_auth_delay_ms=10,
        **kw,
    )


def produce_within(agent: RunningAgent, pki: Pki, seconds: float) -> float:
    """A SASL_SSL PLAIN producer from 127.0.0.1 gets one record acknowledged; seconds taken."""
    from confluent_kafka import Producer

    p = Producer(ck_tls(agent, pki, "SASL_SSL", **{
        "sasl.mechanisms": "PLAIN", "sasl.username": "alice", "sasl.password": "alice-secret",
        "linger.ms": 0, "message.timeout.ms": int(seconds * 1000),
    }))  # fmt: skip
    errors: list[object] = []
    t0 = time.monotonic()
    p.produce("legit", b"hello", on_delivery=lambda e, m: errors.append(e) if e else None)
    assert p.flush(seconds + 5) == 0 and not errors, errors
    return time.monotonic() - t0


def test_half_open_connections_are_counted_at_accept_before_tls(
    agent_factory: Callable[..., RunningAgent], pki: Pki, socks: list[socket.socket]
) -> None:
    agent = tls_agent(agent_factory, pki, max_connections_per_ip=20)
    limits = agent.server.limits
    port = agent.server.ports["SASL_SSL"]
    produce_within(agent, pki, 30)  # warm up: topic created, client path known good
    for _ in range(20):  # never a ClientHello
        socks.append(connect_from("127.0.0.2", port))
    wait_until(lambda: limits.per_ip.get("127.0.0.2") == 20, 10, "20 half-open connections to be counted")
    # The cap is held by connections that have not even started TLS: the next is closed at once.
    late = connect_from("127.0.0.2", port)
    socks.append(late)
    assert closed_by_peer(late, 5)
    assert limits.per_ip["127.0.0.2"] == 20
    # Another address is not affected: the well-behaved client connects and produces.
    assert produce_within(agent, pki, 10) < 10
    for s in socks[:20]:
        s.close()
    wait_until(lambda: "127.0.0.2" not in limits.per_ip, 10, "the closed connections to be released")


def test_at_max_connections_the_oldest_unauthenticated_connection_makes_room(
    agent_factory: Callable[..., RunningAgent], pki: Pki, socks: list[socket.socket]
) -> None:
    agent = tls_agent(agent_factory, pki, max_connections=30, max_connections_per_ip=20)
    limits = agent.server.limits
    port = agent.server.ports["SASL_SSL"]
    for i in range(30):  # two addresses fill the total; none ever authenticates
        socks.append(connect_from(("127.0.0.2", "127.0.0.3")[i % 2], port))
    wait_until(lambda: limits.total == 30, 10, "30 half-open connections to be counted")
    oldest = socks[0]
    # A legitimate client still gets in: each of its connections evicts the oldest
    # connection that has not authenticated, instead of being refused.
    assert produce_within(agent, pki, 10) < 10
    assert closed_by_peer(oldest, 5)
    assert limits.total <= 30


def test_never_finishing_tls_handshakes_are_closed_at_the_deadline(
    agent_factory: Callable[..., RunningAgent], pki: Pki, socks: list[socket.socket]
) -> None:
    agent = tls_agent(agent_factory, pki, ssl_handshake_timeout_ms=300)
    limits = agent.server.limits
    for listener in ("SASL_SSL", "SSL"):
        port = agent.server.ports[listener]
        silent = connect_from("127.0.0.3", port)
        partial = connect_from("127.0.0.3", port)
        partial.sendall(b"\x16\x03\x01\x02\x00\x01")  # the start of a ClientHello, never the rest
        socks += [silent, partial]
        t0 = time.monotonic()
        assert closed_by_peer(silent) and closed_by_peer(partial)
        assert time.monotonic() - t0 < 5
    wait_until(lambda: "127.0.0.3" not in limits.per_ip, 10, "the expired handshakes to be released")
    # A real client still completes its handshake well within the deadline.
    ctx = ssl.create_default_context(cafile=str(pki.ca.cert))
    with contextlib.closing(socket.create_connection(("127.0.0.1", agent.server.ports["SSL"]))) as raw:
        with ctx.wrap_socket(raw, server_hostname="localhost") as tls:
            assert tls.version() in ("TLSv1.2", "TLSv1.3")


def test_past_max_pending_tls_handshakes_the_oldest_is_closed(
    agent_factory: Callable[..., RunningAgent], pki: Pki, socks: list[socket.socket]
) -> None:
    from tests.security.attack import client_hello

    agent = tls_agent(agent_factory, pki, max_pending_tls_handshakes=5)
    port = agent.server.ports["SASL_SSL"]
    hello = client_hello()
    for _ in range(8):  # a real ClientHello each, then nothing: handshakes that never finish
        s = connect_from("127.0.0.9", port)
        s.sendall(hello)
        socks.append(s)
        wait_until(lambda: len(agent.server.handshakes) >= min(len(socks), 5), 10, "the ClientHello to be read")
    assert len(agent.server.handshakes) == 5
    assert all(closed_by_peer(s, 5) for s in socks[:3]), "the three oldest make room"
    # A real client still completes its handshake and produces.
    assert produce_within(agent, pki, 10) < 10


@pytest.mark.parametrize("listener", ["SASL_PLAINTEXT", "SASL_SSL"])
def test_unauthenticated_connections_are_closed_at_the_deadline(
    agent_factory: Callable[..., RunningAgent], pki: Pki, listener: str
) -> None:
    agent = tls_agent(agent_factory, pki, authentication_timeout_ms=400)
    port = agent.server.ports[listener]
    raw = connect_from("127.0.0.4", port)
    s: socket.socket = raw
    if listener == "SASL_SSL":  # the handshake completes; SASL never starts
        s = ssl.create_default_context(cafile=str(pki.ca.cert)).wrap_socket(raw, server_hostname="localhost")
    try:
        t0 = time.monotonic()
        assert closed_by_peer(s)
        assert time.monotonic() - t0 < 5
    finally:
        s.close()
    # An authenticated client is not affected.
    assert produce_within(agent, pki, 10) < 10


def test_trickled_half_frames_are_bounded_by_the_budget(
    agent_factory: Callable[..., RunningAgent], pki: Pki, socks: list[socket.socket]
) -> None:
    cap = 2 * MiB
    agent = tls_agent(agent_factory, pki, queued_max_request_bytes=cap)
    budget = agent.server.response_budget
    produce_within(agent, pki, 30)
    n = 8
    for i in range(n):  # each declares a 1 MiB frame and sends half of it
        s = connect_from(f"127.0.0.{5 + i % 2}", agent.port)
        s.setblocking(False)
        s.send(struct.pack(">i", MiB))
        socks.append(s)
    half = b"x" * (MiB // 2)
    sent = [0] * n
    attackers = lambda: [c for c in list(agent.server._conns) if c.client_ip in ("127.0.0.5", "127.0.0.6")]  # noqa: E731

    def settled() -> bool:
        for i, s in enumerate(socks):  # push what the agent will take, without blocking
            with contextlib.suppress(BlockingIOError):
                while sent[i] < len(half):
                    sent[i] += s.send(half[sent[i] :])
        conns = attackers()
        return len(conns) == n and all(c._waiting_room or c._frame_filled == len(half) for c in conns)

    wait_until(settled, 30, "every attacker to be either waiting for room or holding half a frame")
    waiting = sum(c._waiting_room for c in attackers())
    print(f"budget {budget.used / MiB:.2f} MiB of {cap / MiB:.0f} MiB used, {waiting} of {n} connections waiting")
    assert waiting >= n - 3, "the budget let more half frames grow than it has room for"
    # Each frame's first 64 KiB is always granted; the rest is reserved whole while the
    # budget is not used up, so one frame may overshoot it.
    assert budget.used <= cap + MiB + n * 64 * KiB
    # Small frames still pass: the well-behaved client produces at once.
    assert produce_within(agent, pki, 10) < 10
    for s in socks:
        s.close()
    wait_until(lambda: not attackers() and budget.used == 0, 10, "the budget to be given back")


def test_tls_responses_a_client_does_not_read_are_counted(
    agent_factory: Callable[..., RunningAgent], pki: Pki
) -> None:
    from confluent_kafka import Producer

    from tests.agent.test_memory_attacks import fetch_frame

    agent = tls_agent(agent_factory, pki)
    budget = agent.server.response_budget
    p = Producer({"bootstrap.servers": agent.bootstrap, "linger.ms": 20, "batch.size": 1_000_000,
                  "message.max.bytes": 2_000_000, "compression.type": "none"})  # fmt: skip
    for _ in range(16):
        p.produce("big", b"v" * (MiB - 1024), partition=0)
    assert p.flush(60) == 0
    raw = connect_from("127.0.0.7", agent.server.ports["SSL"], rcvbuf=4096)
    tls = ssl.create_default_context(cafile=str(pki.ca.cert)).wrap_socket(raw, server_hostname="localhost")
    try:
        tls.sendall(fetch_frame(None, "big", 1))  # ~16 MiB answer, never read
        conn_of = lambda: next((c for c in list(agent.server._conns) if c.client_ip == "127.0.0.7"), None)  # noqa: E731
        wait_until(lambda: (c := conn_of()) is not None and c._held > 8 * MiB, 30, "the unread response to be counted")
        conn = conn_of()
        assert conn is not None
        queued_below_tls = conn._transport._tls.raw.get_write_buffer_size()
        print(f"held {conn._held / MiB:.1f} MiB, queued in the TCP transport under TLS {queued_below_tls / MiB:.2f} MiB")
        # What the TCP transport under TLS holds is counted, and it is a slice, not the response.
        assert queued_below_tls <= 3 * MiB
        assert budget.used >= conn._held >= queued_below_tls
    finally:
        tls.close()
    wait_until(lambda: budget.used == 0, 10, "the budget to be given back")


def test_slow_header_and_idle_admin_connections_are_closed(
    agent_factory: Callable[..., RunningAgent], socks: list[socket.socket]
) -> None:
    agent = agent_factory(admin_idle_timeout_ms=300)
    idle = connect_from("127.0.0.8", agent.server.admin_port)
    slow = connect_from("127.0.0.8", agent.server.admin_port)
    slow.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")  # the header never ends
    socks += [idle, slow]
    t0 = time.monotonic()
    assert closed_by_peer(idle) and closed_by_peer(slow)
    assert time.monotonic() - t0 < 5
    # A complete request is answered as before.
    with contextlib.closing(socket.create_connection(("127.0.0.1", agent.server.admin_port))) as s:
        s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        assert s.recv(12) == b"HTTP/1.1 200"
