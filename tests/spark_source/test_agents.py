"""Bootstrap-only reads: ``kafka.bootstrap.servers`` alone, the driver planning through
the agents' planning API (agent/planning.py), executors reading object storage (file
store; S3 through presigned URLs, with no credentials at all)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest

from spark_source import reader as reader_mod
from spark_source.options import OptionError, parse_options
from spark_source.source import FloeBatchReader, FloeStreamReader
from tests.compactor.test_agent_e2e import create_topic
from tests.spark_source.test_unit import read_all

N = 300


def produce(bootstrap: str, topic: str, parts: int = 3) -> list[tuple[Any, ...]]:
    from confluent_kafka import Producer

    create_topic(bootstrap, topic, parts)
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "compression.type": "lz4"})
    base = int(time.time() * 1000) - 60_000
    sent = []
    for i in range(N):
        part, key, value, ts = i % parts, b"k%d" % i, b"v%d" % i * (1 + i % 5), base + i * 10
        p.produce(topic, value, key=key, partition=part, timestamp=ts)
        sent.append((part, key, value, ts))
        if i % 50 == 49:
            p.flush(30)  # several batches per partition
    assert p.flush(30) == 0
    return sent


def test_bootstrap_only_batch_and_stream_through_agent(
    agent_factory: Callable[..., Any],
) -> None:
    agent = agent_factory(flush_interval_ms=5)
    sent = produce(agent.bootstrap, "events")
    o = parse_options(
        {"kafka.bootstrap.servers": agent.bootstrap, "subscribe": "events"}, streaming=False
    )
    assert not o.direct
    got, _ = read_all(FloeBatchReader(o))
    assert len(got) == N
    by_part: dict[int, list[Any]] = {}
    for r in got:
        by_part.setdefault(r[1], []).append(r)
    for part, recs in by_part.items():
        exp = [x for x in sent if x[0] == part]
        assert [(r[3], r[4], r[5]) for r in recs] == [(k, v, ts) for _, k, v, ts in exp]
    # The plan's objects are under a read lease in the metastore, owned by the job.
    leases = agent.call(agent.broker.meta.list_read_leases())
    assert leases and all(x.owner == "floe-spark" and x.objects > 0 for x in leases)
    # Timestamps resolve to the exact record through the agent.
    cut = sorted(x[3] for x in sent)[N // 2] + 5
    o = parse_options(
        {
            "kafka.bootstrap.servers": agent.bootstrap,
            "subscribe": "events",
            "startingTimestamp": str(cut),
        },
        streaming=False,
    )
    got, _ = read_all(FloeBatchReader(o))
    assert sorted(r[5] for r in got) == sorted(x[3] for x in sent if x[3] >= cut)
    # Streaming: micro-batch leases are held until commit, then released.
    so = parse_options(
        {
            "kafka.bootstrap.servers": agent.bootstrap,
            "subscribe": "events",
            "startingOffsets": "earliest",
            "kafka.group.id": "stream-1",
        },
        streaming=True,
    )
    sr = FloeStreamReader(so)
    start = sr.initialOffset()
    end = sr.latestOffset(start, sr.getDefaultReadLimit())
    parts = sr.partitions(start, end)
    held = {x.lease_id for x in agent.call(agent.broker.meta.list_read_leases())}
    assert any(x.startswith("spark-stream-") for x in held)
    rows, _ = read_all(sr, parts)
    assert len(rows) == N
    sr.commit(end)
    sr.stop()
    after = {x.lease_id for x in agent.call(agent.broker.meta.list_read_leases())}
    assert not any(x.startswith("spark-stream-") for x in after)


def test_bootstrap_errors_are_clear(agent_factory: Callable[..., Any]) -> None:
    agent = agent_factory()
    o = parse_options({"kafka.bootstrap.servers": "127.0.0.1:1", "subscribe": "x"}, streaming=False)
    o = type(o)(**{**o.__dict__, "fetch_offset_retries": 0})
    with pytest.raises(Exception, match="no bootstrap server reachable"):
        FloeBatchReader(o).partitions()
    # An agent answers; an empty, missing topic gives one empty partition.
    o = parse_options(
        {"kafka.bootstrap.servers": agent.bootstrap, "subscribe": "nothing-here"}, streaming=False
    )
    assert [p.tasks for p in FloeBatchReader(o).partitions()] == [()]
    o = parse_options(
        {
            "kafka.bootstrap.servers": agent.bootstrap,
            "subscribe": "nothing-here",
            "startingOffsets": '{"other": {"0": 1}}',
        },
        streaming=False,
    )
    with pytest.raises(OptionError, match="specify all TopicPartitions"):
        FloeBatchReader(o).partitions()


@pytest.mark.s3
def test_s3_presigned_reads_need_no_credentials(
    agent_factory: Callable[..., Any], s3_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    agent = agent_factory(objects=s3_url, flush_interval_ms=5)
    sent = produce(agent.bootstrap, "s3events", parts=2)
    o = parse_options(
        {"kafka.bootstrap.servers": agent.bootstrap, "subscribe": "s3events"}, streaming=False
    )
    r = FloeBatchReader(o)
    parts = r.partitions()
    refs = [ref for p in parts for ref in p.refs.values()]
    # Segment objects come as signed byte runs (issue 42), never as whole-object URLs.
    assert refs and all(ref.ranges and not ref.url and ref.size > 0 for ref in refs)
    assert all("Signature" in u for ref in refs for _, _, u in ref.ranges)
    assert all(p.objects and "secret" not in p.objects for p in parts)
    # Executors: no AWS credentials, and no S3 client may be created.
    for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(k, raising=False)

    def no_client(self: Any) -> Any:
        raise AssertionError("executors must read through the presigned URLs")

    monkeypatch.setattr(reader_mod.Storage, "_s3", no_client)
    got, _ = read_all(r, parts)
    assert sorted((r[1], r[3], r[4]) for r in got) == sorted((p, k, v) for p, k, v, _ in sent)
