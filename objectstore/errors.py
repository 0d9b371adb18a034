"""Typed errors of the object store layer.

Every store implementation (memory, file, S3) translates its native failures
into these classes at its boundary (``raise ... from e``), so the uploader,
the fetch cache and the compactor decide what to do from the type alone:
``retriable`` errors go through :mod:`objectstore.retry`, the others surface.
Segment decoding errors live here too so callers import one module.
"""

from __future__ import annotations

from typing import ClassVar


class ObjectStoreError(Exception):
    """Base of every object store failure."""

    retriable: ClassVar[bool] = False

    def __init__(self, message: str, *, key: str | None = None) -> None:
        super().__init__(message)
        self.key = key


class ObjectNotFound(ObjectStoreError):
    """The key does not exist (GET/HEAD of a missing object)."""


class ObjectExists(ObjectStoreError):
    """A create-only PUT found the key already present (S3 412 PreconditionFailed)."""


class Throttled(ObjectStoreError):
    """The service asked us to slow down (S3 503 SlowDown, HTTP 429)."""

    retriable = True


class TransientError(ObjectStoreError):
    """5xx, timeouts, dropped connections: the request may or may not have happened."""

    retriable = True


class PermanentError(ObjectStoreError):
    """Anything retrying cannot fix: bad credentials, missing bucket, invalid request."""


class SegmentFormatError(ValueError):
    """Bytes read back do not form a valid segment (bad magic, CRC, lengths)."""
