"""Transaction APIs on the wire (raw requests against a real agent): produce
verification, fencing codes, timeout aborts, Describe/List transactions,
DescribeProducers, read_committed Fetch answers, and a hypothesis fuzz of the
new handlers (any sampled request gets a response; the agent keeps serving)."""

from __future__ import annotations

import random
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent.clock import ManualClock
from kafka_protocol import messages as M
from kafka_protocol.codegen.samples import Sampler
from kafka_protocol.codegen.schema import load_message
from kafka_protocol.errors import ErrorCode
from kafka_protocol.records import RecordBatchBuilder
from tests.interop._raw import RawConn

pytestmark = pytest.mark.interop

APT = M.AddPartitionsToTxnRequest


def _create(conn: RawConn, name: str, partitions: int) -> None:
    T = M.CreateTopicsRequest.CreatableTopic
    resp = conn.request(
        M.CreateTopicsRequest(topics=[T(name=name, num_partitions=partitions, replication_factor=1)], timeout_ms=5000),
        M.CreateTopicsResponse,
        5,
    )
    assert resp.topics[0].error_code in (0, ErrorCode.TOPIC_ALREADY_EXISTS)


def _init(conn: RawConn, tid: str, timeout_ms: int = 60_000) -> tuple[int, int]:
    resp = conn.request(
        M.InitProducerIdRequest(transactional_id=tid, transaction_timeout_ms=timeout_ms, producer_id=-1, producer_epoch=-1),
        M.InitProducerIdResponse,
        4,
    )
    assert resp.error_code == 0, resp
    return resp.producer_id, resp.producer_epoch


def _add(conn: RawConn, tid: str, pid: int, epoch: int, topic: str, parts: list[int]) -> list[int]:
    req = APT(
        v3_and_below_transactional_id=tid, v3_and_below_producer_id=pid, v3_and_below_producer_epoch=epoch,
        v3_and_below_topics=[APT.AddPartitionsToTxnTopic(name=topic, partitions=parts)],
    )  # fmt: skip
    resp = conn.request(req, M.AddPartitionsToTxnResponse, 3)
    return [r.partition_error_code for r in resp.results_by_topic_v3_and_below[0].results_by_partition]


def _produce(conn: RawConn, topic: str, part: int, pid: int, epoch: int, seq: int, value: bytes) -> tuple[int, int]:
    b = RecordBatchBuilder(producer_id=pid, producer_epoch=epoch, base_sequence=seq, is_transactional=True)
    b.append(None, value)
    P = M.ProduceRequest.TopicProduceData
    req = M.ProduceRequest(
        transactional_id="x", acks=-1, timeout_ms=5000,
        topic_data=[P(name=topic, partition_data=[P.PartitionProduceData(index=part, records=b.build())])],
    )  # fmt: skip
    resp = conn.request(req, M.ProduceResponse, 9)
    pr = resp.responses[0].partition_responses[0]
    return pr.error_code, pr.base_offset


def _end(conn: RawConn, tid: str, pid: int, epoch: int, commit: bool, version: int = 3) -> int:
    resp = conn.request(
        M.EndTxnRequest(transactional_id=tid, producer_id=pid, producer_epoch=epoch, committed=commit),
        M.EndTxnResponse,
        version,
    )
    return int(resp.error_code)


def _fetch(conn: RawConn, topic: str, part: int, offset: int, isolation: int) -> M.FetchResponse.FetchableTopicResponse.PartitionData:
    F = M.FetchRequest.FetchTopic
    req = M.FetchRequest(
        replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=1 << 20, isolation_level=isolation,
        session_id=0, session_epoch=-1,
        topics=[F(topic=topic, partitions=[F.FetchPartition(partition=part, fetch_offset=offset, partition_max_bytes=1 << 20)])],
    )  # fmt: skip
    return conn.request(req, M.FetchResponse, 11).responses[0].partitions[0]


