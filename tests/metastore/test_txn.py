"""The metastore contract for transactions (metastore/txn.py), on SQLite and Postgres:
the state machine, fencing, the last stable offset and aborted ranges, pending
transactional offsets, markers in the sequencer, two agents racing for one id."""

from __future__ import annotations

import asyncio
import uuid

from metastore import ErrorCode, Metastore, open_metastore
from metastore.types import (
    TXN_COMPLETE_ABORT,
    TXN_COMPLETE_COMMIT,
    TXN_EMPTY,
    TXN_ONGOING,
    TXN_PREPARE_ABORT,
    TXN_PREPARE_COMMIT,
    BatchToCommit,
    GroupOffset,
)
from tests.metastore.helpers import FakeClock, batch

E = ErrorCode


async def _topic(ms: Metastore, name: str = "t", partitions: int = 2) -> uuid.UUID:
    res = await ms.create_topic(name, partitions)
    assert res.topic is not None
    return res.topic.id


async def _append(ms: Metastore, *batches: BatchToCommit) -> list[int]:
    results = await ms.commit_object(f"obj/{uuid.uuid4()}", 1000, "a1", list(batches))
    assert all(r.error is E.NONE for r in results), results
    return [r.base_offset for r in results]


def _txn_batch(t: uuid.UUID, p: int, pid: int, epoch: int, seq: int, n: int = 2) -> BatchToCommit:
    return batch(t, p, n, pid=pid, epoch=epoch, seq=seq)._replace(is_transactional=True)


def _marker(t: uuid.UUID, p: int, pid: int, epoch: int) -> BatchToCommit:
    return batch(t, p, 1, pid=pid, epoch=epoch, seq=-1)._replace(is_transactional=True)


async def test_init_bumps_epoch_and_fences(ms: Metastore) -> None:
    first = await ms.txn_init("tx", 60_000)
    assert first.error is E.NONE and first.txn is not None
    assert (first.txn.producer_epoch, first.txn.state) == (0, TXN_EMPTY)
    pid = first.txn.producer_id
    again = await ms.txn_init("tx", 30_000)
    assert again.txn is not None and (again.txn.producer_id, again.txn.producer_epoch) == (pid, 1)
    assert again.txn.timeout_ms == 30_000
    # the old instance is fenced, the new one may join
    assert (await ms.txn_add_group("tx", pid, 0, "g")).error is E.PRODUCER_FENCED
    assert (await ms.txn_add_group("tx", pid + 99, 1, "g")).error is E.INVALID_PRODUCER_ID_MAPPING
    assert (await ms.txn_add_group("tx", pid, 1, "g")).error is E.NONE
    # KIP-360: an unknown id with a producer id, a wrong epoch, a retry of the last bump
    assert (await ms.txn_init("nope", 1000, 5, 0)).error is E.INVALID_PRODUCER_ID_MAPPING
    got = await ms.txn_get("tx")
    assert got is not None and got.state == TXN_ONGOING and got.groups == ["g"]


async def test_kip360_recovery(ms: Metastore) -> None:
    r0 = await ms.txn_init("tx", 60_000)
    assert r0.txn is not None
    pid = r0.txn.producer_id
    r1 = await ms.txn_init("tx", 60_000, pid, 0)
    assert r1.error is E.NONE and r1.txn is not None and r1.txn.producer_epoch == 1
    retry = await ms.txn_init("tx", 60_000, pid, 0)  # the same request again
    assert retry.error is E.NONE and retry.txn is not None and retry.txn.producer_epoch == 1
    assert (await ms.txn_init("tx", 60_000, pid, 7)).error is E.PRODUCER_FENCED


