"""Connection limits, deadlines, the pre-authentication frame cap and the unread
response budget (agent.security.limits + agent.connection), with an injected
clock and a fake transport: no sockets, no sleeps."""

from __future__ import annotations

import asyncio
import struct
from collections.abc import Callable
from typing import Any

import pytest

from agent.connection import KafkaConnection
from agent.security.limits import ConnectionLimits, DeadlineSweeper, ResponseBudget


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


class Transport:
    def __init__(self, ip: str = "10.0.0.1", port: int = 1) -> None:
        self.peer = (ip, port)
        self.closed = False
        self.reading = True
        self.buffered = 0
        self.written: list[bytes] = []
        self.protocol: KafkaConnection | None = None

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return self.peer if name == "peername" else default

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            if self.protocol is not None:
                self.protocol.connection_lost(None)

    def pause_reading(self) -> None:
        self.reading = False

    def resume_reading(self) -> None:
        self.reading = True

    def get_write_buffer_size(self) -> int:
        return self.buffered

    def writelines(self, parts: Any) -> None:
        data = b"".join(parts)
        self.written.append(data)
        self.buffered += len(data)
        if self.buffered > 64 * 1024 and self.protocol is not None:
            self.protocol.pause_writing()


async def _never(ctx: Any, frame: Any, at: int) -> Any:  # pragma: no cover - never reached
    raise AssertionError


def _conn(clock: Clock, **kw: Any) -> tuple[KafkaConnection, Transport]:
    kw.setdefault("max_frame_bytes", 100 * 1024 * 1024)
    ip = kw.pop("ip", "10.0.0.1")
    conn = KafkaConnection(kw.pop("dispatch", _never), clock=clock, **kw)
    t = Transport(ip)
    t.protocol = conn
    conn.connection_made(t)  # type: ignore[arg-type]
    return conn, t


def _feed(conn: KafkaConnection, data: bytes) -> None:
    while data:
        buf = conn.get_buffer(-1)
        n = min(len(buf), len(data))
        buf[:n] = data[:n]
        conn.buffer_updated(n)
        data = data[n:]


async def test_max_connections_and_per_ip() -> None:
    clock = Clock()
    limits = ConnectionLimits(3, 2, clock=clock)
    conns = []
    for ip in ("10.0.0.1", "10.0.0.1", "10.0.0.1", "10.0.0.2", "10.0.0.3"):
        c = KafkaConnection(_never, max_frame_bytes=1024, limits=limits, clock=clock)
        t = Transport(ip)
        t.protocol = c
        c.connection_made(t)  # type: ignore[arg-type]
        conns.append((c, t))
    assert [t.closed for _, t in conns] == [False, False, True, False, True]
    assert limits.total == 3 and limits.per_ip == {"10.0.0.1": 2, "10.0.0.2": 1}
    conns[0][1].close()
    assert limits.total == 2 and limits.per_ip["10.0.0.1"] == 1
    for _c, t in conns:
        t.close()
    assert limits.total == 0 and not limits.per_ip
    for c, _ in conns:
        for task in c._tasks:
            task.cancel()


async def test_idle_connection_expires() -> None:
    clock = Clock()
    conn, t = _conn(clock)
    sweeper = DeadlineSweeper(lambda: [conn], idle_ms=600_000, request_ms=30_000, clock=clock)
    clock.t += 599
    assert sweeper.sweep() == 0
    clock.t += 2
    assert sweeper.sweep() == 1 and t.closed


async def test_partial_request_expires_but_not_while_we_pause_reading() -> None:
    clock = Clock()
    conn, t = _conn(clock)
    sweeper = DeadlineSweeper(lambda: [conn], idle_ms=600_000, request_ms=30_000, clock=clock)
    _feed(conn, struct.pack(">i", 1024 * 1024) + b"x" * 100)  # declared 1 MiB, sent 100 bytes
    clock.t += 20
    _feed(conn, b"x" * 100)  # still trickling: the deadline counts from the start
    clock.t += 9
    assert conn.expired(clock.t, 600, 30) is None
    conn._set_reading(False)  # our back-pressure: not the client's fault
    clock.t += 60
    assert conn.expired(clock.t, 600, 30) is None
    conn._set_reading(True)  # the deadline restarts when we read again
    clock.t += 29
    assert sweeper.sweep() == 0
    clock.t += 2
    assert "request_timeout_ms" in (conn.expired(clock.t, 600, 30) or "")
    assert sweeper.sweep() == 1 and t.closed


