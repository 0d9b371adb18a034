"""The ``ObjectStore`` capability protocol shared by every backend.

Sits under everything that touches object bytes: the agent's uploader PUTs
finished segments through it, the fetch cache issues ranged GETs through it,
and the compactor lists, reads and deletes through it. Implementations:
:mod:`objectstore.memory`, :mod:`objectstore.local`, :mod:`objectstore.s3`;
wrappers: :mod:`objectstore.retry`, :mod:`objectstore.faults`.

Semantics every implementation follows (checked by one contract suite):

* ``put`` is create-only: an existing key raises :class:`ObjectExists` and the
  stored object is left untouched. Object keys are never overwritten in Floe.
* ``get(key, start, end)`` reads ``[start, end)``; ``None`` means the object's
  start/end. A range reaching past the end is clamped to the object (like S3);
  a range starting at or past the end returns ``b""``. ``start > end`` or a
  negative bound is a ``ValueError``.
* ``delete_many`` ignores keys that do not exist.
* ``list(prefix)`` yields objects in ascending UTF-8 byte order of their keys,
  optionally strictly after ``start_after`` (used to resume a listing).
"""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from types import TracebackType
from typing import Any, Protocol, Self, runtime_checkable
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from objectstore.errors import ObjectNotFound

MAX_KEY_BYTES = 1024  # S3's limit; enforced everywhere so stores stay interchangeable.


@dataclass(frozen=True, slots=True)
class ObjectInfo:
    """Metadata of one stored object. ``etag`` is backend-specific and may be None."""

    key: str
    size: int
    last_modified: datetime
    etag: str | None = None


@runtime_checkable
class ObjectStore(Protocol):
    """Create-only blob storage with ranged reads (see the module docstring)."""

    async def put(self, key: str, data: bytes | memoryview) -> None: ...

    async def get(self, key: str, start: int | None = None, end: int | None = None) -> bytes: ...

    async def head(self, key: str) -> ObjectInfo: ...

    async def delete_many(self, keys: Sequence[str]) -> None: ...

    def list(
        self, prefix: str = "", *, start_after: str | None = None
    ) -> AsyncIterator[ObjectInfo]: ...

    async def close(self) -> None: ...

    async def __aenter__(self) -> Self: ...

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None: ...


class StoreBase:
    """Shared plumbing: async context manager, key and range validation."""

    async def close(self) -> None:
        return None

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()


def check_key(key: str) -> str:
    """Reject keys no backend can store; returns the key for chaining."""
    if not isinstance(key, str) or not key:
        raise ValueError(f"object key must be a non-empty str, got {key!r}")
    if len(key.encode("utf-8", "surrogatepass")) > MAX_KEY_BYTES:
        raise ValueError(f"object key longer than {MAX_KEY_BYTES} bytes")
    try:
        key.encode("utf-8")
    except UnicodeEncodeError as e:
        raise ValueError("object key must be valid unicode (no lone surrogates)") from e
    if any(c < " " or c == "\x7f" for c in key):
        # S3 accepts them, but list responses are XML 1.0, which cannot carry them.
        raise ValueError(f"object key contains control characters: {key!r}")
    return key


def check_range(start: int | None, end: int | None) -> tuple[int, int | None]:
    """Normalise a ``[start, end)`` request; returns ``(start, end_or_None)``."""
    lo = 0 if start is None else start
    if lo < 0 or (end is not None and end < 0):
        raise ValueError(f"negative range bound: start={start} end={end}")
    if end is not None and end < lo:
        raise ValueError(f"range end {end} before start {lo}")
    return lo, end


def clamp_range(start: int, end: int | None, size: int) -> tuple[int, int]:
    """Clamp a normalised range to an object of ``size`` bytes (may become empty)."""
    hi = size if end is None else min(end, size)
    lo = min(start, size)
    return lo, max(lo, hi)


def key_sort(key: str) -> bytes:
    """Sort key giving S3's listing order (UTF-8 bytes, not code points)."""
    return key.encode("utf-8")


def split_url_options(url: str, name: str, opts: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
    """Remove the options ``name`` and ``name_*`` (a wrapper's, e.g. ``latency``,
    ``hedge``) from ``url``'s query and from ``opts`` (in place).

    Returns the URL the backend should see and the options found (``opts`` wins)."""

    def mine(key: str) -> bool:
        return key == name or key.startswith(name + "_")

    parts = urlsplit(url)
    query = parse_qsl(parts.query, keep_blank_values=True)
    found: dict[str, Any] = {k: v for k, v in query if mine(k)}
    if found:
        rest = [(k, v) for k, v in query if not mine(k)]
        url = urlunsplit(parts._replace(query=urlencode(rest, safe=":/")))
    for k in [k for k in (opts or {}) if mine(k)]:
        found[k] = (opts or {}).pop(k)
    return url, found


def store_chain(store: Any, depth: int = 8) -> Iterator[Any]:
    """``store`` and the stores it wraps (each wrapper names its store ``inner``)."""
    while store is not None and depth > 0:
        yield store
        store = getattr(store, "inner", None)
        depth -= 1


async def holds(store: ObjectStore, key: str, data: bytes | memoryview) -> bool:
    """Whether ``key`` in ``store`` holds exactly ``data``: after an ambiguous
    create-only PUT (a lost response, a hedged copy) ObjectExists may be our own."""
    try:
        info = await store.head(key)
    except ObjectNotFound:
        return False
    if info.size != memoryview(data).nbytes:
        return False
    if info.etag and info.etag == hashlib.md5(data, usedforsecurity=False).hexdigest():
        return True
    # No usable ETag (file store, SSE-KMS, multipart): compare the bytes.
    return await store.get(key) == data
