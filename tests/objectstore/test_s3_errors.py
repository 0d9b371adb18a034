"""S3 error translation: botocore/aiohttp failures become typed ObjectStore errors."""

from __future__ import annotations

import asyncio

import botocore.exceptions as bexc
import pytest

from objectstore import (
    ObjectExists,
    ObjectNotFound,
    ObjectStoreError,
    PermanentError,
    Throttled,
    TransientError,
    open_object_store,
)
from objectstore.s3 import map_client_error


def client_error(code: str, status: int) -> bexc.ClientError:
    return bexc.ClientError(
        {"Error": {"Code": code, "Message": "m"}, "ResponseMetadata": {"HTTPStatusCode": status}},
        "Op",
    )


@pytest.mark.parametrize(
    ("exc", "expected"),
    [
        (client_error("SlowDown", 503), Throttled),
        (client_error("TooManyRequests", 429), Throttled),
        (client_error("", 429), Throttled),
        (client_error("ServiceUnavailable", 503), TransientError),
        (client_error("InternalError", 500), TransientError),
        (client_error("", 502), TransientError),
        (client_error("RequestTimeout", 400), TransientError),
        (client_error("ConditionalRequestConflict", 409), TransientError),
        (client_error("PreconditionFailed", 412), ObjectExists),
        (client_error("NoSuchKey", 404), ObjectNotFound),
        (client_error("404", 404), ObjectNotFound),
        (client_error("NoSuchBucket", 404), PermanentError),
        (client_error("AccessDenied", 403), PermanentError),
        (client_error("InvalidArgument", 400), PermanentError),
        (bexc.EndpointConnectionError(endpoint_url="http://x"), TransientError),
        (bexc.ReadTimeoutError(endpoint_url="http://x"), TransientError),
        (bexc.ConnectTimeoutError(endpoint_url="http://x"), TransientError),
        (TimeoutError(), TransientError),
        (ConnectionResetError(), TransientError),
        (RuntimeError("?"), PermanentError),
    ],
)
def test_error_mapping(exc: Exception, expected: type[ObjectStoreError]) -> None:
    err = map_client_error(exc, "k")
    assert type(err) is expected
    assert err.key == "k"
    assert err.retriable == (expected in (Throttled, TransientError))


async def test_unreachable_endpoint_is_transient() -> None:
    # Port 9 (discard) on localhost: connection refused, quickly.
    url = "s3://bucket/p?endpoint=http://127.0.0.1:9&region=us-east-1&connect_timeout=1"
    async with open_object_store(
        url, retry=False, access_key_id="x", secret_access_key="y"
    ) as store:
        with pytest.raises(TransientError):
            await store.get("k")


@pytest.mark.s3
async def test_missing_bucket_is_permanent(moto_server: str) -> None:
    url = f"s3://no-such-bucket-here/p?endpoint={moto_server}&region=us-east-1"
    async with open_object_store(url, retry=False) as store:
        with pytest.raises(PermanentError):
            await store.put("k", b"x")
        with pytest.raises(PermanentError):
            [i async for i in store.list()]


@pytest.mark.s3
async def test_s3_store_reuses_one_client(s3_url: str) -> None:
    async with open_object_store(s3_url, retry=False) as store:
        first = await store.client()  # type: ignore[attr-defined]
        await asyncio.gather(*(store.put(f"k{i}", b"x") for i in range(10)))
        assert await store.client() is first  # type: ignore[attr-defined]
    with pytest.raises(PermanentError):
        await store.put("after-close", b"x")