async def test_commit_lifecycle_lso_and_offsets(ms: Metastore) -> None:
    t = await _topic(ms)
    r = await ms.txn_init("tx", 60_000)
    assert r.txn is not None
    pid, ep = r.txn.producer_id, r.txn.producer_epoch
    await _append(ms, batch(t, 0, 3))  # offsets 0-2, outside the transaction
    added = await ms.txn_add_partitions("tx", pid, ep, [(t, 0), (t, 1)])
    assert added.error is E.NONE and added.txn is not None and added.txn.state == TXN_ONGOING
    assert [(p.partition, p.first_offset) for p in added.txn.partitions] == [(0, 3), (1, 0)]
    # joined but nothing written: nothing held back
    (view,) = await ms.stable_offsets([(t, 0, 0)])
    assert (view.last_stable_offset, view.high_watermark) == (3, 3)
    await _append(ms, batch(t, 0, 1))  # offset 3, another producer
    await _append(ms, _txn_batch(t, 0, pid, ep, 0))  # offsets 4-5
    await _append(ms, batch(t, 0, 1))  # offset 6
    assert await ms.txn_verify(pid, ep, [(t, 0), (t, 1)]) == [E.NONE, E.NONE]
    v0, v1 = await ms.stable_offsets([(t, 0, 0), (t, 1, 0)])
    assert (v0.last_stable_offset, v0.high_watermark, v0.aborted) == (4, 7, [])
    assert (v1.last_stable_offset, v1.high_watermark) == (0, 0)
    # offsets in the transaction stay invisible until it commits
    assert (await ms.txn_add_group("tx", pid, ep, "g")).error is E.NONE
    offs = [GroupOffset(t, 0, 42)]
    assert (await ms.txn_commit_offsets("tx", "other", pid, ep, offs)).error is E.INVALID_TXN_STATE
    assert (await ms.txn_commit_offsets("tx", "g", pid, ep, offs)).error is E.NONE
    assert await ms.fetch_offsets("g") == []
    assert await ms.txn_pending_offsets("g") == [(t, 0)]  # OffsetFetch require_stable: unstable
    assert await ms.txn_pending_offsets("other") == []
    prep = await ms.txn_prepare_end("tx", pid, ep, True)
    assert prep.txn is not None and prep.txn.state == TXN_PREPARE_COMMIT
    assert (await ms.txn_add_partitions("tx", pid, ep, [(t, 1)])).error is E.CONCURRENT_TRANSACTIONS
    assert (await ms.txn_prepare_end("tx", pid, ep, False)).error is E.INVALID_TXN_STATE
    (m0,) = await _append(ms, _marker(t, 0, pid, ep))
    (m1,) = await _append(ms, _marker(t, 1, pid, ep))
    done = await ms.txn_complete("tx", pid, ep, [(t, 0, m0), (t, 1, m1)])
    assert done.error is E.NONE and done.txn is not None
    assert (done.txn.state, done.txn.partitions, done.txn.groups) == (TXN_COMPLETE_COMMIT, [], [])
    (v0,) = await ms.stable_offsets([(t, 0, 0)])
    assert (v0.last_stable_offset, v0.aborted) == (8, [])
    assert [(o.partition, o.offset) for o in await ms.fetch_offsets("g")] == [(0, 42)]
    assert await ms.txn_pending_offsets("g") == []
    # a retried EndTxn of the same decision is fine; the next transaction continues
    assert (await ms.txn_prepare_end("tx", pid, ep, True)).error is E.NONE
    assert await ms.txn_verify(pid, ep, [(t, 0)]) == [E.INVALID_TXN_STATE]
    await _append(ms, _txn_batch(t, 0, pid, ep, 2))  # sequences continue after the marker


async def test_abort_records_ranges_and_drops_offsets(ms: Metastore) -> None:
    t = await _topic(ms)
    r = await ms.txn_init("tx", 60_000)
    assert r.txn is not None
    pid, ep = r.txn.producer_id, r.txn.producer_epoch
    await ms.txn_add_partitions("tx", pid, ep, [(t, 0), (t, 1)])
    await ms.txn_add_group("tx", pid, ep, "g")
    await ms.txn_commit_offsets("tx", "g", pid, ep, [GroupOffset(t, 0, 7)])
    await _append(ms, batch(t, 0, 2))  # 0-1 another producer
    await _append(ms, _txn_batch(t, 0, pid, ep, 0))  # 2-3
    prep = await ms.txn_prepare_end("tx", pid, ep, False)
    assert prep.txn is not None and prep.txn.state == TXN_PREPARE_ABORT
    (m0,) = await _append(ms, _marker(t, 0, pid, ep))
    (m1,) = await _append(ms, _marker(t, 1, pid, ep))
    done = await ms.txn_complete("tx", pid, ep, [(t, 0, m0), (t, 1, m1)])
    assert done.txn is not None and done.txn.state == TXN_COMPLETE_ABORT
    v0, v0_late, v1 = await ms.stable_offsets([(t, 0, 0), (t, 0, m0 + 1), (t, 1, 0)])
    assert (v0.last_stable_offset, v0.aborted) == (5, [(pid, 2, m0)])
    assert v0_late.aborted == []  # the range ends before the fetch offset
    assert v1.aborted == []  # nothing of the transaction landed on partition 1
    assert await ms.fetch_offsets("g") == []
    assert await ms.txn_pending_offsets("g") == []


