"""Fuzz of the fetch-session protocol surface (KIP-227) against a model.

Random sequences of full requests (epoch 0, with or without a session id to
replace), incremental requests with right and wrong epochs and unknown ids,
closes (epoch -1), partitions added, moved and forgotten (known and unknown
topics and partitions), across versions 7-18 by name and by id, interleaved
with real produces through the agent's pipeline. The handler must never raise;
top-level errors must be exactly the model's; a session's response may only
name its partitions and must name every one whose state changed since it was
last reported (new records or watermark) or that is in error.
"""

from __future__ import annotations

import asyncio
import tempfile
import uuid
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent.broker import Broker
from agent.clock import ManualClock
from agent.config import AgentConfig
from agent.handlers.fetch import handle
from agent.produce import ProduceItem
from agent.security.principal import ANONYMOUS
from kafka_protocol.framing import RequestHeader
from kafka_protocol.messages import FetchRequest
from kafka_protocol.records import RecordBatchBuilder
from metastore import open_metastore
from objectstore import open_object_store
from objectstore.segment import BatchMeta

FT = FetchRequest.FetchTopic
FP = FetchRequest.FetchTopic.FetchPartition
FG = FetchRequest.ForgottenTopic
TOPICS = {"a": 3, "b": 2}  # name -> partitions; "zz" and partition 9 are unknown
NAMES = ["a", "b", "zz"]

ops = st.lists(
    st.one_of(
        st.tuples(st.just("produce"), st.sampled_from(["a", "b"]), st.integers(0, 2)),
        st.tuples(
            st.just("full"),
            st.lists(st.tuples(st.sampled_from(NAMES), st.sampled_from([0, 1, 2, 9])), max_size=6),
            st.booleans(),  # replace the last session (id with epoch 0)
            st.sampled_from([7, 11, 12, 13, 18]),
        ),
        st.tuples(
            st.just("inc"),
            st.lists(st.tuples(st.sampled_from(NAMES), st.sampled_from([0, 1, 2, 9])), max_size=3),
            st.lists(st.tuples(st.sampled_from(NAMES), st.sampled_from([0, 1, 2, 9])), max_size=2),
            st.sampled_from(["right", "wrong", "unknown"]),
            st.booleans(),  # move offsets of added partitions to the model's high watermark
        ),
        st.tuples(st.just("close"),),
    ),
    min_size=1,
    max_size=18,
)


@dataclass
class ModelSession:
    id: int
    epoch: int
    version: int
    parts: dict[tuple[str, int], dict[str, int]] = field(default_factory=dict)


def _batch(n: int) -> bytes:
    b = RecordBatchBuilder()
    for i in range(n):
        b.append(None, f"v{i}".encode())
    return b.build()


