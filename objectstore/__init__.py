"""Floe object storage: the ``ObjectStore`` protocol, its backends and the segment format.

Entry point for every component that touches object bytes (agent uploader and
fetch cache, compactor, Spark source, CLI tools)::

    store = open_object_store("s3://bucket/floe?endpoint=http://127.0.0.1:9000")
    async with store:
        await store.put("segments/0001", data)

Backends are chosen by URL scheme from a registry (``register_scheme`` adds
one): ``memory://[name]``, ``file:///abs/dir``, ``s3://bucket/prefix?...``.
Any of them takes ``latency=s3-standard|s3-express|none`` (and ``latency_*``
overrides) to simulate S3's request latency in benchmarks
(:mod:`objectstore.latency`). By default the store is wrapped in
:class:`~objectstore.retry.RetryingStore` (``retry=False`` gives the raw
backend, ``retry=RetryPolicy(...)`` tunes it).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

from objectstore.base import ObjectInfo, ObjectStore, store_chain
from objectstore.errors import (
    ObjectExists,
    ObjectNotFound,
    ObjectStoreError,
    PermanentError,
    SegmentFormatError,
    Throttled,
    TransientError,
)
from objectstore.latency import LatencyStore, parse_latency, split_latency_url
from objectstore.retry import RetryingStore, RetryPolicy
from objectstore.segment import BatchMeta, SegmentBuilder, SegmentEntry
from objectstore.segment_index import iter_segment, parse_footer, read_index

__all__ = [
    "BatchMeta",
    "LatencyStore",
    "ObjectExists",
    "ObjectInfo",
    "ObjectNotFound",
    "ObjectStore",
    "ObjectStoreError",
    "PermanentError",
    "RetryPolicy",
    "RetryingStore",
    "SegmentBuilder",
    "SegmentEntry",
    "SegmentFormatError",
    "Throttled",
    "TransientError",
    "iter_segment",
    "open_object_store",
    "parse_footer",
    "presign_get",
    "presign_ranges",
    "public_url",
    "read_index",
    "register_scheme",
]

Opener = Callable[[str, dict[str, Any]], ObjectStore]
_REGISTRY: dict[str, Opener] = {}


def register_scheme(scheme: str, opener: Opener) -> None:
    """Register ``opener(url, opts)`` for URLs starting with ``scheme://``."""
    _REGISTRY[scheme.lower()] = opener


def open_object_store(url: str, *, retry: bool | RetryPolicy = True, **opts: Any) -> ObjectStore:
    """Open the store named by ``url``; ``opts`` override URL query options.

    ``retry``: True wraps the store with the default :class:`RetryPolicy`, a
    policy instance customises it, False returns the bare backend (still with
    the simulated latency if the URL asks for one). ``hedge=on`` (and
    ``hedge_*``) puts :class:`~objectstore.hedge.HedgingStore` under the retries.
    """
    from objectstore.hedge import HedgingStore, parse_hedge, split_hedge_url

    scheme = urlsplit(url).scheme.lower()
    try:
        opener = _REGISTRY[scheme]
    except KeyError:
        known = ", ".join(sorted(f"{s}://" for s in _REGISTRY))
        raise ValueError(f"unsupported object store URL {url!r} (known: {known})") from None
    # Latency options are ours, not the backend's (S3Store would reject them):
    # parse them first so a bad profile fails before any client is built.
    opts = dict(opts)
    url, latency_opts = split_latency_url(url, opts)
    url, hedge_opts = split_hedge_url(url, opts)
    profile, seed = parse_latency(latency_opts)
    hedge = parse_hedge(hedge_opts)
    store = opener(url, opts)
    if not profile.is_zero:
        store = LatencyStore(store, profile, seed=seed)
    if hedge is not None:  # under retries: a hedge answers a slow attempt, a retry a failed one
        store = HedgingStore(store, hedge)
    if retry is False:
        return store
    return RetryingStore(store, RetryPolicy() if retry is True else retry)


async def presign_get(
    store: ObjectStore, key: str, expires_s: int, byte_range: tuple[int, int] | None = None
) -> str | None:
    """A credential-free GET URL for ``key`` if the backend can issue one (S3), else None.

    With ``byte_range`` ``(start, end)`` the URL signs ``Range: bytes=start-(end-1)``
    and is good for exactly those bytes (:mod:`objectstore.byte_grants`); without
    it, for the whole object (only ever for an object the reader may read whole).
    Looks through wrappers (retries, fault injection) for a backend with
    ``presign_get``."""
    for inner in store_chain(store):
        fn = getattr(inner, "presign_get", None)
        if fn is not None:
            url: str = await fn(key, expires_s, byte_range)
            return url
    return None


async def presign_ranges(
    store: ObjectStore, key: str, expires_s: int, ranges: Sequence[tuple[int, int]]
) -> list[str] | None:
    """:func:`presign_get` of each byte range of ``key`` (backends may batch the
    signing), or None if the store cannot presign."""
    for inner in store_chain(store):
        many = getattr(inner, "presign_ranges", None)
        if many is not None:
            urls: list[str] = await many(key, expires_s, ranges)
            return urls
        if getattr(inner, "presign_get", None) is not None:
            out = []
            for r in ranges:
                url = await presign_get(inner, key, expires_s, r)
                if url is None:
                    return None
                out.append(url)
            return out
    return None


def public_url(url: str) -> str:
    """``url`` without credentials in its query (what may be shown to readers)."""
    parts = urlsplit(url)
    secret = {"access_key_id", "secret_access_key", "session_token"}
    query = [(k, v) for k, v in parse_qsl(parts.query) if k not in secret]
    from urllib.parse import urlencode, urlunsplit

    return urlunsplit(parts._replace(query=urlencode(query)))


def _bool(v: Any) -> bool:
    if isinstance(v, bool):
        return v
    return str(v).lower() in ("1", "true", "yes", "on")


def _open_memory(url: str, opts: dict[str, Any]) -> ObjectStore:
    from objectstore.memory import MemoryStore

    parts = urlsplit(url)
    name = (parts.netloc + parts.path).strip("/")
    return MemoryStore(name or None)


def _open_file(url: str, opts: dict[str, Any]) -> ObjectStore:
    from objectstore.local import LocalStore

    parts = urlsplit(url)
    path = unquote(parts.path)
    if parts.netloc and parts.netloc != "localhost":
        path = parts.netloc + path  # file://relative/dir: tolerated, relative to cwd
    if not path:
        raise ValueError(f"file store URL needs a directory: {url!r}")
    query = dict(parse_qsl(parts.query))
    fsync = _bool(opts.pop("fsync", query.get("fsync", True)))
    return LocalStore(path, fsync=fsync)


_S3_INT = {"max_connections"}
_S3_FLOAT = {"connect_timeout", "read_timeout"}
_S3_BOOL = {"path_style", "checksums"}


def _open_s3(url: str, opts: dict[str, Any]) -> ObjectStore:
    from objectstore.s3 import S3Store

    parts = urlsplit(url)
    if not parts.netloc:
        raise ValueError(f"s3 URL needs a bucket: {url!r}")
    query: dict[str, Any] = dict(parse_qsl(parts.query))
    query.update(opts)
    for k in _S3_INT & query.keys():
        query[k] = int(query[k])
    for k in _S3_FLOAT & query.keys():
        query[k] = float(query[k])
    for k in _S3_BOOL & query.keys():
        query[k] = _bool(query[k])
    return S3Store(parts.netloc, unquote(parts.path), **query)


register_scheme("memory", _open_memory)
register_scheme("file", _open_file)
register_scheme("s3", _open_s3)
