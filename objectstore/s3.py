"""S3 object store (``s3://bucket/prefix?endpoint=...&region=...``) on aioboto3.

The production backend: the uploader PUTs segments here with
``If-None-Match: *`` (create-only; S3 answers 412 if the key exists), the fetch
cache issues ranged GETs, the compactor lists and batch-deletes. Works against
AWS S3, MinIO and moto (path-style addressing for the latter two).

One client is opened lazily and reused for the store's lifetime, with a bounded
connection pool (``max_connections``). botocore's own retries are switched off
(one attempt per call): retrying is :mod:`objectstore.retry`'s job, so backoff,
jitter and the lost-response check happen in one place and are testable.
Every botocore/aiohttp failure is mapped to :mod:`objectstore.errors`.
Credentials come from the standard AWS chain (env vars, profile, instance role)
unless ``access_key_id``/``secret_access_key`` are passed explicitly.
"""

from __future__ import annotations

import asyncio
import builtins
from collections.abc import AsyncIterator, Sequence
from contextlib import AsyncExitStack
from typing import Any

import aioboto3
import aiohttp
import botocore.exceptions as bexc
from botocore.config import Config

from objectstore.base import ObjectInfo, StoreBase, check_key, check_range
from objectstore.errors import (
    ObjectExists,
    ObjectNotFound,
    ObjectStoreError,
    PermanentError,
    Throttled,
    TransientError,
)

DELETE_CHUNK = 1000  # S3 DeleteObjects limit

_THROTTLE_CODES = {
    "SlowDown",
    "Throttling",
    "ThrottlingException",
    "RequestLimitExceeded",
    "TooManyRequests",
}
_TRANSIENT_CODES = {
    "InternalError",
    "ServiceUnavailable",
    "RequestTimeout",
    "RequestTimeTooSkewed",
    "OperationAborted",
    "ConditionalRequestConflict",
}
_NETWORK_ERRORS: tuple[type[BaseException], ...] = (
    bexc.ConnectionError,  # EndpointConnectionError, ConnectTimeoutError, ReadTimeoutError, ...
    bexc.HTTPClientError,
    bexc.IncompleteReadError,
    bexc.ResponseStreamingError,
    aiohttp.ClientError,
    TimeoutError,
    ConnectionError,
)


def map_client_error(e: Exception, key: str | None) -> ObjectStoreError:
    """Translate a botocore/aiohttp exception into our error types."""
    if isinstance(e, bexc.ClientError):
        err = e.response.get("Error", {})
        code = str(err.get("Code", ""))
        status = int(e.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) or 0)
        msg = f"{code or status}: {err.get('Message', e)} ({key})"
        if code in _THROTTLE_CODES or status == 429:
            return Throttled(msg, key=key)
        if code == "PreconditionFailed" or status == 412:
            return ObjectExists(msg, key=key)
        if code in ("NoSuchKey", "NotFound") or (status == 404 and code != "NoSuchBucket"):
            return ObjectNotFound(msg, key=key)
        if code in _TRANSIENT_CODES or status >= 500 or status == 409:
            return TransientError(msg, key=key)
        return PermanentError(msg, key=key)
    if isinstance(e, _NETWORK_ERRORS):
        return TransientError(f"{type(e).__name__}: {e} ({key})", key=key)
    return PermanentError(f"{type(e).__name__}: {e} ({key})", key=key)


