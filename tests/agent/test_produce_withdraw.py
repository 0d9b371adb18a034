"""Withdrawing a closed connection's uncommitted batches (issue 43): a client that
gave up on a Produce (its deadline passed, it disconnected) and re-sends it under a
new epoch must find one copy in the log, not two; acknowledged and acks=0 batches
are never withdrawn.
"""

from __future__ import annotations

import asyncio
import socket
import time
from pathlib import Path
from typing import Any

import pytest

from agent.clock import ManualClock
from agent.metrics import METRICS
from agent.produce.autobatch import ProduceFlow
from kafka_protocol.framing import RequestHeader, encode_request
from kafka_protocol.messages import ProduceRequest
from metastore import ErrorCode
from objectstore import open_object_store
from tests.agent.test_fetch_protocol import make_topic, raw_call
from tests.agent.test_produce_abort import (
    NOT_PERSISTED,
    PT,
    GatedMeta,
    StallingStore,
    _batch,
    _item,
    _pipeline,
    meta,  # noqa: F401 (fixture)
)


def _withdrawn() -> float:
    return METRICS.produce_aborted.labels("client_gone")._value.get()


async def test_a_closed_connections_batches_are_left_out_of_the_commit(meta: Any) -> None:  # noqa: F811
    topic = (await meta.create_topic("t", 1)).topic
    store = StallingStore(open_object_store("memory://", retry=False))
    p = _pipeline(store, meta, ManualClock(), abort_ms=0)
    gone, stays = ProduceFlow(), ProduceFlow()
    store.running.clear()
    a1, b1, a2 = _batch(seq=0, pid=7, tag="a"), _batch(tag="b"), _batch(seq=3, pid=7, tag="a")
    await p.reserve(len(a1) + len(b1) + len(a2))
    fa1 = p.append([_item(topic.id, a1)], len(a1), gone, withdrawable=True)
    fb1 = p.append([_item(topic.id, b1)], len(b1), stays, withdrawable=True)
    p.seal()  # a sealed segment whose PUT hangs ...
    fa2 = p.append([_item(topic.id, a2)], len(a2), gone, withdrawable=True)
    before = _withdrawn()
    assert p.withdraw(gone) == 2  # ... and the open one
    assert _withdrawn() == before + 2
    assert [r.error for r in await fa1] == [NOT_PERSISTED]
    assert [r.error for r in await fa2] == [NOT_PERSISTED]
    assert not fb1.done()
    # The producer's later batches are fenced until sequence 0 comes back.
    assert p.admission.fenced([_item(topic.id, _batch(seq=6, pid=7))]) == [0]
    store.running.set()  # the store recovers: the other connection's batch is committed
    assert [(r.error, r.base_offset) for r in await asyncio.wait_for(fb1, 10)] == [(ErrorCode.NONE, 0)]
    await p.drain()
    found = await meta.find_batches(topic.id, 0, 0, 1 << 20)
    assert found.high_watermark == 3 and len(found.batches) == 1  # b1 only, at offset 0
    # The client's retry (sequence 0 again) is a new batch, stored once.
    again = p.append([_item(topic.id, a1)], len(a1), stays, withdrawable=True)
    p.seal()
    assert [(r.error, r.base_offset) for r in await asyncio.wait_for(again, 10)] == [(ErrorCode.NONE, 3)]
    await p.close()


async def test_acks_0_and_started_commits_are_never_withdrawn(meta: Any) -> None:  # noqa: F811
    topic = (await meta.create_topic("t", 1)).topic
    gated = GatedMeta(meta)
    p = _pipeline(open_object_store("memory://", retry=False), gated, ManualClock(), abort_ms=0)
    conn = ProduceFlow()
    x, y = _batch(tag="x"), _batch(tag="y")
    await p.reserve(len(x) + len(y))
    committing = p.append([_item(topic.id, x)], len(x), conn, withdrawable=True)
    p.seal()
    await asyncio.wait_for(gated.entered.wait(), 5)  # its commit has started
    no_ack = p.append([_item(topic.id, y)], len(y), conn)  # acks=0
    assert p.withdraw(conn) == 0
    gated.gate.set()
    assert [r.error for r in await asyncio.wait_for(committing, 10)] == [ErrorCode.NONE]
    p.seal()
    assert [r.base_offset for r in await asyncio.wait_for(no_ack, 10)] == [3]
    await p.close()


# -- a real agent ---------------------------------------------------------------------


def _send_and_close(agent: Any, req: ProduceRequest) -> None:
    """Send ``req`` and close the connection once the agent holds it in its pipeline."""
    held = agent.broker.pipeline.budget.used
    with socket.create_connection(("127.0.0.1", agent.port), timeout=10) as s:
        s.sendall(encode_request(RequestHeader(req.API_KEY, 9, 7, "gives-up"), req))
        deadline = time.monotonic() + 10
        while agent.broker.pipeline.budget.used == held:
            assert time.monotonic() < deadline, "the request never reached the pipeline"
            time.sleep(0.01)


def _produce(topic: str, data: bytes, acks: int = -1) -> ProduceRequest:
    return ProduceRequest(
        acks=acks, timeout_ms=30_000,
        topic_data=[PT(name=topic, partition_data=[PT.PartitionProduceData(index=0, records=data)])],
    )  # fmt: skip


@pytest.mark.interop
def test_a_client_that_disconnects_during_a_stall_leaves_nothing_behind(
    agent_factory: Any, tmp_path: Path
) -> None:
    stall, objects = tmp_path / "stall", tmp_path / "objects"
    objects.mkdir()
    agent = agent_factory(objects=f"file://{objects}?latency_stall_file={stall}", produce_abort_ms=0)
    topic_id = make_topic(agent, "gone")
    stall.touch()
    before = _withdrawn()
    _send_and_close(agent, _produce("gone", _batch(tag="given-up")))
    _send_and_close(agent, _produce("gone", _batch(tag="fire-and-forget"), acks=0))
    deadline = time.monotonic() + 10
    while _withdrawn() == before:  # the agent saw the connection close
        assert time.monotonic() < deadline, "nothing was withdrawn"
        time.sleep(0.02)
    stall.unlink()  # the store recovers and the stalled segments commit
    agent.call(agent.broker.pipeline.drain())
    pr = raw_call(agent, _produce("gone", _batch(tag="kept")), 9).responses[0].partition_responses[0]
    assert (pr.error_code, pr.base_offset) == (0, 3)  # only the acks=0 batch before it

    async def stored() -> int:
        found = await agent.broker.meta.find_batches(topic_id, 0, 0, 1 << 20)
        return len(found.batches)

    assert agent.call(stored()) == 2  # fire-and-forget and kept; given-up is not stored
    assert _withdrawn() == before + 1

