"""Typed failures of the sans-IO Kafka codec.

Every way that untrusted bytes can be wrong ends in one of these, so a server
can answer with an error code or close the connection instead of crashing.
"""

from __future__ import annotations


class ProtocolError(Exception):
    """Base class of everything the codec raises on bad input."""


class DecodeError(ProtocolError, ValueError):
    """The bytes do not form a valid message: truncated, bad length, bad varint, ..."""


class FrameTooLarge(DecodeError):
    """A size prefix is above the configured maximum (``socket.request.max.bytes``)."""


class UnsupportedVersion(ProtocolError):
    """The API key or version is not one the codec knows."""


class CorruptRecordError(DecodeError):
    """A record batch is malformed: bad CRC, bad magic, bad record framing."""


class UnsupportedMagic(CorruptRecordError):
    """A message set with magic 0 or 1 (pre-0.11 format), which Floe does not store."""


class DecompressionError(CorruptRecordError):
    """Compressed records failed to decompress or exceeded the size cap."""
