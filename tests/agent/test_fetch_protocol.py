"""Fetch at the wire level (our own codec as the client): errors per partition,
empty-not-null records, base offsets patched, byte budgets, topic ids, sessions,
long-poll wake-up and timeout."""

from __future__ import annotations

import socket
import struct
import threading
import time
import uuid
from typing import Any

import pytest

from kafka_protocol.framing import RequestHeader, encode_request
from kafka_protocol.messages import FetchRequest, FetchResponse, ProduceRequest, ProduceResponse
from kafka_protocol.records import RecordBatchBuilder, iter_batches

FT = FetchRequest.FetchTopic
FP = FetchRequest.FetchTopic.FetchPartition


def _recv_exact(s: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = s.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("closed")
        buf += chunk
    return bytes(buf)


def raw_call(agent: Any, request: Any, version: int, *, timeout: float = 15) -> Any:
    """Send one request on a fresh connection and decode the response."""
    with socket.create_connection(("127.0.0.1", agent.port), timeout=timeout) as s:
        s.settimeout(timeout)
        s.sendall(encode_request(RequestHeader(request.API_KEY, version, 42, "raw-test"), request))
        (size,) = struct.unpack(">i", _recv_exact(s, 4))
        body = _recv_exact(s, size)
    assert struct.unpack(">i", body[:4])[0] == 42
    resp_cls = type(request).__name__.replace("Request", "Response")
    import kafka_protocol.messages as m

    cls = getattr(m, resp_cls)
    at = 4
    if cls.header_version(version) >= 1:
        assert body[at] == 0  # no tagged fields in the response header
        at += 1
    return cls.decode(body[at:], version)


def make_topic(agent: Any, name: str, partitions: int = 1, config: dict[str, str] | None = None) -> uuid.UUID:
    async def create() -> uuid.UUID:
        res = await agent.broker.meta.create_topic(name, partitions, config or {})
        assert res.error == 0, res
        return res.topic.id

    return agent.call(create())


def produce_batch(agent: Any, topic: str, partition: int, n: int, tag: str = "r") -> int:
    """Produce one batch of ``n`` records (acks=1); return its base offset."""
    b = RecordBatchBuilder()
    for i in range(n):
        b.append(f"{tag}{i}".encode(), f"value-{tag}{i}".encode())
    PT = ProduceRequest.TopicProduceData
    req = ProduceRequest(
        acks=1, timeout_ms=10_000,
        topic_data=[PT(name=topic, partition_data=[PT.PartitionProduceData(index=partition, records=b.build())])],
    )
    resp: ProduceResponse = raw_call(agent, req, 7)
    pr = resp.responses[0].partition_responses[0]
    assert pr.error_code == 0, pr
    return pr.base_offset


def fetch(agent: Any, parts: list[tuple[str, int, int]], *, version: int = 11, max_wait_ms: int = 0,
          min_bytes: int = 1, max_bytes: int = 50 << 20, partition_max_bytes: int = 1 << 20,
          topic_ids: dict[str, uuid.UUID] | None = None, session_epoch: int = -1, timeout: float = 15,
          isolation_level: int = 0) -> FetchResponse:
    topics: dict[str, FT] = {}
    for name, p, off in parts:
        t = topics.setdefault(name, FT(topic=name, topic_id=(topic_ids or {}).get(name, uuid.UUID(int=0))))
        t.partitions.append(FP(partition=p, fetch_offset=off, partition_max_bytes=partition_max_bytes, current_leader_epoch=0))
    req = FetchRequest(
        replica_id=-1, max_wait_ms=max_wait_ms, min_bytes=min_bytes, max_bytes=max_bytes,
        isolation_level=isolation_level, session_id=0, session_epoch=session_epoch, topics=list(topics.values()),
    )
    return raw_call(agent, req, version, timeout=timeout)


def _offsets(records: bytes) -> list[int]:
    return [r.offset for v in iter_batches(records, validate=True) for r in v.records()]


@pytest.mark.parametrize("version", [4, 10, 11, 12, 15, 16, 17, 18])
def test_fetch_versions_patch_offsets(floe_agent, version):
    tid = make_topic(floe_agent, "fv")
    assert produce_batch(floe_agent, "fv", 0, 3, "a") == 0
    assert produce_batch(floe_agent, "fv", 0, 4, "b") == 3
    resp = fetch(floe_agent, [("fv", 0, 4)], version=version, topic_ids={"fv": tid})
    assert resp.error_code == 0 and resp.session_id == 0
    pd = resp.responses[0].partitions[0]
    assert pd.error_code == 0
    assert (pd.high_watermark, pd.last_stable_offset) == (7, 7)
    assert pd.log_start_offset == (0 if version >= 5 else -1)  # not on the wire before v5
    assert pd.preferred_read_replica == -1
    assert not pd.aborted_transactions
    # The whole batch holding offset 4 comes back; the client skips offset 3.
    assert _offsets(pd.records) == [3, 4, 5, 6]
    assert [v.partition_leader_epoch for v in iter_batches(pd.records)] == [0]
    if version >= 13:
        assert resp.responses[0].topic_id == tid


def test_partition_errors_and_empty_records(floe_agent):
    tid = make_topic(floe_agent, "fe", partitions=2)
    produce_batch(floe_agent, "fe", 0, 5)
    resp = fetch(floe_agent, [("fe", 0, 5), ("fe", 1, 0), ("fe", 0, 6), ("fe", 7, 0), ("nope", 0, 0)])
    by = [(t.topic, p.partition_index, p.error_code, p.records, p.high_watermark) for t in resp.responses for p in t.partitions]
    assert by == [
        ("fe", 0, 0, b"", 5),  # at the high watermark: empty, not null
        ("fe", 1, 0, b"", 0),
        ("fe", 0, 1, b"", -1),  # OFFSET_OUT_OF_RANGE
        ("fe", 7, 3, b"", -1),  # UNKNOWN_TOPIC_OR_PARTITION
        ("nope", 0, 3, b"", -1),
    ]
    # v13+: unknown topic id.
    resp = fetch(floe_agent, [("x", 0, 0), ("fe", 0, 0)], version=13, topic_ids={"x": uuid.uuid4(), "fe": tid})
    codes = [p.error_code for t in resp.responses for p in t.partitions]
    assert codes == [100, 0]


def test_incremental_fetch_of_an_unknown_session(floe_agent):
    make_topic(floe_agent, "fs")
    resp = fetch(floe_agent, [("fs", 0, 0)], session_epoch=3)
    assert resp.error_code == 70  # FETCH_SESSION_ID_NOT_FOUND (sessions: test_fetch_sessions.py)


def test_byte_budgets(floe_agent):
    make_topic(floe_agent, "fb", partitions=2)
    for _ in range(4):
        produce_batch(floe_agent, "fb", 0, 10)
        produce_batch(floe_agent, "fb", 1, 10)
    full = fetch(floe_agent, [("fb", 0, 0)])
    batch_size = len(full.responses[0].partitions[0].records) // 4
    # partition_max_bytes for two batches and a bit.
    r = fetch(floe_agent, [("fb", 0, 0), ("fb", 1, 0)], partition_max_bytes=2 * batch_size + 10)
    assert [len(_offsets(p.records)) for p in r.responses[0].partitions] == [20, 20]
    # max_bytes smaller than one batch: the first partition still gets one whole batch,
    # the second nothing (and no error).
    r = fetch(floe_agent, [("fb", 0, 0), ("fb", 1, 0)], max_bytes=10)
    assert [len(_offsets(p.records)) for p in r.responses[0].partitions] == [10, 0]
    assert [p.error_code for p in r.responses[0].partitions] == [0, 0]
    # max_bytes for three batches: two from the first partition, one from the second.
    r = fetch(floe_agent, [("fb", 0, 0), ("fb", 1, 0)], max_bytes=3 * batch_size, partition_max_bytes=2 * batch_size)
    assert [len(_offsets(p.records)) for p in r.responses[0].partitions] == [20, 10]


def test_long_poll_wakes_on_commit(floe_agent):
    make_topic(floe_agent, "lp")
    produce_batch(floe_agent, "lp", 0, 1)
    out: dict[str, Any] = {}

    def waiter() -> None:
        t0 = time.monotonic()
        out["resp"] = fetch(floe_agent, [("lp", 0, 1)], max_wait_ms=30_000, timeout=60)
        out["done"] = time.monotonic()
        out["t0"] = t0

    th = threading.Thread(target=waiter)
    th.start()
    # Wait (bounded) until the fetch is parked on the notifier before producing.
    deadline = time.monotonic() + 10
    while not floe_agent.broker.notifier._waiters and time.monotonic() < deadline:
        time.sleep(0.005)
    assert floe_agent.broker.notifier._waiters, "fetch never started waiting"
    produced_at = time.monotonic()
    produce_batch(floe_agent, "lp", 0, 2)
    th.join(60)
    assert not th.is_alive()
    pd = out["resp"].responses[0].partitions[0]
    assert _offsets(pd.records) == [1, 2]
    # woken by the commit, not by max_wait_ms (30 s): half of it leaves room for a slow flush
    assert out["done"] - produced_at < 15


def test_long_poll_times_out_with_empty_records(floe_agent):
    make_topic(floe_agent, "lt")
    t0 = time.monotonic()
    resp = fetch(floe_agent, [("lt", 0, 0)], max_wait_ms=300)
    took = time.monotonic() - t0
    pd = resp.responses[0].partitions[0]
    assert pd.error_code == 0 and pd.records == b"" and pd.high_watermark == 0
    assert 0.25 <= took < 5
    # min_bytes 0 answers at once.
    t0 = time.monotonic()
    fetch(floe_agent, [("lt", 0, 0)], max_wait_ms=30_000, min_bytes=0, timeout=60)
    assert time.monotonic() - t0 < 15  # not after max_wait_ms (30 s)
