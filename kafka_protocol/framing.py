"""Kafka wire framing, sans-IO: size-prefixed frames and request/response headers.

Where it sits: between the agent's socket code and the generated message
classes. The connection feeds received bytes to :class:`FrameDecoder`, which
yields complete frames; :func:`parse_request_header` reads the header and says
where the body starts; the handler decodes the body with
``REQUESTS[api_key].decode(frame[offset:], api_version)``; the answer goes out
through :func:`encode_response` as a list of parts for ``writelines()``.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any

from kafka_protocol.exceptions import DecodeError, FrameTooLarge
from kafka_protocol.messages import REQUESTS
from kafka_protocol.messages._runtime import (
    DECODE_ERRORS,
    read_nullable_string,
    skip_tagged_fields,
    uvarint,
    write_nullable_string,
)

__all__ = [
    "DEFAULT_MAX_FRAME_SIZE",
    "FrameDecoder",
    "RequestHeader",
    "encode_request",
    "encode_response",
    "parse_request_header",
    "request_header_version",
]

#: like the broker's socket.request.max.bytes
DEFAULT_MAX_FRAME_SIZE = 104_857_600

_hhi = struct.Struct(">hhi")
_hhih = struct.Struct(">hhih")
# (api key, version) -> request header version, filled as requests arrive
_HEADER_VERSIONS: dict[tuple[int, int], int] = {}
_i = struct.Struct(">i")


@dataclass(slots=True)
class RequestHeader:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None = None


def request_header_version(api_key: int, api_version: int) -> int:
    """1 or 2. Unknown api keys get 1, so the server can still read the correlation id."""
    cls: Any = REQUESTS.get(api_key)
    if cls is None or not cls.MIN_VERSION <= api_version <= cls.MAX_VERSION:
        # Outside the known range: fall back on the flexible threshold if we know it.
        if cls is not None and cls.FLEXIBLE_MIN is not None and api_version >= cls.FLEXIBLE_MIN:
            return 2
        return 1
    v: int = cls.header_version(api_version)
    return v


def parse_request_header(frame: memoryview | bytes) -> tuple[RequestHeader, int]:
    """Parse a request header (v1 or v2) from a frame without its size prefix.

    Returns the header and the offset of the body. Raises DecodeError on
    truncated or malformed headers.
    """
    buf = frame if isinstance(frame, memoryview) else memoryview(frame)
    try:
        api_key, api_version, correlation_id, n = _hhih.unpack_from(buf, 0)
        # client_id is a nullable *non-compact* string in both v1 and v2
        if 0 <= n <= len(buf) - 10:
            pos = 10 + n
            client_id: str | None = str(buf[10:pos], "utf-8")
        else:
            client_id, pos = read_nullable_string(buf, 8)
        hv = _HEADER_VERSIONS.get((api_key, api_version))
        if hv is None:
            hv = request_header_version(api_key, api_version)
            if api_key in REQUESTS and len(_HEADER_VERSIONS) < 4096:  # bounded: known keys only
                _HEADER_VERSIONS[(api_key, api_version)] = hv
        if hv >= 2:
            if pos < len(buf) and buf[pos] == 0:  # no tagged fields, the usual case
                pos += 1
            else:
                pos = skip_tagged_fields(buf, pos)
    except DecodeError:
        raise
    except DECODE_ERRORS as e:
        raise DecodeError(f"bad request header: {e!r}") from e
    return RequestHeader(api_key, api_version, correlation_id, client_id), pos


def encode_request(header: RequestHeader, request: Any) -> bytes:
    """Size-prefixed request frame (header v1/v2 per the request class). For tests and clients."""
    head = bytearray(_hhi.pack(header.api_key, header.api_version, header.correlation_id))
    head += write_nullable_string(header.client_id)
    if request.header_version(header.api_version) >= 2:
        head.append(0)  # no tagged fields
    body = request.encode(header.api_version)
    return _i.pack(len(head) + len(body)) + bytes(head) + body


def encode_response(
    correlation_id: int, response: Any, api_version: int
) -> list[bytes | memoryview]:
    """Size prefix + response header (v0/v1 per the response class) + body parts.

    Large byte fields in the body stay separate parts (no join), ready for
    ``transport.writelines()``.
    """
    parts = response.encode_parts(api_version)
    head = _i.pack(correlation_id)
    if response.header_version(api_version) >= 1:
        head += uvarint(0)  # empty tagged fields
    size = len(head) + sum(len(p) for p in parts)
    return [_i.pack(size) + head, *parts]


class FrameDecoder:
    """Split a byte stream into frames (without their 4-byte size prefix).

    Sans-IO: call :meth:`feed` with whatever the socket delivered. A declared
    size above ``max_frame_size`` raises FrameTooLarge, a negative one
    DecodeError, both before anything is buffered for the frame; the buffer
    only ever holds bytes actually received.
    """

    def __init__(self, max_frame_size: int = DEFAULT_MAX_FRAME_SIZE) -> None:
        self.max_frame_size = max_frame_size
        self._buf = bytearray()
        self._need = -1  # size of the frame being read, -1 while reading a size

    @property
    def buffered(self) -> int:
        """Bytes received but not yet returned as frames."""
        return len(self._buf)

    def feed(self, data: bytes | bytearray | memoryview) -> list[memoryview]:
        self._buf += data
        frames: list[memoryview] = []
        buf = self._buf
        pos = 0
        end = len(buf)
        while True:
            if self._need < 0:
                if end - pos < 4:
                    break
                (size,) = _i.unpack_from(buf, pos)
                if size < 0:
                    raise DecodeError(f"negative frame size {size}")
                if size > self.max_frame_size:
                    raise FrameTooLarge(
                        f"frame of {size} bytes exceeds the maximum of {self.max_frame_size}"
                    )
                pos += 4
                self._need = size
            if end - pos < self._need:
                break
            # one copy out, so the frame stays valid after the buffer is compacted
            with memoryview(buf) as mv:
                frames.append(memoryview(mv[pos : pos + self._need].tobytes()))
            pos += self._need
            self._need = -1
        if pos:
            del buf[:pos]
        return frames