async def test_complete_frame_clears_the_request_deadline() -> None:
    seen = asyncio.Event()

    async def dispatch(ctx: Any, frame: Any, at: int) -> Any:
        seen.set()
        return None  # like acks=0: nothing to write

    clock = Clock()
    conn, t = _conn(clock, dispatch=dispatch)
    # A whole (garbage-headed) frame: the request deadline no longer applies.
    _feed(conn, struct.pack(">i", 4) + b"\x00\x12\x00\x00")
    assert conn._partial_since is None
    clock.t += 3600
    assert conn.expired(clock.t, 1e9, 30) is None
    t.close()


async def test_frames_before_authentication_are_capped() -> None:
    clock = Clock()
    conn, t = _conn(clock, max_pre_auth_frame_bytes=64 * 1024)
    conn.pre_auth = True  # a SASL listener, not yet authenticated
    _feed(conn, struct.pack(">i", 64 * 1024 + 1))
    assert t.closed
    conn2, t2 = _conn(clock, max_pre_auth_frame_bytes=64 * 1024)
    _feed(conn2, struct.pack(">i", 1024 * 1024))  # PLAINTEXT / authenticated: the normal cap
    assert not t2.closed
    t2.close()


def test_declared_length_costs_at_most_64k() -> None:
    async def go() -> None:
        clock = Clock()
        conn, t = _conn(clock)
        _feed(conn, struct.pack(">i", 1024 * 1024))
        assert conn._frame is not None and len(conn._frame) <= 64 * 1024
        # Trickled bytes: the buffer stays within 64 KiB of twice what arrived, and it
        # is copied once per 32 KiB received at most, not once per byte.
        copies, frame = 0, conn._frame
        for i in range(1, 200_001):
            _feed(conn, b"x")
            if conn._frame is not frame:
                copies, frame = copies + 1, conn._frame
            assert len(frame) <= 2 * i + 64 * 1024, (i, len(frame))
        assert copies <= 200_000 // (32 * 1024) + 1, copies
        t.close()

    asyncio.run(go())


async def test_non_reading_client_stops_being_read_and_holds_budget() -> None:
    budget = ResponseBudget(100 * 1024)
    big = b"r" * (200 * 1024)

    from agent.connection import RawFrame

    async def dispatch(ctx: Any, frame: Any, at: int) -> Any:
        return RawFrame(big)

    clock = Clock()
    conn, t = _conn(clock, dispatch=dispatch, budget=budget)
    request = struct.pack(">hhi", 18, 0, 1) + struct.pack(">h", -1)  # ApiVersions v0 header
    _feed(conn, struct.pack(">i", len(request)) + request)
    for _ in range(20):
        await asyncio.sleep(0)  # let the dispatch and write tasks run
    assert t.written and not t.reading, "a client that does not read must stop being read"
    assert budget.used == len(big) and budget.exceeded
    assert conn.expired(clock.t + 29, 600, 30) is None
    assert "unread" in (conn.expired(clock.t + 31, 600, 30) or "")
    t.buffered = 0
    conn.resume_writing()
    assert budget.used == 0 and t.reading
    t.close()


@pytest.mark.parametrize("avail,asked,expect", [(10**9, 2**31 - 1, 55 * 1024 * 1024), (1000, 2**31 - 1, 750), (0, 50, 0)])
def test_fetch_max_bytes_cap(avail: int, asked: int, expect: int) -> None:
    from types import SimpleNamespace

    from agent.fetch.request import cap

    budget = ResponseBudget(avail)
    broker = SimpleNamespace(config=SimpleNamespace(fetch_max_bytes=55 * 1024 * 1024))
    ctx = SimpleNamespace(conn=SimpleNamespace(response_budget=budget))
    req = SimpleNamespace(max_bytes=asked)
    assert cap(broker, ctx, req).max_bytes == expect  # type: ignore[arg-type]


