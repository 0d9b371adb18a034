"""Differential test: random producer traffic gives identical answers on SQLite
(Python sequencer) and Postgres (plpgsql sequencer).

The traffic mixes in-order batches, retries of recent and old batches, sequence
gaps, stale epochs, epoch bumps (valid and not) and non-idempotent batches, in
objects of 1-6 batches over 3 partitions.
"""

from __future__ import annotations

import random
import uuid
from pathlib import Path

import pytest

from metastore import BatchToCommit, ObjectToCommit, open_metastore
from metastore.sequencer import INT32_MAX

pytestmark = pytest.mark.postgres

Template = tuple[int, int, int, int, int]  # partition, records, pid, epoch, seq


def random_traffic(seed: int, commits: int = 120, chaos: float = 1.0) -> list[list[Template]]:
    """``chaos`` < 1: only that share of the idempotent batches may be anything
    but the next of its sequence (so that most group commits take the fast path)."""
    rng = random.Random(seed)
    epochs = {pid: 0 for pid in (11, 12, 13)}
    next_seq: dict[tuple[int, int], int] = {}
    history: list[Template] = []
    objects = []
    for _ in range(commits):
        batches: list[Template] = []
        for _ in range(rng.randint(1, 6)):
            partition, records = rng.randrange(3), rng.randint(1, 4)
            pid = rng.choice((-1, 11, 12, 13))
            if pid == -1:
                batches.append((partition, records, -1, -1, -1))
                continue
            key = (pid, partition)
            seq = next_seq.get(key, rng.choice((0, 5, INT32_MAX - 2)))
            action = rng.random() if rng.random() < chaos else 1.0
            if action < 0.15 and history:
                batches.append(rng.choice(history[-12:]))  # a retry, maybe too old
                continue
            if action < 0.22:
                seq = (seq + rng.randint(1, 3)) % (INT32_MAX + 1)  # a gap
            elif action < 0.27:
                batches.append((partition, records, pid, max(0, epochs[pid] - 1), seq))  # stale
                continue
            elif action < 0.32:
                epochs[pid] += 1
                seq = 0 if rng.random() < 0.7 else 7
            template = (partition, records, pid, epochs[pid], seq)
            batches.append(template)
            history.append(template)
            last = seq + records - 1
            next_seq[key] = last + 1 - (INT32_MAX + 1) if last + 1 > INT32_MAX else last + 1
        objects.append(batches)
    return objects


async def replay(
    url: str, traffic: list[list[Template]], migrate: bool, group_seed: int | None = None
) -> list[object]:
    """Commit ``traffic`` object by object, or (``group_seed``) in group commits of
    1-8 objects, with now and then a key repeated in a group or from before."""
    ms = await open_metastore(url, now_ms=lambda: 1000, auto_migrate=migrate)
    try:
        created = await ms.create_topic("parity", 3)
        assert created.topic is not None
        topic_id = created.topic.id
        answers: list[object] = []
        objects = [
            ObjectToCommit(
                f"o{n}-{uuid.uuid4()}",
                10,
                "a",
                [
                    BatchToCommit(topic_id, p, 0, 10, records, records - 1, 0, 0, pid, epoch, seq)
                    for p, records, pid, epoch, seq in templates
                ],
            )
            for n, templates in enumerate(traffic)
        ]
        if group_seed is None:
            for o in objects:
                results = await ms.commit_object(*o)
                answers.append([(r.error, r.base_offset, r.log_start_offset) for r in results])
        else:
            rng = random.Random(group_seed)
            pos = 0
            while pos < len(objects):
                group = objects[pos : pos + rng.randint(1, 8)]
                pos += len(group)
                extra = []
                if rng.random() < 0.2:  # an object key seen before: already committed
                    extra.append(ObjectToCommit(rng.choice(objects[:pos]).key, 1, "a", group[0].batches))
                outcome = await ms.commit_objects([*group, *extra])
                assert len(outcome) == len(group) + len(extra)
                assert all(x.already_committed for x in outcome[len(group) :])
                for res in outcome[: len(group)]:
                    assert not res.already_committed
                    answers.append([(r.error, r.base_offset, r.log_start_offset) for r in res.results])
        for p in range(3):
            found = await ms.find_batches(topic_id, p, 0, 1 << 30)
            answers.append([(b.base_offset, b.last_offset) for b in found.batches])
        return answers
    finally:
        await ms.close()


@pytest.mark.parametrize("seed", range(4))
async def test_sqlite_and_postgres_sequencers_agree(
    seed: int, tmp_path: Path, postgres_url: str
) -> None:
    traffic = random_traffic(seed)
    on_sqlite = await replay(f"sqlite:///{tmp_path / 'p.db'}", traffic, migrate=True)
    on_postgres = await replay(postgres_url, traffic, migrate=False)
    assert on_sqlite == on_postgres
    outcomes = {e for answer in on_sqlite[: len(traffic)] for e, _, _ in answer}  # type: ignore[attr-defined]
    assert {0, 45, 47} <= {int(e) for e in outcomes}  # NONE, OUT_OF_ORDER, INVALID_EPOCH seen


@pytest.mark.parametrize("seed", range(6))
async def test_group_commits_agree_with_one_by_one(
    seed: int, tmp_path: Path, postgres_url: str
) -> None:
    """Group commit (Python on SQLite, plpgsql on Postgres) gives every batch the
    answer it gets when the objects are committed one at a time."""
    traffic = random_traffic(seed + 100, commits=160, chaos=(1.0, 0.02, 0.0)[seed % 3])
    one_by_one = await replay(f"sqlite:///{tmp_path / 'a.db'}", traffic, migrate=True)
    grouped_sqlite = await replay(
        f"sqlite:///{tmp_path / 'b.db'}", traffic, migrate=True, group_seed=seed
    )
    grouped_postgres = await replay(postgres_url, traffic, migrate=False, group_seed=seed)
    assert grouped_sqlite == one_by_one
    assert grouped_postgres == one_by_one
