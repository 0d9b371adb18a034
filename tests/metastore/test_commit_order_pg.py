"""Commits in flight together, sequenced in call order (metastore/commit_order.py).

An agent keeps two ``commit_objects`` calls in flight against Postgres; each
carries a turn from one ``CommitOrder``. The later call is started FIRST here,
so without the turns it would reach the partition rows first: an idempotent
producer's later batches would then be refused (OUT_OF_ORDER_SEQUENCE_NUMBER)
and take offsets before the earlier ones. With them, on every commit path
(one small object, a small group, the ordinary COPY group, the optimistic
group), both are accepted and the offsets follow the call order.
"""

from __future__ import annotations

import asyncio

import pytest

from metastore import BatchToCommit, ErrorCode, ObjectToCommit, open_metastore
from metastore.commit_order import CommitOrder
from metastore.postgres import COPY_MIN_BATCHES, PostgresMetastore

pytestmark = [pytest.mark.postgres]


def _object(topic_id: object, key: str, partitions: int, pid: int, seq: int, records: int = 2) -> ObjectToCommit:
    batches = [
        BatchToCommit(topic_id, p, p * 10, 10, records, records - 1, 0, 0, pid, 0, seq)  # type: ignore[arg-type]
        for p in range(partitions)
    ]
    return ObjectToCommit(key, 10 * partitions, "a", batches)


@pytest.mark.parametrize(
    ("name", "partitions", "objects", "warm"),
    [
        ("one-small", 3, 1, 0),
        ("small-group", 3, 2, 0),
        ("copy-group", COPY_MIN_BATCHES + 8, 1, 0),
        ("optimistic", COPY_MIN_BATCHES + 8, 1, 2),
    ],
)
async def test_later_call_started_first_is_sequenced_second(
    postgres_url: str, name: str, partitions: int, objects: int, warm: int
) -> None:
    meta = await open_metastore(postgres_url, auto_migrate=False, pool_size=4)
    assert isinstance(meta, PostgresMetastore) and PostgresMetastore.ordered_commits
    try:
        topic = (await meta.create_topic(name, partitions)).topic
        assert topic is not None
        pid = (await meta.init_producer_id()).producer_id
        seq = 0
        # Producer state on every partition (and, for the optimistic case, known
        # high watermarks): a later batch out of order would be refused.
        for n in range(1 + warm):
            (res,) = await meta.commit_objects([_object(topic.id, f"warm{n}", partitions, pid, seq)])
            assert all(r.error is ErrorCode.NONE for r in res.results)
            seq += 2
        hwm = 2 * (1 + warm)

        def call(tag: str) -> list[ObjectToCommit]:
            nonlocal seq
            out = []
            for i in range(objects):
                out.append(_object(topic.id, f"{tag}{i}", partitions, pid, seq))
                seq += 2
            return out

        order = CommitOrder()
        before = order.next()  # a call still in flight before both
        turn_a, turn_b = order.next(), order.next()
        objs_a, objs_b = call("a"), call("b")
        task_b = asyncio.create_task(meta.commit_objects(objs_b, turn=turn_b))
        task_a = asyncio.create_task(meta.commit_objects(objs_a, turn=turn_a))
        done, _ = await asyncio.wait([task_a, task_b], timeout=0.5)
        assert not done  # neither takes a lock before the call ahead of it is sequenced
        assert not turn_a.is_sequenced and not turn_b.is_sequenced
        before.done()
        res_a, res_b = await asyncio.wait_for(asyncio.gather(task_a, task_b), 60)
        assert turn_a.is_sequenced and turn_b.is_sequenced
        expected = hwm
        for res in [*res_a, *res_b]:
            assert not res.already_committed
            assert {r.error for r in res.results} == {ErrorCode.NONE}, name
            assert {r.base_offset for r in res.results} == {expected}, name
            expected += 2
        if warm:
            assert meta._expected.hits >= 2  # both went the optimistic way
    finally:
        await meta.close()
