"""Differential test of the group commit's producer check (migration 0017).

``test_sequencer_parity`` replays random idempotent traffic in groups of a few
dozen batches, which Postgres commits on its small path. Here groups go through
the COPY paths (``COPY_MIN_BATCHES`` lowered to 1): once the metastore knows the
high watermarks it expects, a group is COPYed at them and sealed by
``floe_group_seal``; before that, and after every decline, a group goes through
``floe_group_begin``. Both check each (partition, producer) key's sequence,
keep the key's newest five entries and decline anything else, sending the
group down the general path. The traffic alternates runs of in-order groups
(accepted) with retries of one of a key's last seven batches, a sequence gap, a
stale epoch or an epoch bump (declined, then answered from the entries the fast
paths kept: a retry of the fifth newest batch is a duplicate, of the sixth is
out of order; a new epoch's batches are checked against its own entries only).
Every batch must get the answer it gets when the objects are committed one at a
time on SQLite, and the same producer entries must be stored.
"""

from __future__ import annotations

import random
import sqlite3
import uuid
from pathlib import Path
from typing import Any

import asyncpg
import pytest

import metastore.expected_hwm as expected_hwm
import metastore.postgres as pg
from metastore import BatchToCommit, ObjectToCommit, open_metastore
from metastore.engine import asyncpg_dsn

pytestmark = pytest.mark.postgres

Template = tuple[int, int, int, int, int]  # partition, records, pid, epoch, seq
PARTITIONS = 3


def traffic(seed: int, groups: int = 120) -> list[list[list[Template]]]:
    """Groups of objects of batch templates."""
    rng = random.Random(seed)
    epochs = {pid: 0 for pid in (21, 22)}
    next_seq: dict[tuple[int, int], int] = {}
    history: dict[tuple[int, int], list[Template]] = {}
    out: list[list[list[Template]]] = []
    for g in range(groups):
        if g % 3 == 2 and history:
            key = rng.choice(sorted(history))
            pid, partition = key
            kind = rng.random()
            if kind < 0.7:  # a retry of one of the key's last 7 batches
                past = history[key]
                batch = past[-rng.randint(1, min(7, len(past)))]
            elif kind < 0.8:  # a gap
                batch = (partition, 1, pid, epochs[pid], next_seq[key] + rng.randint(1, 3))
            elif kind < 0.9:  # a stale epoch
                batch = (partition, 1, pid, epochs[pid] - 1, next_seq[key])
            else:  # an epoch bump: every partition of the producer starts again at 0
                epochs[pid] += 1
                for k in next_seq:
                    if k[0] == pid:
                        next_seq[k] = 0
                batch = (partition, 1, pid, epochs[pid], 0)
                history[key].append(batch)
                next_seq[key] = 1
            out.append([[batch]])
            continue
        objects = []
        burst = rng.random() < 0.2  # one key, 5-8 batches: more than the five kept
        for _ in range(1 if burst else rng.randint(1, 4)):
            batches: list[Template] = []
            for _ in range(rng.randint(5, 8) if burst else rng.randint(1, 6)):
                partition, records = rng.randrange(PARTITIONS), rng.randint(1, 3)
                pid = rng.choice((-1, 21, 22))
                if burst:
                    partition, pid = g % PARTITIONS, 21 + g % 2
                if pid == -1:
                    batches.append((partition, records, -1, -1, -1))
                    continue
                key = (pid, partition)
                seq = next_seq.get(key, 0)
                batch = (partition, records, pid, epochs[pid], seq)
                batches.append(batch)
                history.setdefault(key, []).append(batch)
                next_seq[key] = seq + records
            objects.append(batches)
        out.append(objects)
    return out


PRODUCER_STATE = (
    "SELECT partition, producer_id, producer_epoch, base_sequence, last_sequence, base_offset, "
    "last_offset FROM producer_batches ORDER BY partition, producer_id, base_offset"
)


async def replay(url: str, groups: list[list[list[Template]]], grouped: bool) -> list[Any]:
    ms = await open_metastore(url, now_ms=lambda: 1000, auto_migrate=not grouped)
    try:
        created = await ms.create_topic("seal", PARTITIONS)
        assert created.topic is not None
        topic_id = created.topic.id

        def obj(templates: list[Template]) -> ObjectToCommit:
            return ObjectToCommit(
                f"o-{uuid.uuid4()}",
                10,
                "a",
                [
                    BatchToCommit(topic_id, p, 0, 10, records, records - 1, 0, 0, pid, epoch, seq)
                    for p, records, pid, epoch, seq in templates
                ],
            )

        answers: list[Any] = []
        for group in groups:
            objects = [obj(t) for t in group]
            if grouped:
                outcome = await ms.commit_objects(objects)
                results = [o.results for o in outcome]
            else:
                results = [await ms.commit_object(*o) for o in objects]
            answers += [[(r.error, r.base_offset) for r in rs] for rs in results]
        for p in range(PARTITIONS):
            found = await ms.find_batches(topic_id, p, 0, 1 << 30)
            answers.append([(b.base_offset, b.last_offset) for b in found.batches])
        if grouped:  # the stored producer state too: the newest five per key
            con = await asyncpg.connect(asyncpg_dsn(url))
            try:
                answers.append([tuple(r) for r in await con.fetch(PRODUCER_STATE)])
            finally:
                await con.close()
        else:
            with sqlite3.connect(url.removeprefix("sqlite:///")) as db:
                answers.append(db.execute(PRODUCER_STATE).fetchall())
        return answers
    finally:
        await ms.close()


@pytest.mark.parametrize("seed", range(3))
async def test_sealed_groups_agree_with_one_by_one(
    seed: int, tmp_path: Path, postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    groups = traffic(seed)
    one_by_one = await replay(f"sqlite:///{tmp_path / 'a.db'}", groups, grouped=False)

    sealed: list[bool] = []
    optimistic = pg.PostgresMetastore._commit_optimistic

    async def counted(self: pg.PostgresMetastore, *args: Any, **kwargs: Any) -> Any:
        out = await optimistic(self, *args, **kwargs)
        sealed.append(out is not None)
        return out

    monkeypatch.setattr(pg, "COPY_MIN_BATCHES", 1)
    monkeypatch.setattr(expected_hwm, "MAX_PAUSE", 0)  # seal again right after a decline
    monkeypatch.setattr(pg.PostgresMetastore, "_commit_optimistic", counted)
    assert await replay(postgres_url, groups, grouped=True) == one_by_one
    assert sealed.count(True) >= 20, sealed
    assert sealed.count(False) >= 20, sealed  # every retry, gap and stale epoch
    errors = {int(e) for answer in one_by_one[: -PARTITIONS - 1] for e, _ in answer}
    assert {0, 45, 47} <= errors  # NONE, OUT_OF_ORDER_SEQUENCE, INVALID_PRODUCER_EPOCH
