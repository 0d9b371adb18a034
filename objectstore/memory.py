"""In-process object store (``memory://`` and ``memory://name``).

The default for unit tests and ``floe dev`` without a data directory. A named
store (``memory://shared``) is process-wide: every ``open_object_store`` of the
same name sees the same objects, so the agent and the compactor of one process
can share it. ``memory://`` with no name gives a private, empty store.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from objectstore.base import ObjectInfo, StoreBase, check_key, check_range, clamp_range
from objectstore.errors import ObjectExists, ObjectNotFound


@dataclass(frozen=True, slots=True)
class _Blob:
    data: bytes
    last_modified: datetime
    etag: str


class _Bucket:
    """The shared state behind one named memory store."""

    def __init__(self) -> None:
        self.objects: dict[str, _Blob] = {}


_NAMED: dict[str, _Bucket] = {}
_NAMED_LOCK = threading.Lock()


def reset_memory_stores() -> None:
    """Forget every named memory store (for tests)."""
    with _NAMED_LOCK:
        _NAMED.clear()


class MemoryStore(StoreBase):
    """Dict-backed store; all operations complete without yielding to the loop."""

    def __init__(self, name: str | None = None) -> None:
        self.name = name
        if name:
            with _NAMED_LOCK:
                self._bucket = _NAMED.setdefault(name, _Bucket())
        else:
            self._bucket = _Bucket()

    def __repr__(self) -> str:
        return f"MemoryStore({self.name!r})"

    async def put(self, key: str, data: bytes | memoryview) -> None:
        check_key(key)
        objects = self._bucket.objects
        if key in objects:
            raise ObjectExists(f"object exists: {key}", key=key)
        blob = bytes(data)  # copy: the caller may reuse its buffer
        etag = hashlib.md5(blob, usedforsecurity=False).hexdigest()
        objects[key] = _Blob(blob, datetime.now(UTC), etag)

    async def get(self, key: str, start: int | None = None, end: int | None = None) -> bytes:
        lo, hi = check_range(start, end)
        blob = self._blob(key)
        a, b = clamp_range(lo, hi, len(blob.data))
        if a == 0 and b == len(blob.data):
            return blob.data
        return blob.data[a:b]

    async def head(self, key: str) -> ObjectInfo:
        blob = self._blob(key)
        return ObjectInfo(key, len(blob.data), blob.last_modified, blob.etag)

    async def delete_many(self, keys: Sequence[str]) -> None:
        objects = self._bucket.objects
        for key in keys:
            objects.pop(key, None)

    async def list(
        self, prefix: str = "", *, start_after: str | None = None
    ) -> AsyncIterator[ObjectInfo]:
        # Snapshot first: callers may put/delete while iterating.
        items = self._bucket.objects.items()
        snapshot = sorted(((k, v) for k, v in items if k.startswith(prefix)), key=lambda kv: kv[0])
        for key, blob in snapshot:
            if start_after is not None and key <= start_after:
                continue
            yield ObjectInfo(key, len(blob.data), blob.last_modified, blob.etag)

    def _blob(self, key: str) -> _Blob:
        check_key(key)
        try:
            return self._bucket.objects[key]
        except KeyError:
            raise ObjectNotFound(f"no such object: {key}", key=key) from None
