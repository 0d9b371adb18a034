"""read_committed Fetches at width (issue 18): the watermark query also says whether
the topic holds transaction state; without any, tail answers need no last stable
offset query, and with an open or aborted transaction they are held back and
annotated exactly as before."""

from __future__ import annotations

from kafka_protocol import messages as M
from tests.agent.test_fetch_protocol import make_topic, produce_batch
from tests.agent.test_fetch_width import count_calls
from tests.agent.test_txn_protocol import _add, _end, _init, _produce
from tests.interop._raw import RawConn

PARTS = 12
WATCHED = ("partition_offsets", "topic_offsets", "stable_offsets", "find_batches", "find_batches_many")


def _wide(conn: RawConn, topic: str, isolation: int) -> dict[int, tuple[int, int, int, list[tuple[int, int]], bytes]]:
    """Partition -> (high watermark, last stable offset, error, aborted, records) of one
    Fetch naming every partition from offset 0."""
    F = M.FetchRequest.FetchTopic
    parts = [F.FetchPartition(partition=p, fetch_offset=0, partition_max_bytes=1 << 20) for p in range(PARTS)]
    req = M.FetchRequest(
        replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=1 << 20, isolation_level=isolation,
        session_id=0, session_epoch=-1, topics=[F(topic=topic, partitions=parts)],
    )  # fmt: skip
    resp = conn.request(req, M.FetchResponse, 11)
    out = {}
    for p in resp.responses[0].partitions:
        aborted = [(a.producer_id, a.first_offset) for a in p.aborted_transactions]
        out[p.partition_index] = (p.high_watermark, p.last_stable_offset, p.error_code, aborted, bytes(p.records))
    return out


def test_read_committed_at_width_asks_for_stable_offsets_only_with_transactions(floe_agent, monkeypatch):
    make_topic(floe_agent, "rcw", partitions=PARTS)
    produce_batch(floe_agent, "rcw", 1, 3, tag="a")
    produce_batch(floe_agent, "rcw", 7, 2, tag="b")
    calls = count_calls(monkeypatch, floe_agent.broker.meta, WATCHED)
    with RawConn(floe_agent.port) as c:
        # No transaction state: one query, and the answer is read_uncommitted's.
        committed = _wide(c, "rcw", 1)
        assert calls == ["topic_offsets"]
        assert committed == _wide(c, "rcw", 0)
        assert committed[1][:4] == (3, 3, 0, []) and committed[1][4]
        assert committed[7][:2] == (2, 2) and committed[3] == (0, 0, 0, [], b"")

        # An open transaction on partition 5 holds it back; the others still read.
        pid, ep = _init(c, "rcw-tx")
        assert _add(c, "rcw-tx", pid, ep, "rcw", [5]) == [0]
        assert _produce(c, "rcw", 5, pid, ep, 0, b"t")[0] == 0
        calls.clear()
        open_txn = _wide(c, "rcw", 1)
        assert calls[0] == "topic_offsets" and "stable_offsets" in calls
        assert open_txn[5] == (1, 0, 0, [], b"")
        assert open_txn[1] == committed[1] and open_txn[7] == committed[7]

        # Aborted: partition 5 reads to its marker, with the aborted range to skip.
        assert _end(c, "rcw-tx", pid, ep, False) == 0
        calls.clear()
        aborted = _wide(c, "rcw", 1)
        assert "stable_offsets" in calls
        assert aborted[5][:4] == (2, 2, 0, [(pid, 0)]) and aborted[5][4]
        assert aborted[1] == committed[1]