def test_produce_verification_and_read_committed_fetch(floe_agent):
    with RawConn(floe_agent.port) as c:
        _create(c, "tp-verify", 2)
        pid, ep = _init(c, "tp-v")
        # not added yet: refused
        assert _produce(c, "tp-verify", 0, pid, ep, 0, b"x")[0] == ErrorCode.INVALID_TXN_STATE
        assert _add(c, "tp-v", pid, ep, "tp-verify", [0]) == [0]
        assert _produce(c, "tp-verify", 0, pid, ep, 0, b"a")[0] == 0
        assert _produce(c, "tp-verify", 1, pid, ep, 1, b"b")[0] == ErrorCode.INVALID_TXN_STATE
        assert _produce(c, "tp-verify", 0, pid, ep + 1, 0, b"c")[0] == ErrorCode.INVALID_PRODUCER_EPOCH
        assert _produce(c, "tp-verify", 0, pid + 1000, 0, 0, b"d")[0] == ErrorCode.INVALID_PRODUCER_ID_MAPPING
        rc = _fetch(c, "tp-verify", 0, 0, 1)
        assert (rc.high_watermark, rc.last_stable_offset, len(rc.records)) == (1, 0, 0)
        ru = _fetch(c, "tp-verify", 0, 0, 0)
        assert (ru.last_stable_offset, len(ru.records) > 0) == (1, True)
        assert _end(c, "tp-v", pid, ep, False) == 0
        rc = _fetch(c, "tp-verify", 0, 0, 1)
        assert (rc.high_watermark, rc.last_stable_offset) == (2, 2)  # data + ABORT marker
        assert [(a.producer_id, a.first_offset) for a in rc.aborted_transactions] == [(pid, 0)]
        # the wrong decision on a retry, and an old epoch before v2
        assert _end(c, "tp-v", pid, ep, True) == ErrorCode.INVALID_TXN_STATE
        pid2, ep2 = _init(c, "tp-v")
        assert _end(c, "tp-v", pid, ep, True, version=1) == ErrorCode.INVALID_PRODUCER_EPOCH
        assert _end(c, "tp-v", pid, ep, True, version=3) == ErrorCode.PRODUCER_FENCED
        assert (pid2, ep2) == (pid, ep + 1)


def _join(c: RawConn, group: str, instance: str | None = None) -> tuple[str, int]:
    """One member joined and synced (the group's only member): (member id, generation)."""
    P = M.JoinGroupRequest.JoinGroupRequestProtocol
    member = ""
    for _ in range(2):  # MEMBER_ID_REQUIRED first
        r = c.request(
            M.JoinGroupRequest(group_id=group, session_timeout_ms=30_000, rebalance_timeout_ms=10_000, member_id=member,
                               group_instance_id=instance, protocol_type="consumer", protocols=[P(name="range", metadata=b"")]),
            M.JoinGroupResponse, 5,
        )  # fmt: skip
        member = r.member_id
        if r.error_code == 0:
            break
    assert r.error_code == 0, r
    A = M.SyncGroupRequest.SyncGroupRequestAssignment
    s = c.request(
        M.SyncGroupRequest(group_id=group, generation_id=r.generation_id, member_id=member, group_instance_id=instance,
                           protocol_type="consumer", protocol_name="range", assignments=[A(member_id=member, assignment=b"")]),
        M.SyncGroupResponse, 5,
    )  # fmt: skip
    assert s.error_code == 0, s
    return member, r.generation_id


def _txn_commit(c: RawConn, tid: str, group: str, pid: int, ep: int, topic: str, gen: int = -1, member: str = "",
                instance: str | None = None, version: int = 3) -> int:  # fmt: skip
    T = M.TxnOffsetCommitRequest.TxnOffsetCommitRequestTopic
    req = M.TxnOffsetCommitRequest(
        transactional_id=tid, group_id=group, producer_id=pid, producer_epoch=ep, generation_id=gen,
        member_id=member, group_instance_id=instance,
        topics=[T(name=topic, partitions=[T.TxnOffsetCommitRequestPartition(partition_index=0, committed_offset=5)])],
    )  # fmt: skip
    return int(c.request(req, M.TxnOffsetCommitResponse, version).topics[0].partitions[0].error_code)


def _offset_fetch(c: RawConn, group: str, topic: str, stable: bool, version: int = 7) -> tuple[int, int]:
    T = M.OffsetFetchRequest.OffsetFetchRequestTopic
    req = M.OffsetFetchRequest(group_id=group, topics=[T(name=topic, partition_indexes=[0])], require_stable=stable)
    p = c.request(req, M.OffsetFetchResponse, version).topics[0].partitions[0]
    return int(p.error_code), int(p.committed_offset)


