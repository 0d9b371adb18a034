"""Crash safety of the transaction coordinator: a coordinator that died after
preparing a commit (before any marker, between two partitions' markers, or
after all markers but before completing) leaves the transaction prepared in the
metastore; the next owner's periodic check finishes it, and read_committed
readers then see exactly the committed data (duplicate markers change nothing)."""

from __future__ import annotations

import pytest

from agent.produce import ProduceItem
from agent.txn import marker_batch
from metastore.types import TXN_COMPLETE_COMMIT, TXN_PREPARE_COMMIT
from tests.agent.test_txn_protocol import _add, _create, _fetch, _init, _produce
from tests.interop._raw import RawConn

pytestmark = pytest.mark.interop


async def _markers(broker, rec, upto: int) -> None:
    """Write the first ``upto`` markers of ``rec`` as the dead coordinator did."""
    items = []
    for part in rec.partitions[:upto]:
        data, meta = marker_batch(rec.producer_id, rec.producer_epoch, True, broker.clock.now_ms())
        items.append(ProduceItem(part.topic_id, part.partition, data, meta, True))
    if items:
        n = sum(len(i.batch) for i in items)
        await broker.pipeline.reserve(n)
        await broker.pipeline.append(items, n)


@pytest.mark.parametrize("markers_written", [0, 1, 2])
def test_prepared_commit_is_finished_by_the_next_owner(floe_agent, markers_written):
    broker = floe_agent.broker
    floe_agent.call(broker.txn.close())  # no background check: this test runs it
    topic = f"rec-{markers_written}"
    with RawConn(floe_agent.port) as c:
        _create(c, topic, 2)
        tid = f"rec-tx-{markers_written}"
        pid, ep = _init(c, tid)
        assert _add(c, tid, pid, ep, topic, [0, 1]) == [0, 0]
        assert _produce(c, topic, 0, pid, ep, 0, b"a")[0] == 0
        assert _produce(c, topic, 1, pid, ep, 1, b"b")[0] == 0
        # the coordinator prepares the commit, writes some markers, and dies
        prep = floe_agent.call(broker.meta.txn_prepare_end(tid, pid, ep, True))
        assert prep.txn.state == TXN_PREPARE_COMMIT
        floe_agent.call(_markers(broker, prep.txn, markers_written))
        for p in (0, 1):
            rc = _fetch(c, topic, p, 0, 1)
            assert rc.last_stable_offset == 0 and len(rc.records) == 0  # still unstable
        # the next owner's check (recovery delay 0 here) finishes it
        broker.txn._recovery_ms = -1
        assert floe_agent.call(broker.txn.check()) == 1
        rec = floe_agent.call(broker.meta.txn_get(tid))
        assert rec.state == TXN_COMPLETE_COMMIT and rec.partitions == []
        for p in (0, 1):
            rc = _fetch(c, topic, p, 0, 1)
            assert rc.last_stable_offset == rc.high_watermark >= 2
            assert rc.aborted_transactions == [] and len(rc.records) > 0
        # the producer's next transaction works as usual
        assert _add(c, tid, pid, ep, topic, [0]) == [0]