async def test_bumped_marker_fences_old_epoch_in_the_log(ms: Metastore) -> None:
    t = await _topic(ms)
    r = await ms.txn_init("tx", 60_000)
    assert r.txn is not None
    pid, ep = r.txn.producer_id, r.txn.producer_epoch
    await ms.txn_add_partitions("tx", pid, ep, [(t, 0)])
    await _append(ms, _txn_batch(t, 0, pid, ep, 0))
    prep = await ms.txn_prepare_end("tx", pid, ep, False, bump_epoch=True)  # a timeout
    assert prep.txn is not None and prep.txn.producer_epoch == ep + 1
    (m0,) = await _append(ms, _marker(t, 0, pid, ep + 1))
    await ms.txn_complete("tx", pid, ep + 1, [(t, 0, m0)])
    # a zombie batch of the old epoch arriving late is refused by the sequencer
    (late,) = await ms.commit_object("obj/late", 10, "a1", [_txn_batch(t, 0, pid, ep, 2)])
    assert late.error is E.INVALID_PRODUCER_EPOCH
    # the old instance is fenced at the coordinator; a KIP-360 retry with it recovers
    assert (await ms.txn_add_partitions("tx", pid, ep, [(t, 0)])).error is E.PRODUCER_FENCED
    assert (await ms.txn_init("tx", 60_000, pid, ep)).error is E.NONE
    r2 = await ms.txn_get("tx")
    assert r2 is not None and r2.producer_epoch == ep + 1  # a retry of the last bump
    new = await ms.txn_init("tx", 60_000, pid, ep + 1)
    assert new.txn is not None and new.txn.producer_epoch == ep + 2
    await ms.txn_add_partitions("tx", pid, ep + 2, [(t, 0)])
    await _append(ms, _txn_batch(t, 0, pid, ep + 2, 0))  # a new epoch starts at 0


async def test_init_with_open_transaction_is_concurrent(ms: Metastore) -> None:
    t = await _topic(ms)
    r = await ms.txn_init("tx", 60_000)
    assert r.txn is not None
    await ms.txn_add_partitions("tx", r.txn.producer_id, 0, [(t, 0)])
    busy = await ms.txn_init("tx", 60_000)
    assert busy.error is E.CONCURRENT_TRANSACTIONS and busy.txn is not None
    assert [x.transactional_id for x in await ms.txn_list([TXN_ONGOING])] == ["tx"]
    unknown = await ms.txn_add_partitions("tx", r.txn.producer_id, 0, [(t, 9)])
    assert unknown.error is E.UNKNOWN_TOPIC_OR_PARTITION and unknown.unknown == [(t, 9)]
    assert await ms.txn_verify(12345, 0, [(t, 0)]) == [E.INVALID_PRODUCER_ID_MAPPING]
    assert await ms.txn_verify(r.txn.producer_id, 3, [(t, 0)]) == [E.INVALID_PRODUCER_EPOCH]
    assert await ms.txn_verify(r.txn.producer_id, 0, [(t, 1)]) == [E.INVALID_TXN_STATE]


async def test_describe_producers(ms: Metastore) -> None:
    t = await _topic(ms)
    r = await ms.txn_init("tx", 60_000)
    assert r.txn is not None
    pid = r.txn.producer_id
    await ms.txn_add_partitions("tx", pid, 0, [(t, 0)])
    await _append(ms, batch(t, 0, 1, pid=900, epoch=0, seq=0))
    await _append(ms, _txn_batch(t, 0, pid, 0, 0))
    states = await ms.describe_producers(t, 0)
    assert {p.producer_id: (p.last_sequence, p.current_txn_start_offset) for p in states} == {
        900: (0, -1),
        pid: (1, 1),
    }


