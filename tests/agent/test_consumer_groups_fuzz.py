"""Fuzz of the KIP-848 request types: ConsumerGroupHeartbeat and ConsumerGroupDescribe.

Random sequences of heartbeats (garbage ids, empty/huge/negative epochs, unknown
and huge owned-partition lists, bad regexes, unknown assignors, static leaves,
joins and leaves of well-behaved members) and describes, through the real
handlers on a Broker over SQLite with a ManualClock that jumps past session
timeouts. The handlers must never raise; every answer carries a Kafka error code
from the set the spec lists; and after every step the coordinator's invariant
holds: no partition is in two members' current assignments (assigned or
pending revocation). Random bytes fed to the decoders raise DecodeError only.
"""

from __future__ import annotations

import asyncio
import tempfile
import uuid
from types import SimpleNamespace
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent.broker import Broker
from agent.clock import ManualClock
from agent.config import AgentConfig
from agent.handlers.consumer_group_describe import handle as describe
from agent.handlers.consumer_group_heartbeat import handle as heartbeat
from kafka_protocol.errors import ErrorCode as E
from kafka_protocol.exceptions import DecodeError
from kafka_protocol.framing import RequestHeader
from kafka_protocol.messages import ConsumerGroupDescribeRequest, ConsumerGroupHeartbeatRequest
from metastore import open_metastore
from objectstore import open_object_store

HB = ConsumerGroupHeartbeatRequest
ALLOWED = {
    E.NONE, E.INVALID_REQUEST, E.UNKNOWN_MEMBER_ID, E.FENCED_MEMBER_EPOCH, E.UNSUPPORTED_ASSIGNOR,
    E.UNRELEASED_INSTANCE_ID, E.GROUP_MAX_SIZE_REACHED, E.INVALID_REGULAR_EXPRESSION, E.GROUP_ID_NOT_FOUND,
    E.INVALID_GROUP_ID, E.NOT_COORDINATOR, E.COORDINATOR_NOT_AVAILABLE,
}  # fmt: skip
GROUPS = ["g", "h", "", "x" * 300]
MEMBERS = ["m1", "m2", "m3", "", " ", "x" * 300]
text = st.text(max_size=40)
epoch = st.one_of(st.sampled_from([-3, -2, -1, 0, 1, 2, 3, 2**31 - 1, -(2**31)]), st.integers(-(2**31), 2**31 - 1))
garbage_hb = st.builds(
    lambda g, m, e, inst, rt, names, regex, assignor, owned, ver: (ver, HB(
        group_id=g, member_id=m, member_epoch=e, instance_id=inst, rebalance_timeout_ms=rt,
        subscribed_topic_names=names, subscribed_topic_regex=regex, server_assignor=assignor,
        topic_partitions=owned)),
    st.sampled_from(GROUPS), st.sampled_from(MEMBERS), epoch,
    st.one_of(st.none(), st.sampled_from(["i1", "i2", ""])), st.integers(-(2**31), 2**31 - 1),
    st.one_of(st.none(), st.lists(st.sampled_from(["a", "b", "zz", "", "__internal"]), max_size=5)),
    st.one_of(st.none(), st.sampled_from(["a|b", "(", "(a)\\1", ".*", "", "[z-a]"]), text),
    st.one_of(st.none(), st.sampled_from(["uniform", "range", "sticky", ""])),
    st.one_of(st.none(), st.lists(st.builds(
        lambda t, ps: HB.TopicPartitions(topic_id=t, partitions=ps),
        st.sampled_from([uuid.UUID(int=0), uuid.UUID(int=7)]), st.lists(st.integers(-5, 10), max_size=8)), max_size=4)),
    st.sampled_from([0, 1]),
)  # fmt: skip
ops = st.lists(
    st.one_of(
        st.tuples(st.just("garbage"), garbage_hb),
        st.tuples(st.just("member"), st.sampled_from(["m1", "m2", "m3"]), st.sampled_from(["beat", "join", "leave", "static"])),
        st.tuples(st.just("describe"), st.lists(st.sampled_from(GROUPS), max_size=3)),
        st.tuples(st.just("clock"), st.sampled_from([0.5, 3.0, 50.0])),
        st.tuples(st.just("huge"),),
    ),
    max_size=30,
)