async def _run(sequence: list[Any], db: str) -> None:
    meta = await open_metastore(f"sqlite:///{db}")
    ids = {}
    for name, n in TOPICS.items():
        res = await meta.create_topic(name, n)
        assert res.topic is not None
        ids[name] = res.topic.id
    ids["zz"] = uuid.uuid4()
    config = AgentConfig(metastore="sqlite:///:memory:", objects="memory://", fetch_session_cache_slots=3)
    broker = Broker(config, meta, open_object_store("memory://", retry=False), clock=ManualClock())
    broker.start(ticker=False)
    hwm: dict[tuple[str, int], int] = {(t, p): 0 for t, n in TOPICS.items() for p in range(n)}
    session: ModelSession | None = None

    async def call(req: FetchRequest, version: int) -> Any:
        conn = SimpleNamespace(principal=ANONYMOUS)  # a connection without limits or TLS
        ctx = SimpleNamespace(
            header=RequestHeader(1, version, 1, "fuzz"), client_id="fuzz", conn=conn,
            principal=ANONYMOUS, client_host="127.0.0.1",
        )  # fmt: skip
        out = await handle(broker, ctx, req)  # type: ignore[arg-type]
        return await out.awaitable if hasattr(out, "awaitable") else out

    def request(version: int, sid: int, epoch: int, parts: list[tuple[str, int, int]],
                forget: list[tuple[str, int]] = ()) -> FetchRequest:  # type: ignore[assignment]
        by_id = version >= 13
        topics: dict[str, FT] = {}
        for name, p, off in parts:
            t = topics.setdefault(name, FT(topic="" if by_id else name, topic_id=ids[name] if by_id else uuid.UUID(int=0)))
            t.partitions.append(FP(partition=p, fetch_offset=off, partition_max_bytes=1 << 20))
        forgotten: dict[str, FG] = {}
        for name, p in forget:
            forgotten.setdefault(
                name, FG(topic="" if by_id else name, topic_id=ids[name] if by_id else uuid.UUID(int=0))
            ).partitions.append(p)
        return FetchRequest(max_wait_ms=0, min_bytes=1, max_bytes=64 << 20, session_id=sid, session_epoch=epoch,
                            topics=list(topics.values()), forgotten_topics_data=list(forgotten.values()))

    def name_of(t: Any, version: int) -> str:
        if version >= 13:
            return next(n for n, i in ids.items() if i == t.topic_id)
        return str(t.topic)

    def check(resp: Any, s: ModelSession, full: bool) -> None:
        assert resp.error_code == 0 and resp.session_id == s.id
        seen = {}
        for t in resp.responses:
            for p in t.partitions:
                key = (name_of(t, s.version), p.partition_index)
                assert key in s.parts, f"{key} is not in the session"
                seen[key] = p
        for key, st_ in s.parts.items():
            known = key in hwm
            must = full or not known or hwm[key] != st_["sent"] or st_["offset"] < hwm.get(key, 0)
            if must:
                assert key in seen, f"{key} changed but was not answered"
            if key in seen:
                p = seen[key]
                if known and st_["offset"] <= hwm[key]:
                    assert p.error_code == 0 and p.high_watermark == hwm[key]
                    st_["sent"] = hwm[key]
                else:
                    assert p.error_code != 0

    try:
        for op in sequence:
            kind = op[0]
            if kind == "produce":
                _, t, p = op
                if p >= TOPICS[t]:
                    continue
                data = _batch(2)
                await broker.pipeline.reserve(len(data))
                fut = broker.pipeline.append([ProduceItem(ids[t], p, data, BatchMeta.from_record_batch(data))], len(data))
                broker.pipeline.seal()
                (res,) = await asyncio.wait_for(fut, 10)
                assert res.error == 0
                hwm[(t, p)] += 2
            elif kind == "full":
                _, parts, replace, version = op
                uniq = list(dict.fromkeys(parts))
                sid = session.id if (replace and session is not None) else 0
                resp = await call(request(version, sid, 0, [(t, p, 0) for t, p in uniq]), version)
                assert resp.error_code == 0
                if resp.session_id == 0:  # cache full: sessionless answer
                    session = None
                    continue
                session = ModelSession(resp.session_id, 1, version,
                                       {k: {"offset": 0, "sent": -2} for k in uniq})
                check(resp, session, full=True)
            elif kind == "inc":
                _, adds, forgets, how, move = op
                if session is None:
                    resp = await call(request(12, 12345, 1, []), 12)
                    assert resp.error_code == 70
                    continue
                if how == "unknown":
                    resp = await call(request(session.version, session.id ^ 0x5A5A, session.epoch, []), session.version)
                    assert resp.error_code in (70, 71) or resp.session_id != session.id
                    continue
                epoch = session.epoch if how == "right" else session.epoch + 7
                adds = list(dict.fromkeys(adds))
                parts = [(t, p, hwm.get((t, p), 0) if move else 0) for t, p in adds]
                resp = await call(request(session.version, session.id, epoch, parts, forgets), session.version)
                if how == "wrong":
                    assert resp.error_code == 71
                    continue
                session.epoch += 1
                for t, p, off in parts:
                    # new partitions are answered (nothing sent yet); moved ones only if changed
                    session.parts.setdefault((t, p), {"offset": off, "sent": -2})["offset"] = off
                for key in forgets:
                    session.parts.pop(key, None)
                check(resp, session, full=False)
            else:  # close
                if session is not None:
                    resp = await call(request(session.version, session.id, -1, []), session.version)
                    assert resp.error_code == 0 and resp.session_id == 0
                    again = await call(request(session.version, session.id, session.epoch, []), session.version)
                    assert again.error_code == 70
                    session = None
    finally:
        await broker.close()


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops)
def test_fetch_session_protocol_fuzz(sequence: list[Any]) -> None:
    with tempfile.TemporaryDirectory() as d:  # a file: concurrent lookups need a pool
        asyncio.run(_run(sequence, f"{d}/meta.db"))
