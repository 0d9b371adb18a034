"""Local-directory object store (``file:///abs/dir``).

Used by ``floe dev`` and single-node deployments: the agent's uploader writes
segments here and the fetch path reads byte ranges back. Blocking file calls run
in the default thread pool so the event loop keeps serving Kafka connections.

Durability and create-only semantics: data goes to a hidden temp file in the
target directory, is fsynced, then ``os.link``-ed to its final name. ``link``
fails with ``EEXIST`` if the key exists, so two writers can never overwrite each
other, and readers never see a partial object. The directory is fsynced after
the link so the name survives a crash.

Key → path mapping: ``/`` separates directories; each segment is
percent-encoded with ``.`` also escaped, so encoded names never contain a dot.
Objects get a ``.obj`` suffix and temp files start with ``.tmp-``: a key ``a``
(file ``a.obj``) and a key ``a/b`` (directory ``a``) coexist, ``..`` cannot
escape the root, and temp files are never listed. An empty segment (``a//b``,
trailing ``/``) is stored as ``%`` (a string ``quote`` never produces).
"""

from __future__ import annotations

import asyncio
import builtins
import errno
import os
import uuid
from collections.abc import AsyncIterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import quote, unquote

from objectstore.base import ObjectInfo, StoreBase, check_key, check_range, clamp_range
from objectstore.errors import (
    ObjectExists,
    ObjectNotFound,
    ObjectStoreError,
    PermanentError,
    TransientError,
)

_SUFFIX = ".obj"
_MAX_NAME = 255


def _encode_segment(seg: str) -> str:
    if not seg:
        return "%"
    enc = quote(seg, safe="").replace(".", "%2E")
    if len(enc) + len(_SUFFIX) > _MAX_NAME:
        raise ValueError(f"key segment too long for a file name: {seg[:40]!r}...")
    return enc


def _decode_segment(name: str) -> str:
    return "" if name == "%" else unquote(name)


def key_path(root: str | os.PathLike[str], key: str) -> Path:
    """The file under ``root`` that holds ``key`` in a local store (it may not exist).

    Pure (no I/O): readers that open files themselves (the Spark source's
    executors) use it to find an object without instantiating a store.
    """
    parts = [_encode_segment(s) for s in check_key(key).split("/")]
    return Path(root).joinpath(*parts[:-1], parts[-1] + _SUFFIX)