async def test_two_agents_race_for_one_transactional_id(
    ms: Metastore, metastore_url: str, clock: FakeClock
) -> None:
    """Two coordinators (a ring change) take over the same id at once: the epochs
    they hand out are distinct, exactly one of two racing aborts wins the
    prepare, and the loser is fenced at every later step."""
    t = await _topic(ms)
    other = await open_metastore(metastore_url, now_ms=clock, auto_migrate=False)
    try:
        r = await ms.txn_init("tx", 60_000)
        assert r.txn is not None
        pid = r.txn.producer_id
        await ms.txn_add_partitions("tx", pid, 0, [(t, 0)])
        await _append(ms, _txn_batch(t, 0, pid, 0, 0))
        a, b = await asyncio.gather(
            ms.txn_prepare_end("tx", pid, 0, False, bump_epoch=True),
            other.txn_prepare_end("tx", pid, 0, False, bump_epoch=True),
        )
        assert {a.error, b.error} <= {E.NONE}
        epochs = {x.txn.producer_epoch for x in (a, b) if x.txn is not None}
        assert epochs == {1}  # the second saw PrepareAbort: a retry, not a second bump
        (m0,) = await _append(ms, _marker(t, 0, pid, 1))
        c, d = await asyncio.gather(
            ms.txn_complete("tx", pid, 1, [(t, 0, m0)]),
            other.txn_complete("tx", pid, 1, [(t, 0, m0)]),
        )
        assert c.error is E.NONE and d.error is E.NONE
        (view,) = await ms.stable_offsets([(t, 0, 0)])
        assert view.aborted == [(pid, 0, m0)]  # recorded once
        inits = await asyncio.gather(*(m.txn_init("tx", 60_000) for m in (ms, other, ms, other)))
        got = sorted(x.txn.producer_epoch for x in inits if x.txn is not None)
        assert got == [2, 3, 4, 5]
        assert (await other.txn_add_partitions("tx", pid, 4, [(t, 0)])).error is E.PRODUCER_FENCED
    finally:
        await other.close()


async def test_transaction_v2_epoch_bump_per_transaction(ms: Metastore) -> None:
    """KIP-890 part 2 (EndTxn v5): every end bumps the epoch; a retry with the epoch
    from before the bump answers the current pair; an abort with nothing open still
    bumps; an exhausted epoch rolls over to a new producer id."""
    from sqlalchemy import update

    from metastore import schema as s
    from metastore.registry import MAX_PRODUCER_EPOCH

    t = await _topic(ms)
    r = await ms.txn_init("tx", 60_000)
    assert r.txn is not None
    pid, ep = r.txn.producer_id, r.txn.producer_epoch
    await ms.txn_add_partitions("tx", pid, ep, [(t, 0)])
    await _append(ms, _txn_batch(t, 0, pid, ep, 0))
    prep = await ms.txn_prepare_end("tx", pid, ep, True, bump_epoch=True)
    assert prep.txn is not None and (prep.txn.state, prep.txn.producer_epoch) == (TXN_PREPARE_COMMIT, ep + 1)
    (m0,) = await _append(ms, _marker(t, 0, pid, ep + 1))
    assert (await ms.txn_complete("tx", pid, ep + 1, [(t, 0, m0)])).error is E.NONE
    retry = await ms.txn_prepare_end("tx", pid, ep, True, bump_epoch=True)  # the answer was lost
    assert retry.error is E.NONE and retry.txn is not None and retry.txn.producer_epoch == ep + 1
    # the next transaction on the new epoch, its sequences from 0
    assert (await ms.txn_add_partitions("tx", pid, ep + 1, [(t, 0)])).error is E.NONE
    await _append(ms, _txn_batch(t, 0, pid, ep + 1, 0))
    assert (await ms.txn_add_partitions("tx", pid, ep, [(t, 0)])).error is E.PRODUCER_FENCED
    prep = await ms.txn_prepare_end("tx", pid, ep + 1, False, bump_epoch=True)
    assert prep.txn is not None and prep.txn.producer_epoch == ep + 2
    (m1,) = await _append(ms, _marker(t, 0, pid, ep + 2))
    await ms.txn_complete("tx", pid, ep + 2, [(t, 0, m1)])
    (view,) = await ms.stable_offsets([(t, 0, 0)])
    assert view.aborted == [(pid, m0 + 1, m1)] and view.last_stable_offset == m1 + 1
    # an abort with nothing open (CompleteAbort: a retry, no bump; CompleteCommit,
    # Empty: an empty abort with the epoch bumped); a commit with nothing open is refused
    same = await ms.txn_prepare_end("tx", pid, ep + 2, False, bump_epoch=True)
    assert same.txn is not None and (same.txn.state, same.txn.producer_epoch) == (TXN_COMPLETE_ABORT, ep + 2)
    r2 = await ms.txn_init("tx2", 60_000)
    assert r2.txn is not None
    pid2 = r2.txn.producer_id
    assert (await ms.txn_prepare_end("tx2", pid2, 0, True, bump_epoch=True)).error is E.INVALID_TXN_STATE
    empty = await ms.txn_prepare_end("tx2", pid2, 0, False, bump_epoch=True)
    assert empty.txn is not None and (empty.txn.state, empty.txn.producer_epoch) == (TXN_PREPARE_ABORT, 1)
    assert (await ms.txn_complete("tx2", pid2, 1, [])).error is E.NONE
    assert (await ms.txn_prepare_end("tx2", pid2, 1, False)).error is E.NONE  # v1: a retry
    # rollover: the epoch exhausted, the end answers a new producer id at epoch 0
    async with ms._write() as conn:  # type: ignore[attr-defined]
        await conn.execute(
            update(s.producers).where(s.producers.c.transactional_id == "tx2").values(producer_epoch=MAX_PRODUCER_EPOCH - 1)
        )
    await ms.txn_add_partitions("tx2", pid2, MAX_PRODUCER_EPOCH - 1, [(t, 1)])
    last = await ms.txn_prepare_end("tx2", pid2, MAX_PRODUCER_EPOCH - 1, True, bump_epoch=True)
    assert last.txn is not None and last.txn.producer_id != pid2 and last.txn.producer_epoch == 0
    assert (last.txn.last_producer_id, last.txn.last_producer_epoch) == (pid2, MAX_PRODUCER_EPOCH - 1)