def assert_no_partition_in_two_members(broker: Broker) -> None:
    """The coordinator's invariant: no partition is owned by two members of a group."""
    for g in list(broker.consumer_groups._groups.values()):
        seen: set[tuple[uuid.UUID, int]] = set()
        for m in g.members.values():
            mine = {(t, p) for t, ps in m.owned().items() for p in ps}
            assert not (seen & mine), f"partition in two members of {g.group_id}"
            seen |= mine


async def _run(sequence: list[Any], db: str) -> None:
    meta = await open_metastore(f"sqlite:///{db}")
    for name, n in (("a", 4), ("b", 3)):
        await meta.create_topic(name, n)
    clock = ManualClock()
    config = AgentConfig(metastore="sqlite:///:memory:", objects="memory://", consumer_group_session_timeout_ms=10_000)
    broker = Broker(config, meta, open_object_store("memory://", retry=False), clock=clock)
    broker.start(ticker=False)
    state: dict[str, tuple[int, dict[uuid.UUID, list[int]]]] = {}  # well-behaved members: epoch, owned

    async def call(fn: Any, req: Any, version: int) -> Any:
        ctx = SimpleNamespace(header=RequestHeader(68, version, 1, "fuzz"), client_id="fuzz", client_host="127.0.0.1")
        return await fn(broker, ctx, req)

    def invariant() -> None:
        assert_no_partition_in_two_members(broker)

    try:
        for op in sequence:
            if op[0] == "garbage":
                version, req = op[1]
                resp = await call(heartbeat, req, version)
                assert resp.error_code in ALLOWED, resp
            elif op[0] == "member":
                mid, what = op[1], op[2]
                ep, owned = state.get(mid, (0, {}))
                tps = [HB.TopicPartitions(topic_id=t, partitions=ps) for t, ps in owned.items()]
                if what == "join" or mid not in state:
                    req = HB(group_id="g", member_id=mid, member_epoch=0, rebalance_timeout_ms=5000,
                             subscribed_topic_names=["a", "b"], instance_id="i-" + mid if mid == "m3" else None)  # fmt: skip
                elif what == "leave":
                    req = HB(group_id="g", member_id=mid, member_epoch=-1)
                elif what == "static":
                    req = HB(group_id="g", member_id=mid, member_epoch=-2, instance_id="i-" + mid)
                else:
                    req = HB(group_id="g", member_id=mid, member_epoch=ep, topic_partitions=tps)
                resp = await call(heartbeat, req, 1)
                assert resp.error_code in ALLOWED, resp
                if resp.error_code == E.NONE and req.member_epoch >= 0:
                    new_owned = owned if resp.assignment is None else {
                        t.topic_id: list(t.partitions) for t in resp.assignment.topic_partitions}  # fmt: skip
                    state[mid] = (resp.member_epoch, new_owned)
                else:
                    state.pop(mid, None)
            elif op[0] == "describe":
                resp = await call(describe, ConsumerGroupDescribeRequest(group_ids=op[1]), 1)
                assert len(resp.groups) == len(op[1])
                assert all(g.error_code in ALLOWED for g in resp.groups)
            elif op[0] == "clock":
                clock.advance(op[1])
                broker.consumer_groups.timers.run_due()
                await asyncio.sleep(0)
            else:  # a huge owned list
                parts = [HB.TopicPartitions(topic_id=uuid.uuid4(), partitions=list(range(200_000))) for _ in range(6)]
                resp = await call(heartbeat, HB(group_id="g", member_id="m1", member_epoch=1, topic_partitions=parts), 1)
                assert resp.error_code in (E.INVALID_REQUEST,)
            invariant()
    finally:
        await broker.close()
        await meta.close()


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops)
def test_consumer_group_requests_fuzz(sequence: list[Any]) -> None:
    with tempfile.TemporaryDirectory() as d:
        asyncio.run(_run(sequence, f"{d}/meta.db"))


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=300), st.sampled_from([0, 1]))
def test_decoders_raise_decode_error_only(data: bytes, version: int) -> None:
    for cls in (ConsumerGroupHeartbeatRequest, ConsumerGroupDescribeRequest):
        try:
            cls.decode(data, version)
        except DecodeError:
            pass
