"""Connection handling: bad input closes the connection (never crashes the agent),
memory stays bounded by bytes received, responses leave in request order."""

from __future__ import annotations

import socket
import struct

import pytest

from agent.connection import KafkaConnection
from kafka_protocol.framing import RequestHeader, encode_request
from kafka_protocol.messages import (
    ApiVersionsRequest,
    ApiVersionsResponse,
    MetadataRequest,
    MetadataResponse,
)


def _connect(agent) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", agent.port), timeout=10)
    s.settimeout(10)
    return s


def _recv_exact(s: socket.socket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        chunk = s.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("closed")
        buf += chunk
    return buf


def _recv_frame(s: socket.socket) -> bytes:
    (size,) = struct.unpack(">i", _recv_exact(s, 4))
    return _recv_exact(s, size)


def _assert_closed(s: socket.socket) -> None:
    try:
        data = s.recv(1)
    except (ConnectionResetError, TimeoutError) as e:
        assert not isinstance(e, TimeoutError), "connection stayed open"
        return
    assert data == b""


def _api_versions_ok(agent) -> None:
    s = _connect(agent)
    s.sendall(encode_request(RequestHeader(18, 3, 7, "t"), ApiVersionsRequest(client_software_name="t", client_software_version="1")))
    body = _recv_frame(s)
    assert struct.unpack(">i", body[:4])[0] == 7
    resp = ApiVersionsResponse.decode(body[4:], 3)
    assert resp.error_code == 0
    keys = {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys}
    assert keys[0][0] == 0  # Produce advertised from 0 for old librdkafka
    s.close()


@pytest.mark.parametrize(
    "payload",
    [
        struct.pack(">i", 200 * 1024 * 1024),  # above socket.request.max.bytes
        struct.pack(">i", -5),  # negative size
        struct.pack(">i", 3) + b"\x00\x00\x00",  # frame too short for a header
        struct.pack(">i", 10) + b"\x00\x63\x00\x00\x00\x00\x00\x01\xff\xff",  # unknown api key 99
        # Produce v7 whose body is truncated garbage
        struct.pack(">i", 12) + struct.pack(">hhi", 0, 7, 1) + b"\xff\xff" + b"\x00\x01",
        # Metadata v4 whose topic array claims 2^31-1 entries in 4 bytes
        struct.pack(">i", 14) + struct.pack(">hhi", 3, 4, 1) + b"\xff\xff" + b"\x7f\xff\xff\xff",
    ],
    ids=["too-large", "negative", "short-header", "unknown-api", "truncated-produce", "huge-array"],
)
def test_bad_frames_close_the_connection_only(floe_agent, payload):
    s = _connect(floe_agent)
    s.sendall(payload)
    _assert_closed(s)
    s.close()
    _api_versions_ok(floe_agent)  # the agent still serves everyone else


def test_unknown_api_versions_version_gets_v0_answer(floe_agent):
    s = _connect(floe_agent)
    # ApiVersions v99 from a newer client: header v2 (client id + empty tagged fields)
    body = struct.pack(">hhih", 18, 99, 42, 1) + b"x" + b"\x00"
    s.sendall(struct.pack(">i", len(body)) + body)
    frame = _recv_frame(s)
    assert struct.unpack(">i", frame[:4])[0] == 42
    resp = ApiVersionsResponse.decode(frame[4:], 0)
    assert resp.error_code == 35  # UNSUPPORTED_VERSION
    assert any(k.api_key == 18 for k in resp.api_keys)
    s.close()


def test_pipelined_requests_answered_in_order(floe_agent):
    s = _connect(floe_agent)
    out = b""
    for cid in range(50):
        if cid % 2:
            out += encode_request(RequestHeader(3, 4, cid, "t"), MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=f"pipelined-{cid}")]))
        else:
            out += encode_request(RequestHeader(18, 0, cid, "t"), ApiVersionsRequest())
    s.sendall(out)
    seen = []
    for _ in range(50):
        frame = _recv_frame(s)
        cid = struct.unpack(">i", frame[:4])[0]
        seen.append(cid)
        if cid % 2:
            md = MetadataResponse.decode(frame[4:], 4)
            assert md.topics[0].name == f"pipelined-{cid}"
            assert md.topics[0].error_code == 0  # auto-created
    assert seen == list(range(50))
    s.close()


class _FakeTransport:
    def __init__(self) -> None:
        self.closed = False
        self.written: list[bytes] = []

    def get_extra_info(self, name, default=None):
        return ("127.0.0.1", 1) if name == "peername" else default

    def close(self) -> None:
        self.closed = True

    def pause_reading(self) -> None: ...
    def resume_reading(self) -> None: ...

    def writelines(self, parts) -> None:
        self.written.append(b"".join(parts))


async def test_declared_size_is_not_preallocated():
    async def dispatch(ctx, frame, at):  # pragma: no cover - never reached
        raise AssertionError

    conn = KafkaConnection(dispatch, max_frame_bytes=100 * 1024 * 1024)
    t = _FakeTransport()
    conn.connection_made(t)  # type: ignore[arg-type]
    buf = conn.get_buffer(-1)
    buf[:4] = struct.pack(">i", 100 * 1024 * 1024)
    conn.buffer_updated(4)
    view = conn.get_buffer(-1)
    assert len(view) <= 64 * 1024, "a declared 100 MiB frame allocated more than 64 KiB up front"
    view[:10] = b"0123456789"
    conn.buffer_updated(10)
    assert len(conn.get_buffer(-1)) <= 128 * 1024
    conn.connection_lost(None)


async def test_ready_responses_leave_in_one_write_in_order():
    """Deferred(future, then) responses complete together (a commit answers a
    segment's requests at once): they go out in request order, in one write."""
    import asyncio

    from agent.connection import Deferred

    loop = asyncio.get_running_loop()
    futures: list[asyncio.Future[int]] = []

    async def dispatch(ctx, frame, at):
        fut = loop.create_future()
        futures.append(fut)
        cid = ctx.header.correlation_id
        return Deferred(fut, lambda v, cid=cid: ApiVersionsResponse(error_code=v + cid))

    conn = KafkaConnection(dispatch, max_frame_bytes=1 << 20)
    t = _FakeTransport()
    conn.connection_made(t)  # type: ignore[arg-type]
    for cid in range(5):
        frame = encode_request(RequestHeader(18, 0, cid, "t"), ApiVersionsRequest())
        buf = conn.get_buffer(-1)
        buf[:4] = frame[:4]
        conn.buffer_updated(4)
        body = frame[4:]
        conn.get_buffer(-1)[: len(body)] = body
        conn.buffer_updated(len(body))
    for _ in range(50):
        if len(futures) == 5:
            break
        await asyncio.sleep(0)
    assert len(futures) == 5
    for fut in reversed(futures):  # completion order does not matter
        fut.set_result(100)
    for _ in range(50):
        if t.written:
            break
        await asyncio.sleep(0)
    assert len(t.written) == 1, "ready responses were written one by one"
    data, seen = t.written[0], []
    while data:
        (size,) = struct.unpack(">i", data[:4])
        cid = struct.unpack(">i", data[4:8])[0]
        seen.append((cid, ApiVersionsResponse.decode(data[8 : 4 + size], 0).error_code))
        data = data[4 + size :]
    assert seen == [(c, 100 + c) for c in range(5)]
    conn.connection_lost(None)
