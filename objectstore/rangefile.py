"""A read-only, seekable file over ranged reads, for pyarrow's Parquet reader.

Where it sits: executors of the Spark source read Parquet objects with ranged
GETs (S3, presigned URLs) and the agent reads them through its block cache;
both hand pyarrow a :class:`RangeFile` of the object's known size, so no
request ever asks for the size (no HEAD) and only the footer and the column
chunks a reader needs are fetched.
"""

from __future__ import annotations

import io
from collections.abc import Callable
from typing import Any


class RangeFile(io.RawIOBase):
    """A read-only, seekable file of known ``size`` over ranged reads (for pyarrow):
    the tail (Parquet footer) is read once, every other read is one ranged GET."""

    TAIL = 64 * 1024

    def __init__(self, read: Callable[[int, int], Any], size: int) -> None:
        self._read = read
        self._size = size
        self._pos = 0
        t0 = max(0, size - self.TAIL)
        self._tail_start = t0
        self._tail: Any = None

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, pos: int, whence: int = 0) -> int:
        base = {0: 0, 1: self._pos, 2: self._size}[whence]
        self._pos = max(0, base + pos)
        return self._pos

    def size(self) -> int:
        return self._size

    def read(self, n: int = -1) -> Any:  # bytes, or a memoryview (no copy)
        if n is None or n < 0:
            n = self._size - self._pos
        n = max(0, min(n, self._size - self._pos))
        if n == 0:
            return b""
        pos = self._pos
        if pos >= self._tail_start:
            if self._tail is None:
                self._tail = self._read(self._tail_start, self._size - self._tail_start)
            lo = pos - self._tail_start
            data = self._tail[lo : lo + n]
        else:
            data = self._read(pos, n)
        self._pos += len(data)
        return data

    def readinto(self, b: Any) -> int:
        data = self.read(len(b))
        b[: len(data)] = data
        return len(data)