def test_txn_offset_commit_checks_the_group_and_require_stable(floe_agent):
    """TxnOffsetCommit v3+ checks generation, member and instance ids like Kafka's
    classic group; OffsetFetch require_stable answers UNSTABLE_OFFSET_COMMIT while
    the transaction's offsets are pending."""
    with RawConn(floe_agent.port) as c:
        _create(c, "tp-gen", 1)
        pid, ep = _init(c, "tp-gen-tx")
        r = c.request(
            M.AddOffsetsToTxnRequest(transactional_id="tp-gen-tx", producer_id=pid, producer_epoch=ep, group_id="g-gen"),
            M.AddOffsetsToTxnResponse, 3,
        )  # fmt: skip
        assert r.error_code == 0
        # an unknown group: generation -1 is a simple group, anything else ILLEGAL_GENERATION
        assert _txn_commit(c, "tp-gen-tx", "g-none", pid, ep, "tp-gen", gen=3, member="m") == ErrorCode.ILLEGAL_GENERATION
        member, gen = _join(c, "g-gen", instance="i-1")
        args = (c, "tp-gen-tx", "g-gen", pid, ep, "tp-gen")
        assert _txn_commit(*args, gen=gen + 1, member=member, instance="i-1") == ErrorCode.ILLEGAL_GENERATION
        assert _txn_commit(*args, gen=gen, member="nobody") == ErrorCode.UNKNOWN_MEMBER_ID
        assert _txn_commit(*args, gen=gen, member="nobody", instance="i-1") == ErrorCode.FENCED_INSTANCE_ID
        assert _txn_commit(*args, gen=-1, member="") == 0  # no member (as v0-2 send): allowed
        assert _txn_commit(*args, version=2) == 0
        assert _txn_commit(*args, gen=gen, member=member, instance="i-1") == 0
        assert _offset_fetch(c, "g-gen", "tp-gen", True) == (ErrorCode.UNSTABLE_OFFSET_COMMIT, -1)
        assert _offset_fetch(c, "g-gen", "tp-gen", False) == (0, -1)
        assert _end(c, "tp-gen-tx", pid, ep, True) == 0
        assert _offset_fetch(c, "g-gen", "tp-gen", True) == (0, 5)


def test_txn_offset_commit_kip848_consumer_group(floe_agent):
    """A KIP-848 consumer group's member commits in a transaction with its member
    id and member epoch; a wrong epoch or member is refused like OffsetCommit v9+
    would be; a commit naming no member (v0-2 form) is accepted."""
    with RawConn(floe_agent.port) as c:
        _create(c, "tp-848", 1)
        member = "m-848-1"
        hb = c.request(
            M.ConsumerGroupHeartbeatRequest(group_id="g-848", member_id=member, member_epoch=0, rebalance_timeout_ms=30_000,
                                            subscribed_topic_names=["tp-848"], topic_partitions=[]),
            M.ConsumerGroupHeartbeatResponse, 0,
        )  # fmt: skip
        assert hb.error_code == 0, hb
        member, epoch = hb.member_id or member, hb.member_epoch
        pid, ep = _init(c, "tp-848-tx")
        r = c.request(
            M.AddOffsetsToTxnRequest(transactional_id="tp-848-tx", producer_id=pid, producer_epoch=ep, group_id="g-848"),
            M.AddOffsetsToTxnResponse, 3,
        )  # fmt: skip
        assert r.error_code == 0
        args = (c, "tp-848-tx", "g-848", pid, ep, "tp-848")
        assert _txn_commit(*args, gen=epoch + 1, member=member) == ErrorCode.FENCED_MEMBER_EPOCH
        assert _txn_commit(*args, gen=epoch, member="nobody") == ErrorCode.UNKNOWN_MEMBER_ID
        assert _txn_commit(*args, gen=epoch, member=member) == 0
        assert _txn_commit(*args, version=2) == 0
        assert _end(c, "tp-848-tx", pid, ep, True) == 0
        assert _offset_fetch(c, "g-848", "tp-848", True) == (0, 5)


def _produce_v(conn: RawConn, tid: str, topic: str, part: int, pid: int, epoch: int, seq: int, version: int) -> int:
    b = RecordBatchBuilder(producer_id=pid, producer_epoch=epoch, base_sequence=seq, is_transactional=True)
    b.append(None, b"v")
    P = M.ProduceRequest.TopicProduceData
    req = M.ProduceRequest(
        transactional_id=tid, acks=-1, timeout_ms=5000,
        topic_data=[P(name=topic, partition_data=[P.PartitionProduceData(index=part, records=b.build())])],
    )  # fmt: skip
    return int(conn.request(req, M.ProduceResponse, version).responses[0].partition_responses[0].error_code)


