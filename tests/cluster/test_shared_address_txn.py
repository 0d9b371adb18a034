"""Transactions through three agents behind ONE advertised address (issue 14):
the transaction APIs are relayed to the ring owner of the transactional id (or,
for TxnOffsetCommit, of the group), as group requests are (agent.cluster.forward).

One Postgres, one moto S3, a round-robin TCP balancer (tests.fixtures.tcp_lb)
in front of three agents advertising the balancer's address. Through it:

* InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn, TxnOffsetCommit, EndTxn
  and DescribeTransactions sent to each agent directly are answered by the
  owner (relayed), never NOT_COORDINATOR, and the relay counter moves;
* a confluent-kafka transactional producer runs consume-transform-produce style
  transactions (records + ``send_offsets_to_transaction``), committing and
  aborting in turn; a read_committed consumer reads exactly the committed
  records and the group's offsets are the committed transactions' ones.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from kafka_protocol import messages as M
from kafka_protocol.errors import ErrorCode
from tests.cluster.helpers import wait_for
from tests.fixtures.agent_process import AgentGroup, AgentProcess, Backend
from tests.fixtures.tcp_lb import TcpBalancer
from tests.interop._raw import RawConn

pytestmark = [pytest.mark.slow, pytest.mark.postgres, pytest.mark.s3, pytest.mark.interop, pytest.mark.timeout(300)]

FORWARDS = "floe_group_forwards_total"


@pytest.fixture
def pg_s3(postgres_url: str, s3_url: str) -> Backend:
    return Backend("postgres-s3", postgres_url, s3_url)


def _raw_txn_round(port: int, tid: str, group: str, topic: str) -> list[int]:
    """One whole transaction by hand on one agent's own port: every answer's code."""
    codes: list[int] = []
    with RawConn(port) as c:
        r = c.request(
            M.InitProducerIdRequest(transactional_id=tid, transaction_timeout_ms=30_000, producer_id=-1, producer_epoch=-1),
            M.InitProducerIdResponse, 4,
        )  # fmt: skip
        codes.append(r.error_code)
        pid, ep = r.producer_id, r.producer_epoch
        APT = M.AddPartitionsToTxnRequest
        a = c.request(
            APT(v3_and_below_transactional_id=tid, v3_and_below_producer_id=pid, v3_and_below_producer_epoch=ep,
                v3_and_below_topics=[APT.AddPartitionsToTxnTopic(name=topic, partitions=[0])]),
            M.AddPartitionsToTxnResponse, 3,
        )  # fmt: skip
        codes.append(a.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code)
        o = c.request(
            M.AddOffsetsToTxnRequest(transactional_id=tid, producer_id=pid, producer_epoch=ep, group_id=group),
            M.AddOffsetsToTxnResponse, 3,
        )  # fmt: skip
        codes.append(o.error_code)
        T = M.TxnOffsetCommitRequest.TxnOffsetCommitRequestTopic
        tc = c.request(
            M.TxnOffsetCommitRequest(
                transactional_id=tid, group_id=group, producer_id=pid, producer_epoch=ep,
                topics=[T(name=topic, partitions=[T.TxnOffsetCommitRequestPartition(partition_index=0, committed_offset=1)])],
            ),
            M.TxnOffsetCommitResponse, 3,
        )  # fmt: skip
        codes.append(tc.topics[0].partitions[0].error_code)
        d = c.request(M.DescribeTransactionsRequest(transactional_ids=[tid]), M.DescribeTransactionsResponse, 0)
        codes.append(d.transaction_states[0].error_code)
        e = c.request(
            M.EndTxnRequest(transactional_id=tid, producer_id=pid, producer_epoch=ep, committed=False),
            M.EndTxnResponse, 3,
        )  # fmt: skip
        codes.append(e.error_code)
    return codes


def test_transactions_behind_one_address(tmp_path: Path, pg_s3: Backend) -> None:
    group = AgentGroup(tmp_path, pg_s3)
    agents: list[AgentProcess] = []
    lb = TcpBalancer(lambda: [a.port for a in agents if a.running()])
    env = {"advertised_port": lb.port, "zone": "a", "cluster_heartbeat_ms": 500, "cluster_dead_after_ms": 5000}
    try:
        for i in range(3):
            agents.append(group.make(agent_id=f"agent-{i}", flush_interval_ms=20, **env))
        ids = [f"agent-{i}" for i in range(3)]
        wait_for(lambda: all((a.healthz() or {}).get("ring") == ids for a in agents), what="ring of 3")
        ad = AdminClient({"bootstrap.servers": lb.address})
        for name in ("txn-in", "txn-out"):
            ad.create_topics([NewTopic(name, 3)])[name].result(30)

        # Deterministically: every agent answers every transaction API for ids it
        # does not own (relayed to the owner), never NOT_COORDINATOR.
        before = sum(a.metric(FORWARDS) for a in agents)
        for k in range(4):
            for a in agents:
                codes = _raw_txn_round(a.port, f"raw-tx-{k}", f"raw-g-{k}", "txn-out")
                assert codes == [0] * 6, (a.port, k, [ErrorCode(c).name for c in codes])
        relayed = sum(a.metric(FORWARDS) for a in agents) - before
        assert relayed >= 12, relayed  # 2 of 3 agents are not the owner of a given id

        # A transactional client through the balancer: commit, abort, commit ...
        src = Producer({"bootstrap.servers": lb.address})
        for i in range(30):
            src.produce("txn-in", f"in-{i}".encode(), partition=i % 3)
        assert src.flush(30) == 0
        p = Producer({"bootstrap.servers": lb.address, "transactional.id": "shared-tx", "linger.ms": 5})
        p.init_transactions(60)
        feeder = Consumer({"bootstrap.servers": lb.address, "group.id": "txn-app", "enable.auto.commit": False})
        committed: set[str] = set()
        for n in range(10):
            p.begin_transaction()
            values = [f"out-{n}-{j}" for j in range(5)]
            for j, v in enumerate(values):
                p.produce("txn-out", v.encode(), partition=j % 3)
            offsets = [TopicPartition("txn-in", q, n + 1) for q in range(3)]
            p.send_offsets_to_transaction(offsets, feeder.consumer_group_metadata(), 60)
            if n % 2 == 0:
                p.commit_transaction(60)
                committed.update(values)
            else:
                p.abort_transaction(60)
        feeder.close()
        rc = Consumer({
            "bootstrap.servers": lb.address, "group.id": "txn-check", "isolation.level": "read_committed",
            "auto.offset.reset": "earliest", "enable.auto.commit": False,
        })  # fmt: skip
        rc.subscribe(["txn-out"])
        seen: list[str] = []

        def drained() -> bool:
            for m in rc.consume(100, 0.2):
                if m.error() is None:
                    seen.append(m.value().decode())
            return set(seen) >= committed

        wait_for(drained, timeout=60, what="the committed records under read_committed", every=0.05)
        for _ in range(5):
            drained()
        rc.close()
        assert set(seen) == committed and len(seen) == len(committed), sorted(set(seen) ^ committed)
        check = Consumer({"bootstrap.servers": lb.address, "group.id": "txn-app"})
        got = check.committed([TopicPartition("txn-in", q) for q in range(3)], timeout=30)
        check.close()
        assert [tp.offset for tp in got] == [9] * 3  # the last committed transaction was n = 8
        print(f"\nshared address transactions: relayed={relayed:.0f} committed={len(committed)} read={len(seen)}")
    finally:
        lb.close()
        group.close(show_logs=False)