class S3Store(StoreBase):
    """Objects under ``s3://bucket/prefix``; keys are relative to ``prefix``."""

    def __init__(
        self,
        bucket: str,
        prefix: str = "",
        *,
        endpoint: str | None = None,
        region: str | None = None,
        path_style: bool | None = None,
        max_connections: int = 32,
        connect_timeout: float = 5.0,
        read_timeout: float = 30.0,
        access_key_id: str | None = None,
        secret_access_key: str | None = None,
        session_token: str | None = None,
        checksums: bool = True,
    ) -> None:
        self.bucket = bucket
        self.prefix = prefix.strip("/") + "/" if prefix.strip("/") else ""
        self.endpoint = endpoint
        if path_style is None:
            path_style = endpoint is not None  # MinIO/moto rarely have wildcard DNS
        self._session = aioboto3.Session(
            aws_access_key_id=access_key_id,
            aws_secret_access_key=secret_access_key,
            aws_session_token=session_token,
            region_name=region,
        )
        self.config = Config(
            region_name=region,
            max_pool_connections=max_connections,
            connect_timeout=connect_timeout,
            read_timeout=read_timeout,
            retries={"total_max_attempts": 1, "mode": "standard"},
            s3={"addressing_style": "path" if path_style else "auto"},
            request_checksum_calculation="when_supported" if checksums else "when_required",
            response_checksum_validation="when_supported" if checksums else "when_required",
        )
        self._stack: AsyncExitStack | None = None
        self._client: Any = None
        self._presign_client: Any = None
        self._lock = asyncio.Lock()
        self._closed = False

    def __repr__(self) -> str:
        return f"S3Store(s3://{self.bucket}/{self.prefix}, endpoint={self.endpoint!r})"

    async def client(self) -> Any:
        """The shared aiobotocore client, created on first use."""
        if self._client is not None:
            return self._client
        async with self._lock:
            if self._closed:
                raise PermanentError("store is closed")
            if self._client is None:
                stack = AsyncExitStack()
                self._client = await stack.enter_async_context(
                    self._session.client("s3", endpoint_url=self.endpoint, config=self.config)
                )
                self._stack = stack
        return self._client

    async def close(self) -> None:
        async with self._lock:
            self._closed = True
            stack, self._stack, self._client = self._stack, None, None
            self._presign_client = None
        if stack is not None:
            await stack.aclose()

    def _full(self, key: str) -> str:
        return self.prefix + check_key(key)

    async def presign_get(
        self, key: str, expires_s: int, byte_range: tuple[int, int] | None = None
    ) -> str:
        """A URL that GETs ``key`` without credentials until it expires: the whole object,
        or with ``byte_range`` only ``Range: bytes=start-(end-1)``, sent exactly so.

        Always SigV4 (``s3v4``): botocore may presign with SigV2 for custom
        endpoints, and SigV2 does not sign the Range header."""
        client = await self._presigner()
        params: dict[str, Any] = {"Bucket": self.bucket, "Key": self._full(key)}
        if byte_range is not None:
            from objectstore.byte_grants import range_header

            params["Range"] = range_header(*byte_range)
        url: str = await client.generate_presigned_url(
            "get_object", Params=params, ExpiresIn=max(1, min(int(expires_s), 7 * 24 * 3600))
        )
        return url

    async def presign_ranges(
        self, key: str, expires_s: int, ranges: Sequence[tuple[int, int]]
    ) -> list[str]:
        """:meth:`presign_get` of each byte range of ``key``: botocore signs the first,
        :class:`objectstore.sigv4.RangeSigner` the others with the same date and
        scope (~0.4 ms less each; a read plan may grant many runs)."""
        from objectstore.byte_grants import range_header
        from objectstore.sigv4 import RangeSigner

        if not ranges:
            return []
        first = await self.presign_get(key, expires_s, ranges[0])
        signer: RangeSigner | None = None
        creds = await self._session.get_credentials()
        if creds is not None and len(ranges) > 1:
            frozen = await creds.get_frozen_credentials()
            # Only with the very key botocore signed with (credentials may rotate).
            if f"Credential={frozen.access_key}%2F" in first:
                signer = RangeSigner(first, frozen.secret_key)
        out = [first]
        for r in ranges[1:]:
            out.append(
                signer.url(range_header(*r))
                if signer is not None
                else await self.presign_get(key, expires_s, r)
            )
        return out

    async def _presigner(self) -> Any:
        """A second client, SigV4 forced, used only to presign (no requests are sent)."""
        if self._presign_client is None:
            await self.client()  # opens the exit stack (and fails the same way when closed)
            async with self._lock:
                if self._presign_client is None and self._stack is not None:
                    cfg = self.config.merge(Config(signature_version="s3v4"))
                    self._presign_client = await self._stack.enter_async_context(
                        self._session.client("s3", endpoint_url=self.endpoint, config=cfg)
                    )
        if self._presign_client is None:
            raise PermanentError("store is closed")
        return self._presign_client

    async def put(self, key: str, data: bytes | memoryview) -> None:
        full = self._full(key)
        body = data if isinstance(data, bytes) else bytes(data)
        client = await self.client()
        try:
            await client.put_object(Bucket=self.bucket, Key=full, Body=body, IfNoneMatch="*")
        except Exception as e:
            raise map_client_error(e, key) from e

    async def get(self, key: str, start: int | None = None, end: int | None = None) -> bytes:
        lo, hi = check_range(start, end)
        full = self._full(key)
        if hi is not None and hi == lo:
            await self.head(key)  # still report a missing key
            return b""
        kwargs: dict[str, Any] = {"Bucket": self.bucket, "Key": full}
        if lo or hi is not None:
            kwargs["Range"] = f"bytes={lo}-{'' if hi is None else hi - 1}"
        client = await self.client()
        try:
            resp = await client.get_object(**kwargs)
            async with resp["Body"] as stream:
                data: bytes = await stream.read()
        except bexc.ClientError as e:
            if e.response.get("Error", {}).get("Code") == "InvalidRange":
                return b""  # start at/after the end of the object (S3 416)
            raise map_client_error(e, key) from e
        except Exception as e:
            raise map_client_error(e, key) from e
        expected = resp.get("ContentLength")
        if expected is not None and len(data) != expected:
            raise TransientError(f"truncated body for {key}: {len(data)} of {expected}", key=key)
        return data

    async def head(self, key: str) -> ObjectInfo:
        full = self._full(key)
        client = await self.client()
        try:
            resp = await client.head_object(Bucket=self.bucket, Key=full)
        except Exception as e:
            raise map_client_error(e, key) from e
        return ObjectInfo(
            key, int(resp["ContentLength"]), resp["LastModified"], _etag(resp.get("ETag"))
        )

    async def delete_many(self, keys: Sequence[str]) -> None:
        fulls = [self._full(k) for k in keys]
        client = await self.client()
        for i in range(0, len(fulls), DELETE_CHUNK):
            chunk = fulls[i : i + DELETE_CHUNK]
            try:
                resp = await client.delete_objects(
                    Bucket=self.bucket,
                    Delete={"Objects": [{"Key": k} for k in chunk], "Quiet": True},
                )
            except Exception as e:
                raise map_client_error(e, chunk[0][len(self.prefix) :]) from e
            errors = [err for err in resp.get("Errors", []) if err.get("Code") != "NoSuchKey"]
            if errors:
                first = errors[0]
                fake = bexc.ClientError({"Error": first}, "DeleteObjects")
                raise map_client_error(fake, str(first.get("Key", ""))[len(self.prefix) :])

    async def list(
        self, prefix: str = "", *, start_after: str | None = None
    ) -> AsyncIterator[ObjectInfo]:
        client = await self.client()
        kwargs: dict[str, Any] = {"Bucket": self.bucket, "Prefix": self.prefix + prefix}
        if start_after is not None:
            kwargs["StartAfter"] = self.prefix + start_after
        n = len(self.prefix)
        pages = client.get_paginator("list_objects_v2").paginate(**kwargs)
        try:
            async for page in pages:
                for obj in page.get("Contents", []):
                    yield ObjectInfo(
                        obj["Key"][n:],
                        int(obj["Size"]),
                        obj["LastModified"],
                        _etag(obj.get("ETag")),
                    )
        except ObjectStoreError:
            raise
        except Exception as e:
            raise map_client_error(e, prefix) from e

    async def delete_prefix(self, prefix: str = "") -> None:
        """Delete everything under ``prefix`` (tests and tooling)."""
        keys: builtins.list[str] = [info.key async for info in self.list(prefix)]
        await self.delete_many(keys)


def _etag(raw: str | None) -> str | None:
    return raw.strip('"') if raw else None
