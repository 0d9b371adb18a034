"""A minimal blocking Kafka client on a raw socket, built on ``kafka_protocol`` (for bad input)."""

from __future__ import annotations

import itertools
import socket
import struct
import time
from typing import Any

from kafka_protocol.framing import RequestHeader, encode_request
from kafka_protocol.messages import ProduceRequest
from kafka_protocol.records import RecordBatchBuilder

_corr = itertools.count(1)


class RawConn:
    def __init__(self, port: int, timeout: float = 10.0) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.timeout = timeout

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> RawConn:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def send(self, req: Any, version: int, *, api_key: int | None = None) -> int:
        corr = next(_corr)
        header = RequestHeader(
            req.API_KEY if api_key is None else api_key, version, corr, "floe-interop-raw"
        )
        self.sock.sendall(encode_request(header, req))
        return corr

    def _read_exact(self, n: int) -> bytes:
        buf = bytearray()
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            if not chunk:
                raise ConnectionError("closed by the agent")
            buf += chunk
        return bytes(buf)

    def recv(self, response_cls: Any, version: int, corr: int) -> Any:
        (size,) = struct.unpack(">i", self._read_exact(4))
        body = self._read_exact(size)
        (got,) = struct.unpack_from(">i", body, 0)
        assert got == corr, f"correlation id {got} != {corr}"
        pos = 4
        if response_cls.header_version(version) >= 1:
            assert body[pos] == 0, "unexpected tagged fields in the response header"
            pos += 1
        return response_cls.decode(body[pos:], version)

    def request(self, req: Any, response_cls: Any, version: int) -> Any:
        return self.recv(response_cls, version, self.send(req, version))

    def closed_by_peer(self, timeout: float = 10.0) -> bool:
        """True when the agent closes the connection within ``timeout`` (reads until EOF)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.sock.settimeout(max(0.05, deadline - time.monotonic()))
            try:
                data = self.sock.recv(65536)
            except (ConnectionResetError, BrokenPipeError):
                return True
            except TimeoutError:
                return False
            if not data:
                return True
        return False


def record_batch(n: int = 3, tag: str = "raw", **kw: Any) -> bytes:
    b = RecordBatchBuilder(**kw)
    for i in range(n):
        b.append(
            f"k{i}".encode(),
            f"{tag}-{i}".encode(),
            [("h", b"v")],
            timestamp_ms=1_700_000_000_000 + i,
        )
    return b.build()


def produce_request(topic: str, parts: dict[int, bytes], acks: int = -1) -> ProduceRequest:
    P = ProduceRequest.TopicProduceData.PartitionProduceData
    return ProduceRequest(
        acks=acks,
        timeout_ms=30000,
        topic_data=[
            ProduceRequest.TopicProduceData(
                name=topic, partition_data=[P(index=p, records=r) for p, r in parts.items()]
            )
        ],
    )