async def test_aborted_ranges_pruned_below_the_log_start(ms: Metastore) -> None:
    """Retention (or DeleteRecords then a retention pass) drops the aborted ranges
    that end below the log start offset; the others stay."""
    t = await _topic(ms, partitions=1)
    r = await ms.txn_init("tx", 60_000)
    assert r.txn is not None
    pid = r.txn.producer_id
    markers = []
    for n in range(2):
        await ms.txn_add_partitions("tx", pid, n, [(t, 0)])
        await _append(ms, _txn_batch(t, 0, pid, n, 0))
        prep = await ms.txn_prepare_end("tx", pid, n, False, bump_epoch=True)
        assert prep.txn is not None
        (m,) = await _append(ms, _marker(t, 0, pid, n + 1))
        await ms.txn_complete("tx", pid, n + 1, [(t, 0, m)])
        markers.append(m)
    (view,) = await ms.stable_offsets([(t, 0, 0)])
    assert view.aborted == [(pid, 0, markers[0]), (pid, markers[0] + 1, markers[1])]
    assert (await ms.delete_records(t, 0, markers[0])).error is E.NONE  # the marker itself stays
    await ms.enforce_retention(t, 0)
    (view,) = await ms.stable_offsets([(t, 0, 0)])
    assert len(view.aborted) == 2
    assert (await ms.delete_records(t, 0, markers[0] + 1)).error is E.NONE
    await ms.enforce_retention(t, 0)
    (view,) = await ms.stable_offsets([(t, 0, 0)])
    assert view.aborted == [(pid, markers[0] + 1, markers[1])]