async def test_large_frames_reserve_their_size_or_wait_small_frames_pass() -> None:
    """Issue 42: the rest of a frame beyond 64 KiB is reserved from the budget when
    its size is read; when the budget is used up the connection stops reading
    until a reservation is given back; frames of up to 64 KiB always pass."""
    KiB = 1024
    budget = ResponseBudget(1024 * KiB)
    clock = Clock()
    a, ta = _conn(clock, budget=budget, ip="10.0.0.1")
    b, tb = _conn(clock, budget=budget, ip="10.0.0.2")
    c, tc = _conn(clock, budget=budget, ip="10.0.0.3")
    _feed(a, struct.pack(">i", 800 * KiB) + b"x" * 400 * KiB)
    assert budget.used == 800 * KiB and ta.reading
    _feed(b, struct.pack(">i", 800 * KiB))  # granted: the budget was not used up (one may overshoot)
    assert budget.used == 1600 * KiB and tb.reading
    _feed(c, struct.pack(">i", 800 * KiB))  # used up: c waits, holding no buffer
    assert not tc.reading and budget.waiting == 1 and budget.used == 1600 * KiB
    assert c._frame is not None and len(c._frame) == 0
    assert c.expired(clock.t + 3600, 1e9, 30) is None, "waiting for memory is not the client's fault"
    d, td = _conn(clock, budget=budget, ip="10.0.0.4")
    _feed(d, struct.pack(">i", 100) + b"y" * 50)  # a small frame still passes
    assert td.reading and budget.used == 1600 * KiB + 100
    tb.close()  # gives 800 KiB back: 800 KiB + 100 used of 1 MiB, c gets its 800 KiB
    assert tc.reading and budget.waiting == 0 and budget.used == 1600 * KiB + 100
    _feed(c, b"z" * (800 * KiB))  # c's frame is read to the end (dispatch: _never -> closes)
    budget.add(2 * 1024 * KiB)  # twice over (e.g. unread responses): small frames wait too
    e, te = _conn(clock, budget=budget, ip="10.0.0.5")
    _feed(e, struct.pack(">i", 100))
    assert not te.reading and budget.waiting == 1
    budget.sub(2 * 1024 * KiB)
    assert te.reading and budget.waiting == 0
    for t in (ta, tb, tc, td, te):
        t.close()
    assert budget.used == 0


async def test_large_responses_are_handed_over_a_slice_at_a_time() -> None:
    """A 5 MiB response to a client that does not read: one 1 MiB slice goes to the
    transport (over TLS: encrypted into the TCP transport), the rest waits here,
    and all of it is counted in the budget."""
    from agent.connection import RawFrame

    MiB = 1024 * 1024
    big = b"r" * (5 * MiB)

    async def dispatch(ctx: Any, frame: Any, at: int) -> Any:
        return RawFrame(big)

    budget = ResponseBudget(256 * MiB)
    clock = Clock()
    conn, t = _conn(clock, dispatch=dispatch, budget=budget)
    request = struct.pack(">hhi", 18, 0, 1) + struct.pack(">h", -1)
    _feed(conn, struct.pack(">i", len(request)) + request)
    for _ in range(20):
        await asyncio.sleep(0)
    assert sum(map(len, t.written)) == MiB
    assert budget.used == 5 * MiB  # 4 MiB not handed over + 1 MiB in the transport
    t.buffered = 0  # the client read it
    conn.resume_writing()
    for _ in range(20):
        await asyncio.sleep(0)
    assert sum(map(len, t.written)) == 2 * MiB and budget.used == 4 * MiB
    t.close()
    assert budget.used == 0


def test_at_max_connections_the_oldest_unauthenticated_is_evicted() -> None:
    limits = ConnectionLimits(2, 5)
    evicted: list[str] = []

    def evict(key: str) -> Callable[[], bool]:
        def go() -> bool:
            evicted.append(key)
            return True

        return go

    assert limits.admit("10.0.0.1") and limits.admit("10.0.0.2")
    limits.add_pending("authenticated-since", lambda: False)  # dropped, not evicted
    limits.add_pending("a", evict("a"))
    limits.add_pending("b", evict("b"))
    assert limits.admit("10.0.0.3")  # evicts "a" (its release comes with its connection_lost)
    assert evicted == ["a"] and limits.total == 3
    limits.release("10.0.0.1")
    limits.forget("b")  # authenticated or closed: no longer evictable
    assert not limits.admit("10.0.0.4"), "nothing left to evict: refused"
    assert evicted == ["a"] and limits.total == 2


async def test_unauthenticated_connection_expires_from_its_accept() -> None:
    clock = Clock()
    conn, t = _conn(clock)
    conn.pre_auth = True  # a SASL listener's connection, not authenticated
    conn.accepted_at = clock.t - 5  # its TLS handshake took 5 s
    sweeper = DeadlineSweeper(lambda: [conn], idle_ms=600_000, request_ms=30_000, auth_ms=10_000, clock=clock)
    clock.t += 4
    assert sweeper.sweep() == 0
    clock.t += 2
    assert sweeper.sweep() == 1 and t.closed
