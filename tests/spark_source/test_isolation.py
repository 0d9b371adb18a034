"""``kafka.isolation.level`` in the Spark source: read_committed stops at the last
stable offset and skips aborted transactions (ranges from the metastore, through
the agents' planning API or directly); control batches never become rows;
read_uncommitted (the default) reads every data record, as Spark's Kafka source."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from confluent_kafka import Producer

from spark_source.options import parse_options
from spark_source.source import FloeBatchReader
from tests.compactor.test_agent_e2e import create_topic
from tests.spark_source.test_unit import read_all


def _values(rows: list[Any]) -> list[bytes]:
    return sorted(r[4] for r in rows)


def test_read_committed_through_agent_and_direct(agent_factory: Callable[..., Any]) -> None:
    agent = agent_factory(flush_interval_ms=5)
    bs = agent.bootstrap
    create_topic(bs, "iso", 2)
    plain = Producer({"bootstrap.servers": bs})
    plain.produce("iso", b"plain-0", partition=0)
    plain.flush(10)
    p = Producer({"bootstrap.servers": bs, "transactional.id": "iso-tx", "linger.ms": 5})
    p.init_transactions(20)
    p.begin_transaction()
    for i in range(6):
        p.produce("iso", b"commit-%d" % i, partition=i % 2)
    p.commit_transaction(20)
    p.begin_transaction()
    for i in range(4):
        p.produce("iso", b"abort-%d" % i, partition=i % 2)
    p.flush(10)
    p.abort_transaction(20)
    p.begin_transaction()
    for i in range(2):
        p.produce("iso", b"after-%d" % i, partition=i % 2)
    p.commit_transaction(20)
    plain.produce("iso", b"plain-1", partition=1)
    plain.flush(10)
    p.begin_transaction()  # left open: everything from here on is unstable
    p.produce("iso", b"open-0", partition=0)
    p.flush(10)
    plain.produce("iso", b"plain-2", partition=0)  # above the LSO of partition 0
    plain.flush(10)

    committed = sorted(
        [b"plain-0", b"plain-1"] + [b"commit-%d" % i for i in range(6)] + [b"after-0", b"after-1"]
    )
    everything = sorted(
        committed + [b"abort-%d" % i for i in range(4)] + [b"open-0", b"plain-2"]
    )
    data_dir = agent.data_dir
    for where in (
        {"kafka.bootstrap.servers": bs},
        {"metastore": f"sqlite:///{data_dir / 'meta.db'}", "objects": f"file://{data_dir / 'objects'}"},
    ):
        base = {**where, "subscribe": "iso"}
        rc = parse_options({**base, "kafka.isolation.level": "read_committed"}, streaming=False)
        rows, _ = read_all(FloeBatchReader(rc))
        assert _values(rows) == committed, where
        ru = parse_options(base, streaming=False)
        rows, _ = read_all(FloeBatchReader(ru))
        assert _values(rows) == everything, where
    p.commit_transaction(20)
    rc = parse_options({"kafka.bootstrap.servers": bs, "subscribe": "iso", "kafka.isolation.level": "read_committed"}, streaming=False)
    rows, _ = read_all(FloeBatchReader(rc))
    assert _values(rows) == sorted([*committed, b"open-0", b"plain-2"])