def test_transaction_version_2(floe_agent):
    """KIP-890 part 2 on the wire: the feature is finalized at 2; Produce v12+ and
    TxnOffsetCommit v5 add the partition and group implicitly (v11 does not);
    EndTxn v5 answers the bumped epoch, the next transaction runs on it and the old
    epoch is fenced; a retry of the end with the old epoch answers the same pair."""
    with RawConn(floe_agent.port) as c:
        av = c.request(M.ApiVersionsRequest(client_software_name="t", client_software_version="1"), M.ApiVersionsResponse, 4)
        assert [(f.name, f.max_version_level) for f in av.finalized_features] == [("transaction.version", 2)]
        assert av.finalized_features_epoch >= 0
        assert [(f.name, f.min_version, f.max_version) for f in av.supported_features] == [("transaction.version", 0, 2)]
        assert {k.api_key: k.max_version for k in av.api_keys}[26] == 5
        av3 = c.request(M.ApiVersionsRequest(client_software_name="t", client_software_version="1"), M.ApiVersionsResponse, 3)
        assert av3.supported_features == []  # min 0 is omitted before v4, as Kafka does
        _create(c, "tv2", 2)
        pid, ep = _init(c, "tv2-tx")
        assert _produce_v(c, "tv2-tx", "tv2", 0, pid, ep, 0, 11) == ErrorCode.INVALID_TXN_STATE
        assert _produce_v(c, "tv2-tx", "tv2", 0, pid, ep, 0, 12) == 0  # joined implicitly
        assert _produce_v(c, "tv2-tx", "tv2", 1, pid, ep, 0, 12) == 0
        T = M.TxnOffsetCommitRequest.TxnOffsetCommitRequestTopic
        toc = M.TxnOffsetCommitRequest(
            transactional_id="tv2-tx", group_id="tv2-g", producer_id=pid, producer_epoch=ep,
            topics=[T(name="tv2", partitions=[T.TxnOffsetCommitRequestPartition(partition_index=0, committed_offset=9)])],
        )  # fmt: skip
        assert c.request(toc, M.TxnOffsetCommitResponse, 4).topics[0].partitions[0].error_code == ErrorCode.INVALID_TXN_STATE
        assert c.request(toc, M.TxnOffsetCommitResponse, 5).topics[0].partitions[0].error_code == 0
        end = M.EndTxnRequest(transactional_id="tv2-tx", producer_id=pid, producer_epoch=ep, committed=True)
        r = c.request(end, M.EndTxnResponse, 5)
        assert (r.error_code, r.producer_id, r.producer_epoch) == (0, pid, ep + 1)
        r = c.request(end, M.EndTxnResponse, 5)  # the answer was lost: a retry
        assert (r.error_code, r.producer_id, r.producer_epoch) == (0, pid, ep + 1)
        rc = _fetch(c, "tv2", 0, 0, 1)
        assert (rc.high_watermark, rc.last_stable_offset) == (2, 2)
        # the next transaction on the bumped epoch, sequences from 0; the old epoch is fenced
        assert _produce_v(c, "tv2-tx", "tv2", 0, pid, ep, 1, 12) == ErrorCode.INVALID_PRODUCER_EPOCH
        assert _produce_v(c, "tv2-tx", "tv2", 0, pid, ep + 1, 0, 12) == 0
        end2 = M.EndTxnRequest(transactional_id="tv2-tx", producer_id=pid, producer_epoch=ep + 1, committed=False)
        r = c.request(end2, M.EndTxnResponse, 5)
        assert (r.error_code, r.producer_epoch) == (0, ep + 2)
        rc = _fetch(c, "tv2", 0, 0, 1)
        assert [(a.producer_id, a.first_offset) for a in rc.aborted_transactions] == [(pid, 2)]
        # nothing open: a commit is refused; an abort after a commit bumps (a client
        # aborting before anything joined), after an abort it is that abort's retry
        end3 = M.EndTxnRequest(transactional_id="tv2-tx", producer_id=pid, producer_epoch=ep + 2, committed=True)
        assert c.request(end3, M.EndTxnResponse, 5).error_code == ErrorCode.INVALID_TXN_STATE
        end3.committed = False
        r = c.request(end3, M.EndTxnResponse, 5)
        assert (r.error_code, r.producer_epoch) == (0, ep + 2)
        fenced = M.EndTxnRequest(transactional_id="tv2-tx", producer_id=pid, producer_epoch=ep, committed=False)
        assert c.request(fenced, M.EndTxnResponse, 5).error_code == ErrorCode.PRODUCER_FENCED