async def test_stable_offsets_many_partitions_in_one_call(ms: Metastore) -> None:
    """One call over several partitions (a read_committed Fetch): two open
    transactions on one partition hold it back at the earlier one's first batch,
    aborted ranges come by first offset, unknown partitions and topics get an
    error in their place, and a partition asked twice is answered twice."""
    t = await _topic(ms, partitions=3)
    ids = []
    for name in ("ta", "tb", "tc"):
        r = await ms.txn_init(name, 60_000)
        assert r.txn is not None
        ids.append((name, r.txn.producer_id, r.txn.producer_epoch))
    (na, pa, ea), (nb, pb, eb), (nc, pc, ec) = ids
    for name, pid, ep in ids:
        assert (await ms.txn_add_partitions(name, pid, ep, [(t, 0), (t, 1)])).error is E.NONE
    await _append(ms, batch(t, 0, 2))  # 0-1
    await _append(ms, _txn_batch(t, 0, pc, ec, 0))  # 2-3 (tc, aborted below)
    await _append(ms, _txn_batch(t, 0, pb, eb, 0))  # 4-5 (tb, stays open)
    await _append(ms, _txn_batch(t, 0, pa, ea, 0))  # 6-7 (ta, aborted below)
    await _append(ms, _txn_batch(t, 1, pa, ea, 2))  # partition 1: 0-1 (ta)
    for name, pid, ep in ((nc, pc, ec), (na, pa, ea)):
        assert (await ms.txn_prepare_end(name, pid, ep, False)).error is E.NONE
        (m0,) = await _append(ms, _marker(t, 0, pid, ep))
        (m1,) = await _append(ms, _marker(t, 1, pid, ep))
        assert (await ms.txn_complete(name, pid, ep, [(t, 0, m0), (t, 1, m1)])).error is E.NONE
    # partition 0: 0-1 plain, 2-3 tc (aborted, marker 8), 4-5 tb (open), 6-7 ta (aborted, marker 9)
    await _append(ms, _txn_batch(t, 2, pb, eb, 2))  # partition 2 is not in tb's transaction
    views = await ms.stable_offsets([(t, 0, 0), (t, 9, 0), (t, 1, 0), (uuid.uuid4(), 0, 0), (t, 0, 4), (t, 2, 0)])
    v0, bad_part, v1, bad_topic, v0_late, v2 = views
    assert (v0.error, v0.last_stable_offset, v0.high_watermark) == (E.NONE, 4, 10)
    assert v0.aborted == [(pc, 2, 8)]  # ta's range starts at 6 >= the last stable offset 4
    assert bad_part.error is E.UNKNOWN_TOPIC_OR_PARTITION
    assert bad_topic.error is E.UNKNOWN_TOPIC_OR_PARTITION
    assert (v1.last_stable_offset, v1.high_watermark, v1.aborted) == (4, 4, [(pa, 0, 3)])  # markers 2 (tc), 3 (ta)
    assert (v0_late.last_stable_offset, v0_late.aborted) == (4, [(pc, 2, 8)])  # tc's marker (8) is past 4
    # tb ends: nothing is held back any more and both aborted ranges show, by first offset
    assert (await ms.txn_prepare_end(nb, pb, eb, True)).error is E.NONE
    (m0,) = await _append(ms, _marker(t, 0, pb, eb))
    (m1,) = await _append(ms, _marker(t, 1, pb, eb))
    assert (await ms.txn_complete(nb, pb, eb, [(t, 0, m0), (t, 1, m1)])).error is E.NONE
    (v0,) = await ms.stable_offsets([(t, 0, 0)])
    assert (v0.last_stable_offset, v0.aborted) == (11, [(pc, 2, 8), (pa, 6, 9)])
    assert v2.last_stable_offset == v2.high_watermark
    assert await ms.stable_offsets([]) == []


async def test_topic_offsets_say_whether_the_topic_holds_transaction_state(ms: Metastore) -> None:
    """``topic_offsets``: the watermarks of ``partition_offsets`` and whether no partition
    is in an open transaction and none has an aborted range (a read_committed Fetch
    then needs no ``stable_offsets``). Joining a transaction is enough to clear it;
    a commit sets it again, an abort only once its range is pruned."""
    t = await _topic(ms)
    other = await _topic(ms, "other")
    await _append(ms, batch(t, 0, 3))
    free = await ms.topic_offsets(t)
    assert (free.partitions, free.txn_free) == (await ms.partition_offsets(t), True)
    assert free.partitions == [(0, 0, 3), (1, 0, 0)]
    r = await ms.txn_init("tx", 60_000)
    assert r.txn is not None
    pid, ep = r.txn.producer_id, r.txn.producer_epoch
    assert (await ms.txn_add_partitions("tx", pid, ep, [(t, 1)])).error is E.NONE
    assert (await ms.topic_offsets(t)).txn_free is False
    assert (await ms.topic_offsets(other)).txn_free is True
    await _append(ms, _txn_batch(t, 1, pid, ep, 0))
    assert (await ms.txn_prepare_end("tx", pid, ep, True)).error is E.NONE
    (m,) = await _append(ms, _marker(t, 1, pid, ep))
    assert (await ms.txn_complete("tx", pid, ep, [(t, 1, m)])).error is E.NONE
    done = await ms.topic_offsets(t)
    assert (done.partitions, done.txn_free) == ([(0, 0, 3), (1, 0, 3)], True)
    # An aborted transaction leaves a range: not free while it is above the log start.
    assert (await ms.txn_add_partitions("tx", pid, ep, [(t, 0)])).error is E.NONE
    await _append(ms, _txn_batch(t, 0, pid, ep, 2))
    assert (await ms.txn_prepare_end("tx", pid, ep, False)).error is E.NONE
    (m,) = await _append(ms, _marker(t, 0, pid, ep))
    assert (await ms.txn_complete("tx", pid, ep, [(t, 0, m)])).error is E.NONE
    assert (await ms.topic_offsets(t)).txn_free is False
    assert (await ms.delete_records(t, 0, m + 1)).error is E.NONE
    await ms.enforce_retention(t, 0)
    assert (await ms.topic_offsets(t)).txn_free is True
    unknown = await ms.topic_offsets(uuid.uuid4())
    assert (unknown.partitions, unknown.txn_free) == ([], True)