class LocalStore(StoreBase):
    """Objects as files under ``root`` (created if missing)."""

    def __init__(self, root: str | os.PathLike[str], *, fsync: bool = True) -> None:
        self.root = Path(root).absolute()
        self.fsync = fsync
        self.root.mkdir(parents=True, exist_ok=True)

    def __repr__(self) -> str:
        return f"LocalStore({str(self.root)!r})"

    def path_for(self, key: str) -> Path:
        """The file that holds ``key`` (it may not exist)."""
        return key_path(self.root, key)

    async def put(self, key: str, data: bytes | memoryview) -> None:
        path = self.path_for(key)
        await asyncio.to_thread(self._put_sync, key, path, data)

    def _put_sync(self, key: str, path: Path, data: bytes | memoryview) -> None:
        try:
            if path.exists():  # cheap early exit; link() below is the real check
                raise ObjectExists(f"object exists: {key}", key=key)
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.parent / f".tmp-{uuid.uuid4().hex}"
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            try:
                try:
                    view = memoryview(data)
                    while view:
                        n = os.write(fd, view)
                        view = view[n:]
                    if self.fsync:
                        os.fsync(fd)
                finally:
                    os.close(fd)
                try:
                    os.link(tmp, path)
                except FileExistsError:
                    raise ObjectExists(f"object exists: {key}", key=key) from None
            finally:
                os.unlink(tmp)
            if self.fsync:
                self._fsync_dir(path.parent)
        except ObjectStoreError:
            raise
        except OSError as e:
            raise _map_os_error(e, key) from e

    @staticmethod
    def _fsync_dir(path: Path) -> None:
        dfd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)

    async def get(self, key: str, start: int | None = None, end: int | None = None) -> bytes:
        lo, hi = check_range(start, end)
        path = self.path_for(key)
        return await asyncio.to_thread(self._get_sync, key, path, lo, hi)

    def _get_sync(self, key: str, path: Path, lo: int, hi: int | None) -> bytes:
        try:
            fd = os.open(path, os.O_RDONLY)
        except FileNotFoundError:
            raise ObjectNotFound(f"no such object: {key}", key=key) from None
        except OSError as e:
            raise _map_os_error(e, key) from e
        try:
            a, b = clamp_range(lo, hi, os.fstat(fd).st_size)
            chunks = []
            while a < b:  # pread is one syscall and no extra copy; loop on short reads
                chunk = os.pread(fd, b - a, a)
                if not chunk:  # a file never shrinks once linked in
                    raise TransientError(f"short read of {key} at {a}", key=key)
                chunks.append(chunk)
                a += len(chunk)
            return chunks[0] if len(chunks) == 1 else b"".join(chunks)
        except OSError as e:
            raise _map_os_error(e, key) from e
        finally:
            os.close(fd)

    async def head(self, key: str) -> ObjectInfo:
        path = self.path_for(key)
        try:
            st = await asyncio.to_thread(os.stat, path)
        except FileNotFoundError:
            raise ObjectNotFound(f"no such object: {key}", key=key) from None
        except OSError as e:
            raise _map_os_error(e, key) from e
        return ObjectInfo(key, st.st_size, datetime.fromtimestamp(st.st_mtime, UTC))

    async def delete_many(self, keys: Sequence[str]) -> None:
        paths = [self.path_for(k) for k in keys]
        await asyncio.to_thread(self._delete_sync, paths)

    @staticmethod
    def _delete_sync(paths: builtins.list[Path]) -> None:
        # Empty directories are left behind on purpose: removing them would race
        # with a concurrent put that just created the directory.
        for p in paths:
            try:
                os.unlink(p)
            except FileNotFoundError:
                pass
            except OSError as e:
                raise _map_os_error(e, str(p)) from e

    async def list(
        self, prefix: str = "", *, start_after: str | None = None
    ) -> AsyncIterator[ObjectInfo]:
        infos = await asyncio.to_thread(self._list_sync, prefix, start_after)
        for info in infos:
            yield info

    def _list_sync(self, prefix: str, start_after: str | None) -> builtins.list[ObjectInfo]:
        # Descend only into the directory the prefix pins down, then filter.
        dir_parts = prefix.split("/")[:-1]
        base = self.root.joinpath(*(_encode_segment(s) for s in dir_parts))
        out: builtins.list[ObjectInfo] = []
        for dirpath, _dirs, files in os.walk(base):
            rel = Path(dirpath).relative_to(self.root).parts
            key_dir = [_decode_segment(p) for p in rel]
            for name in files:
                if not name.endswith(_SUFFIX) or name.startswith("."):
                    continue
                key = "/".join([*key_dir, _decode_segment(name[: -len(_SUFFIX)])])
                if not key.startswith(prefix) or (start_after is not None and key <= start_after):
                    continue
                try:
                    st = os.stat(os.path.join(dirpath, name))
                except FileNotFoundError:
                    continue  # deleted while listing
                out.append(ObjectInfo(key, st.st_size, datetime.fromtimestamp(st.st_mtime, UTC)))
        out.sort(key=lambda i: i.key)
        return out


def _map_os_error(e: OSError, key: str) -> ObjectStoreError:
    if e.errno in (errno.EAGAIN, errno.EINTR, errno.EIO, errno.EBUSY):
        return TransientError(f"{key}: {e}", key=key)
    return PermanentError(f"{key}: {e}", key=key)
