"""The Spark source reading from S3 (moto's server): segments and Parquet, with and without a JVM."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import pytest

from objectstore.parquet import kafka_schema
from spark_source.reader import Storage
from spark_source.source import FloeBatchReader
from tests.spark_source.helpers import compact, seed, seed_async
from tests.spark_source.test_spark import reader, rows
from tests.spark_source.test_unit import opts, read_all

pytestmark = pytest.mark.s3


def boto(url: str) -> Any:
    import boto3

    q = dict(parse_qsl(urlsplit(url).query))
    return boto3.client("s3", endpoint_url=q["endpoint"], region_name=q["region"])


def s3_keys(url: str) -> list[str]:
    """Every key in the URL's bucket (full keys, prefix included)."""
    client = boto(url)
    try:
        pages = client.get_paginator("list_objects_v2").paginate(Bucket=urlsplit(url).netloc)
        return sorted(o["Key"] for page in pages for o in page.get("Contents", []))
    finally:
        client.close()


def test_storage_reads_objectstore_key_layout(s3_url: str, tmp_path: Path) -> None:
    """Keys written by objectstore.s3 (``prefix/key``) are what the reader reads."""
    s = seed(tmp_path, segments=2, objects=s3_url)
    assert s.objects == s3_url
    keys = s3_keys(s3_url)
    assert keys and all(k.startswith("prefix/") for k in keys), keys
    assert not (tmp_path / "objects").exists()  # nothing went to local files
    bucket = urlsplit(s3_url).netloc
    client = boto(s3_url)
    try:
        body = client.get_object(Bucket=bucket, Key=keys[0])["Body"].read()
        client.put_object(Bucket=bucket, Key="at-root", Body=b"0123456789")
    finally:
        client.close()
    st = Storage(s3_url)  # credentials from the environment (dummy values of the fixture)
    key = keys[0].removeprefix("prefix/")
    assert st.read_range(key, 0, len(body)) == body
    assert st.read_range(key, 3, 10) == body[3:13]
    # No prefix (bucket root), trailing slash on the endpoint, credentials in the URL.
    root = s3_url.replace("/prefix?", "?").replace("&region", "/&region")
    root += "&access_key_id=testing&secret_access_key=testing&session_token=testing"
    assert Storage(root).read_range("at-root", 2, 5) == b"23456"


def test_batch_read_segments_and_parquet_from_s3(s3_url: str, tmp_path: Path) -> None:
    s = seed(
        tmp_path,
        topics={"t": 2, "u": 1},
        segments=6,
        config={"t": {"floe.parquet.enable": "true"}},
        objects=s3_url,
    )
    got, batches = read_all(FloeBatchReader(opts(s, includeHeaders="true")))
    assert got == s.expected("t")
    assert batches and all(b.schema == kafka_schema() for b in batches)

    # Compact part of it into Parquet, then add more segments: a mixed plan.
    summary = compact(s)
    assert summary.phases["parquet"].committed == 2
    assert any(k.endswith(".parquet") for k in s3_keys(s3_url))
    asyncio.run(seed_async(tmp_path, segments=4, start_segment=6, existing=s))
    r = FloeBatchReader(opts(s, includeHeaders="true", startingOffsets='{"t": {"0": 3, "1": 0}}'))
    parts = r.partitions()
    kinds = {type(sp).__name__ for p in parts for t in p.tasks for sp in t.spans}
    assert kinds == {"SegmentSpan", "ParquetSpan"}
    got, batches = read_all(r, parts)
    assert got == [x for x in s.expected("t") if x[1] == 1 or x[2] >= 3]
    assert all(b.schema == kafka_schema() for b in batches)


@pytest.mark.slow
def test_spark_read_from_s3(spark: Any, s3_url: str, tmp_path: Path) -> None:
    # Credentials go in the URL: the shared SparkSession may have been started (by an
    # earlier test) before moto_server put the dummy AWS_* values in os.environ, and
    # executor Python workers inherit the JVM's environment from its launch, not ours.
    url = s3_url + "&access_key_id=testing&secret_access_key=testing&session_token=testing"
    s = seed(tmp_path, topics={"t": 2}, segments=6, objects=url)
    df = reader(spark, s, includeHeaders="true")
    assert rows(df) == s.expected("t")