def test_timeout_abort_fences_and_describe(agent_factory):
    agent = agent_factory(transaction_check_interval_ms=50)
    # the coordinator's clock stands still until the test moves it, so the 200 ms
    # timeout cannot fire while a slow box is still describing the transaction
    clock = ManualClock(start_ms=time.time_ns() // 1_000_000)
    agent.broker.txn.clock = clock
    with RawConn(agent.port) as c:
        _create(c, "tp-timeout", 1)
        pid, ep = _init(c, "tp-t", timeout_ms=200)
        assert _add(c, "tp-t", pid, ep, "tp-timeout", [0]) == [0]
        assert _produce(c, "tp-timeout", 0, pid, ep, 0, b"late")[0] == 0
        d = c.request(M.DescribeTransactionsRequest(transactional_ids=["tp-t", "nope"]), M.DescribeTransactionsResponse, 0)
        assert d.transaction_states[0].transaction_state == "Ongoing"
        assert [(t.topic, t.partitions) for t in d.transaction_states[0].topics] == [("tp-timeout", [0])]
        assert d.transaction_states[1].error_code == ErrorCode.TRANSACTIONAL_ID_NOT_FOUND
        lt = c.request(M.ListTransactionsRequest(state_filters=["Ongoing", "Bogus"]), M.ListTransactionsResponse, 1)
        assert [t.transactional_id for t in lt.transaction_states] == ["tp-t"]
        assert lt.unknown_state_filters == ["Bogus"]
        dp = c.request(
            M.DescribeProducersRequest(topics=[M.DescribeProducersRequest.TopicRequest(name="tp-timeout", partition_indexes=[0])]),
            M.DescribeProducersResponse,
            0,
        )
        (state,) = dp.topics[0].partitions[0].active_producers
        assert (state.producer_id, state.current_txn_start_offset) == (pid, 0)
        clock.advance(60)  # well past the timeout: the coordinator's next check aborts it
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            d = c.request(M.DescribeTransactionsRequest(transactional_ids=["tp-t"]), M.DescribeTransactionsResponse, 0)
            if d.transaction_states[0].transaction_state == "CompleteAbort":
                break
            time.sleep(0.05)
        assert d.transaction_states[0].transaction_state == "CompleteAbort"
        assert d.transaction_states[0].producer_epoch == ep + 1  # bumped: the producer is fenced
        assert _produce(c, "tp-timeout", 0, pid, ep, 1, b"zombie")[0] == ErrorCode.INVALID_PRODUCER_EPOCH
        assert _end(c, "tp-t", pid, ep, True) == ErrorCode.PRODUCER_FENCED
        rc = _fetch(c, "tp-timeout", 0, 0, 1)
        assert [(a.producer_id, a.first_offset) for a in rc.aborted_transactions] == [(pid, 0)]
        # KIP-360: the fenced producer recovers with its old id and epoch
        resp = c.request(
            M.InitProducerIdRequest(transactional_id="tp-t", transaction_timeout_ms=60_000, producer_id=pid, producer_epoch=ep),
            M.InitProducerIdResponse,
            4,
        )
        assert (resp.error_code, resp.producer_id, resp.producer_epoch) == (0, pid, ep + 1)
        too_long = c.request(
            M.InitProducerIdRequest(transactional_id="tp-x", transaction_timeout_ms=10**9, producer_id=-1, producer_epoch=-1),
            M.InitProducerIdResponse,
            4,
        )
        assert too_long.error_code == ErrorCode.INVALID_TRANSACTION_TIMEOUT


TXN_REQUESTS = [
    "AddPartitionsToTxnRequest", "AddOffsetsToTxnRequest", "EndTxnRequest", "TxnOffsetCommitRequest",
    "DescribeTransactionsRequest", "ListTransactionsRequest", "DescribeProducersRequest", "InitProducerIdRequest",
]  # fmt: skip
_CASES = [
    (n, v)
    for n in TXN_REQUESTS
    for v in range(getattr(M, n).MIN_VERSION, getattr(M, n).MAX_VERSION + 1)
]
_MODELS = {n: load_message(n) for n in TXN_REQUESTS}


@pytest.fixture(scope="module")
def fuzz_agent(tmp_path_factory):
    from tests.fixtures.agent import start_agent

    agent = start_agent(tmp_path_factory.mktemp("txn-fuzz"))
    with RawConn(agent.port) as c:
        _create(c, "fz", 2)
    yield agent
    agent.stop()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(st.sampled_from(_CASES), st.integers(0, 2**32))
def test_fuzz_txn_handlers(fuzz_agent, case, seed):
    name, version = case
    obj = Sampler(random.Random(seed), null_ratio=0.2).message(_MODELS[name], version)
    from agent.handlers.registry import REGISTRY

    cls = getattr(M, name)
    if not REGISTRY[cls.API_KEY].min_version <= version <= REGISTRY[cls.API_KEY].max_version:
        return
    with RawConn(fuzz_agent.port) as c:
        resp_cls = M.RESPONSES[cls.API_KEY]
        c.request(obj, resp_cls, version)  # any answer decodes; no crash, no hang
