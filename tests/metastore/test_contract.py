"""The metastore contract: the same tests over SQLite and PostgreSQL.

Every behaviour the agent, compactor and Spark source rely on is pinned here,
so the Python sequencer (SQLite) and the plpgsql one (Postgres) cannot drift.
"""

from __future__ import annotations

import asyncio
import uuid

import pytest
from sqlalchemy.engine import Connection

from metastore import (
    BatchToCommit,
    ErrorCode,
    Metastore,
    MetastoreError,
    ObjectAlreadyCommittedError,
    ObjectToCommit,
    TopicInfo,
    migrate,
)
from metastore.engine import create_engine
from metastore.migrate import current_revision, head_revision
from metastore.schema import metadata
from metastore.sequencer import INT32_MAX
from tests.metastore.helpers import FakeClock, batch

E = ErrorCode


def key() -> str:
    return f"obj/{uuid.uuid4()}"


async def make_topic(
    ms: Metastore, name: str = "t", partitions: int = 3, **config: str
) -> TopicInfo:
    result = await ms.create_topic(name, partitions, config)
    assert result.error is E.NONE, result.message
    assert result.topic is not None
    return result.topic


# -- migrations ----------------------------------------------------------------------


def _schema_diff(conn: Connection) -> list[object]:
    from alembic.autogenerate import compare_metadata
    from alembic.runtime.migration import MigrationContext

    context = MigrationContext.configure(conn, opts={"compare_type": True})
    return [d for d in compare_metadata(context, metadata) if "floe_alembic_version" not in str(d)]


async def test_migrations_idempotent_and_match_schema(metastore_url: str) -> None:
    await migrate(metastore_url)
    await migrate(metastore_url)
    assert await current_revision(metastore_url) == head_revision()
    engine = create_engine(metastore_url)
    try:
        async with engine.connect() as conn:
            assert await conn.run_sync(_schema_diff) == []
    finally:
        await engine.dispose()


# -- topics --------------------------------------------------------------------------


async def test_topic_crud(ms: Metastore, clock: FakeClock) -> None:
    topic = await make_topic(ms, "orders", 4, **{"retention.ms": "1000"})
    assert topic.partitions == 4 and topic.config == {"retention.ms": "1000"}
    assert topic.created_at_ms == clock.now
    assert await ms.get_topic("orders") == topic
    assert await ms.get_topic(topic.id) == topic
    await make_topic(ms, "audit", 1)
    assert [t.name for t in await ms.list_topics()] == ["audit", "orders"]

    again = await ms.create_topic("orders", 1)
    assert again.error is E.TOPIC_ALREADY_EXISTS

    deleted = await ms.delete_topic("orders")
    assert deleted.error is E.NONE
    assert await ms.get_topic("orders") is None
    assert await ms.get_topic(topic.id) is None
    assert (await ms.delete_topic("orders")).error is E.UNKNOWN_TOPIC_OR_PARTITION
    recreated = await make_topic(ms, "orders", 2)
    assert recreated.id != topic.id


@pytest.mark.parametrize(
    ("name", "partitions", "rf", "config", "error"),
    [
        ("", 1, -1, {}, E.INVALID_TOPIC_EXCEPTION),
        ("..", 1, -1, {}, E.INVALID_TOPIC_EXCEPTION),
        ("a/b", 1, -1, {}, E.INVALID_TOPIC_EXCEPTION),
        ("x" * 250, 1, -1, {}, E.INVALID_TOPIC_EXCEPTION),
        ("ok", 0, -1, {}, E.INVALID_PARTITIONS),
        ("ok", -5, -1, {}, E.INVALID_PARTITIONS),
        ("ok", 1, 0, {}, E.INVALID_REPLICATION_FACTOR),
        ("ok", 1, -1, {"no.such.key": "1"}, E.INVALID_CONFIG),
        ("ok", 1, -1, {"retention.ms": "soon"}, E.INVALID_CONFIG),
        ("ok", 1, -1, {"cleanup.policy": "shred"}, E.INVALID_CONFIG),
        ("ok", 1, -1, {"message.timestamp.type": "Wallclock"}, E.INVALID_CONFIG),
    ],
)
async def test_create_topic_validation(
    ms: Metastore, name: str, partitions: int, rf: int, config: dict[str, str], error: ErrorCode
) -> None:
    result = await ms.create_topic(name, partitions, config, replication_factor=rf)
    assert result.error is error
    assert result.message
    assert await ms.list_topics() == []


async def test_create_topic_defaults_and_validate_only(ms: Metastore) -> None:
    dry = await ms.create_topic("dry", 3, {"cleanup.policy": "compact,delete"}, validate_only=True)
    assert dry.error is E.NONE and await ms.get_topic("dry") is None
    default = await ms.create_topic("legal.Name_-9", -1, replication_factor=3)
    assert default.error is E.NONE and default.topic is not None and default.topic.partitions == 1


async def test_create_topic_dot_underscore_collision(ms: Metastore) -> None:
    await make_topic(ms, "a.x", 1)
    clash = await ms.create_topic("a_x", 1)
    assert clash.error is E.INVALID_TOPIC_EXCEPTION and clash.message and "a.x" in clash.message
    assert (await ms.create_topic("a_x", 1, validate_only=True)).error is E.INVALID_TOPIC_EXCEPTION
    assert (await ms.create_topic("a-x", 1)).error is E.NONE  # '-' is not part of the rule
    assert (await ms.create_topic("a.x", 1)).error is E.TOPIC_ALREADY_EXISTS
    assert (await ms.delete_topic("a.x")).error is E.NONE
    assert (await ms.create_topic("a_x", 1)).error is E.NONE  # a deleted topic does not collide


async def test_add_partitions(ms: Metastore) -> None:
    topic = await make_topic(ms, "t", 2)
    assert (await ms.add_partitions("t", 2)).error is E.INVALID_PARTITIONS
    assert (await ms.add_partitions("t", 1)).error is E.INVALID_PARTITIONS
    assert (await ms.add_partitions("nope", 5)).error is E.UNKNOWN_TOPIC_OR_PARTITION
    assert (await ms.add_partitions("t", 5, validate_only=True)).error is E.NONE
    assert (await ms.get_topic("t")).partitions == 2  # type: ignore[union-attr]
    grown = await ms.add_partitions("t", 5)
    assert grown.error is E.NONE and grown.topic is not None and grown.topic.partitions == 5
    results = await ms.commit_object(key(), 100, "a", [batch(topic.id, 4)])
    assert results[0].error is E.NONE and results[0].base_offset == 0


async def test_alter_and_describe_config(ms: Metastore) -> None:
    await make_topic(ms, "t", 1, **{"retention.ms": "1000"})
    described = await ms.describe_topic_config("t")
    entries = {e.name: e for e in described.entries}
    assert entries["retention.ms"].value == "1000" and not entries["retention.ms"].is_default
    assert entries["cleanup.policy"].value == "delete" and entries["cleanup.policy"].is_default
    assert entries["max.message.bytes"].value == "1048588"

    result = await ms.alter_topic_config("t", {"retention.bytes": "5", "retention.ms": None})
    assert result.error is E.NONE
    assert (await ms.get_topic("t")).config == {"retention.bytes": "5"}  # type: ignore[union-attr]
    result = await ms.alter_topic_config("t", {"segment.ms": "10"}, incremental=False)
    assert (await ms.get_topic("t")).config == {"segment.ms": "10"}  # type: ignore[union-attr]
    assert (await ms.alter_topic_config("t", {"bogus": "1"})).error is E.INVALID_CONFIG
    assert (await ms.alter_topic_config("t", {"retention.ms": "x"})).error is E.INVALID_CONFIG
    assert (
        await ms.alter_topic_config("t", {"retention.ms": "1"}, validate_only=True)
    ).error is E.NONE
    assert (await ms.get_topic("t")).config == {"segment.ms": "10"}  # type: ignore[union-attr]
    assert (
        await ms.alter_topic_config("nope", {"retention.ms": "1"})
    ).error is E.UNKNOWN_TOPIC_OR_PARTITION
    assert (await ms.describe_topic_config("nope")).error is E.UNKNOWN_TOPIC_OR_PARTITION


# -- commit ----------------------------------------------------------------------------


async def test_commit_assigns_contiguous_offsets(ms: Metastore, clock: FakeClock) -> None:
    a = await make_topic(ms, "a", 2)
    b = await make_topic(ms, "b", 1)
    batches = [
        batch(a.id, 0, 10, pos=0),
        batch(b.id, 0, 3, pos=100),
        batch(a.id, 1, 1, pos=200),
        batch(a.id, 0, 5, pos=300),
        batch(b.id, 0, 1, pos=400),
    ]
    results = await ms.commit_object(key(), 500, "agent-1", batches)
    assert [(r.error, r.base_offset) for r in results] == [
        (E.NONE, 0),
        (E.NONE, 0),
        (E.NONE, 0),
        (E.NONE, 10),
        (E.NONE, 3),
    ]
    assert all(r.log_append_time_ms == clock.now and r.log_start_offset == 0 for r in results)
    clock.advance(10)
    results = await ms.commit_object(key(), 100, "agent-2", [batch(a.id, 0, 2), batch(b.id, 0, 1)])
    assert [r.base_offset for r in results] == [15, 4]
    assert results[0].log_append_time_ms == clock.now
    assert (await ms.list_offsets(a.id, 0, -1)).offset == 17
    assert (await ms.list_offsets(a.id, 1, -1)).offset == 1
    assert (await ms.list_offsets(b.id, 0, -1)).offset == 5


async def test_commit_per_batch_errors(ms: Metastore) -> None:
    t = await make_topic(ms, "t", 1)
    gone = await make_topic(ms, "gone", 1)
    await ms.delete_topic("gone")
    results = await ms.commit_object(
        key(),
        100,
        "a",
        [
            batch(t.id, 5),
            batch(t.id, 0, 2),
            batch(uuid.uuid4(), 0),
            batch(gone.id, 0),
            batch(t.id, 0),
        ],
    )
    assert [(r.error, r.base_offset) for r in results] == [
        (E.UNKNOWN_TOPIC_OR_PARTITION, -1),
        (E.NONE, 0),
        (E.UNKNOWN_TOPIC_OR_PARTITION, -1),
        (E.UNKNOWN_TOPIC_OR_PARTITION, -1),
        (E.NONE, 2),
    ]


async def test_object_with_no_stored_batch_is_registered_deleting(
    ms: Metastore, clock: FakeClock
) -> None:
    k = key()
    results = await ms.commit_object(k, 100, "a", [batch(uuid.uuid4(), 0)])
    assert results[0].error is E.UNKNOWN_TOPIC_OR_PARTITION
    info = await ms.get_object(k)
    assert info is not None and info.state == "deleting" and info.deleting_since_ms == clock.now
    assert await ms.commit_object(key(), 0, "a", []) == []


async def test_commit_same_key_twice_raises(ms: Metastore) -> None:
    t = await make_topic(ms, "t", 1)
    k = key()
    await ms.commit_object(k, 100, "a", [batch(t.id, 0)])
    with pytest.raises(ObjectAlreadyCommittedError):
        await ms.commit_object(k, 100, "a", [batch(t.id, 0)])
    assert (await ms.list_offsets(t.id, 0, -1)).offset == 1  # nothing of the failed commit stayed


async def test_group_commit(ms: Metastore, clock: FakeClock) -> None:
    """Objects committed together get what they would get one after the other;
    a key already registered (or repeated in the group) is reported, not raised,
    and the rest of the group still commits."""
    t = await make_topic(ms, "t", 2)
    old = key()
    await ms.commit_object(old, 10, "a", [batch(t.id, 0, 2)])
    k1, k2, k3, k4 = key(), key(), key(), key()
    first = batch(t.id, 1, 3, pid=7, epoch=0, seq=0)
    outcome = await ms.commit_objects(
        [
            ObjectToCommit(k1, 100, "a", [batch(t.id, 0, 1), first, batch(t.id, 0, 4)]),
            ObjectToCommit(old, 100, "b", [batch(t.id, 0, 9)]),
            ObjectToCommit(k2, 100, "b", [batch(t.id, 1, 2), first, batch(uuid.uuid4(), 0)]),
            ObjectToCommit(k1, 100, "c", [batch(t.id, 0, 9)]),
            ObjectToCommit(k3, 100, "c", [batch(t.id, 1, 1, pid=7, epoch=0, seq=9)]),
            ObjectToCommit(k4, 100, "d", []),
        ]
    )
    assert [o.already_committed for o in outcome] == [False, True, False, True, False, False]
    assert [[(r.error, r.base_offset) for r in o.results] for o in outcome] == [
        [(E.NONE, 2), (E.NONE, 0), (E.NONE, 3)],
        [],
        [(E.NONE, 3), (E.NONE, 0), (E.UNKNOWN_TOPIC_OR_PARTITION, -1)],  # in-group duplicate
        [],
        [(E.OUT_OF_ORDER_SEQUENCE_NUMBER, -1)],
        [],
    ]
    assert all(r.log_append_time_ms == clock.now for o in outcome for r in o.results)
    assert (await ms.list_offsets(t.id, 0, -1)).offset == 7
    assert (await ms.list_offsets(t.id, 1, -1)).offset == 5
    for k, state in ((k1, "live"), (k2, "live"), (k3, "deleting"), (k4, "deleting")):
        info = await ms.get_object(k)
        assert info is not None and info.state == state, (k, info)
    found = await ms.find_batches(t.id, 1, 0, 1 << 20)
    assert [(b.object_key, b.base_offset, b.last_offset) for b in found.batches] == [
        (k1, 0, 2),
        (k2, 3, 4),
    ]
    # The in-group state is the producer's: its retry still maps to offset 0.
    again = await ms.commit_object(key(), 1, "a", [first])
    assert [(r.error, r.base_offset) for r in again] == [(E.NONE, 0)]
    assert await ms.commit_objects([]) == []


async def test_group_commit_across_many_partitions(ms: Metastore) -> None:
    """A group touching 1,300 partitions of two topics (the width a 1,000-partition
    topic gives every segment): every partition advances by what it got, with its
    bytes, and a partition that does not exist fails alone."""
    a, b = await make_topic(ms, "a", 600), await make_topic(ms, "b", 700)
    parts = [(a.id, p) for p in range(600)] + [(b.id, p) for p in range(700)]
    await ms.commit_object(key(), 1, "x", [batch(a.id, 5, 3, size=10)])
    first = [batch(t, p, 2, size=100) for t, p in parts]
    second = [batch(t, p, 1 + p % 3, size=50) for t, p in parts] + [batch(b.id, 700)]
    one, two = await ms.commit_objects([ObjectToCommit(key(), 1, "x", first), ObjectToCommit(key(), 1, "x", second)])
    assert [r.base_offset for r in one.results] == [3 if (t, p) == (a.id, 5) else 0 for t, p in parts]
    assert [r.base_offset for r in two.results[:-1]] == [r.base_offset + 2 for r in one.results]
    assert two.results[-1].error is E.UNKNOWN_TOPIC_OR_PARTITION
    summaries = {(s.topic_id, s.partition): s for s in await ms.partition_summaries()}
    for (t, p), r in zip(parts, two.results, strict=False):
        s = summaries[(t, p)]
        assert s.high_watermark == r.base_offset + 1 + p % 3, (t, p)
        assert s.bytes == 150 + (10 if (t, p) == (a.id, 5) else 0), (t, p)
    offsets = await ms.partition_offsets(b.id)
    assert [o.high_watermark for o in offsets] == [3 + p % 3 for p in range(700)]


# -- find_batches --------------------------------------------------------------------


async def test_find_batches_boundaries(ms: Metastore) -> None:
    t = await make_topic(ms, "t", 1)
    k1, k2 = key(), key()
    await ms.commit_object(
        k1, 300, "a", [batch(t.id, 0, 10, pos=0, size=100), batch(t.id, 0, 5, pos=100, size=200)]
    )
    await ms.commit_object(
        k2, 50, "a", [batch(t.id, 0, 1, pos=0, size=50)]
    )  # offsets 0-9, 10-14, 15

    found = await ms.find_batches(t.id, 0, 3, 1_000_000)
    assert found.error is E.NONE and (found.log_start_offset, found.high_watermark) == (0, 16)
    assert [
        (b.object_key, b.byte_pos, b.byte_len, b.base_offset, b.last_offset, b.record_count)
        for b in found.batches
    ] == [
        (k1, 0, 100, 0, 9, 10),
        (k1, 100, 200, 10, 14, 5),
        (k2, 0, 50, 15, 15, 1),
    ]
    assert [b.base_offset for b in (await ms.find_batches(t.id, 0, 14, 1_000_000)).batches] == [
        10,
        15,
    ]
    assert [b.base_offset for b in (await ms.find_batches(t.id, 0, 10, 1)).batches] == [
        10
    ]  # at least one
    assert [b.base_offset for b in (await ms.find_batches(t.id, 0, 0, 300)).batches] == [0, 10]
    assert [b.base_offset for b in (await ms.find_batches(t.id, 0, 0, 299)).batches] == [0]
    assert [
        b.base_offset for b in (await ms.find_batches(t.id, 0, 0, 10_000, max_batches=2)).batches
    ] == [0, 10]

    at_hwm = await ms.find_batches(t.id, 0, 16, 1000)
    assert at_hwm.error is E.NONE and at_hwm.batches == [] and at_hwm.high_watermark == 16
    assert (await ms.find_batches(t.id, 0, 17, 1000)).error is E.OFFSET_OUT_OF_RANGE
    assert (await ms.find_batches(t.id, 0, -1, 1000)).error is E.OFFSET_OUT_OF_RANGE
    assert (await ms.find_batches(t.id, 1, 0, 1000)).error is E.UNKNOWN_TOPIC_OR_PARTITION

    await ms.delete_records(t.id, 0, 12)
    below = await ms.find_batches(t.id, 0, 11, 1000)
    assert below.error is E.OFFSET_OUT_OF_RANGE and below.log_start_offset == 12
    inside = await ms.find_batches(t.id, 0, 12, 1000)
    assert [b.base_offset for b in inside.batches] == [10, 15]  # the whole batch containing 12


async def test_find_batches_many_is_find_batches_each(ms: Metastore) -> None:
    t = await make_topic(ms, "t", 3)
    await ms.commit_object(
        key(), 350, "a",
        [batch(t.id, 0, 10, pos=0, size=100), batch(t.id, 0, 5, pos=100, size=200), batch(t.id, 2, 3, pos=300, size=50)],
    )  # fmt: skip
    await ms.delete_records(t.id, 0, 12)
    wants = [
        (t.id, p, o, m)
        for p in (0, 1, 2, 3)
        for o in (-1, 0, 3, 11, 12, 14, 15, 16)
        for m in (1, 250, 10_000)
    ] + [(uuid.uuid4(), 0, 0, 100)]
    assert await ms.find_batches_many(wants) == [await ms.find_batches(*w) for w in wants]
    assert await ms.find_batches_many(wants, max_batches=1) == [
        await ms.find_batches(*w, max_batches=1) for w in wants
    ]
    assert await ms.find_batches_many([]) == []


async def test_find_batches_empty_partition(ms: Metastore) -> None:
    t = await make_topic(ms, "t", 1)
    found = await ms.find_batches(t.id, 0, 0, 1000)
    assert (found.error, found.log_start_offset, found.high_watermark, found.batches) == (
        E.NONE,
        0,
        0,
        [],
    )


# -- list_offsets / delete_records ---------------------------------------------------------


async def test_list_offsets(ms: Metastore, clock: FakeClock) -> None:
    t = await make_topic(ms, "t", 1)
    empty = await ms.list_offsets(t.id, 0, -3)
    assert (empty.offset, empty.timestamp) == (-1, -1)
    await ms.commit_object(
        key(),
        1,
        "a",
        [batch(t.id, 0, 10, ts=100), batch(t.id, 0, 10, ts=300), batch(t.id, 0, 10, ts=200)],
    )
    assert (await ms.list_offsets(t.id, 0, -2)).offset == 0
    assert (await ms.list_offsets(t.id, 0, -1)).offset == 30
    max_ts = await ms.list_offsets(t.id, 0, -3)
    assert (max_ts.offset, max_ts.timestamp) == (19, 300)
    by_ts = await ms.list_offsets(t.id, 0, 150)
    assert (by_ts.offset, by_ts.timestamp) == (10, 300)
    assert (await ms.list_offsets(t.id, 0, 0)).offset == 0
    assert (await ms.list_offsets(t.id, 0, 301)).offset == -1
    assert (await ms.list_offsets(t.id, 7, -1)).error is E.UNKNOWN_TOPIC_OR_PARTITION
    # from_offset leaves out the batches starting below it (the agent's look past a
    # batch straddling the log start offset)
    past = await ms.list_offsets(t.id, 0, -3, from_offset=1)
    assert (past.offset, past.timestamp) == (19, 300)
    past = await ms.list_offsets(t.id, 0, -3, from_offset=11)
    assert (past.offset, past.timestamp) == (29, 200)
    assert (await ms.list_offsets(t.id, 0, 50, from_offset=10)).offset == 10
    assert (await ms.list_offsets(t.id, 0, -3, from_offset=30)).offset == -1
    await ms.delete_records(t.id, 0, 5)
    assert (await ms.list_offsets(t.id, 0, -2)).offset == 5
    assert (await ms.list_offsets(t.id, 0, 0)).offset == 5


async def test_partition_offsets(ms: Metastore) -> None:
    t = await make_topic(ms, "t", 3)
    await ms.commit_object(key(), 1, "a", [batch(t.id, 1, 10), batch(t.id, 2, 4), batch(t.id, 1, 3)])
    await ms.delete_records(t.id, 1, 6)
    assert await ms.partition_offsets(t.id) == [(0, 0, 0), (1, 6, 13), (2, 0, 4)]
    assert (await ms.add_partitions("t", 4)).error is E.NONE
    assert [o.partition for o in await ms.partition_offsets(t.id)] == [0, 1, 2, 3]
    await ms.delete_topic("t")
    assert await ms.partition_offsets(t.id) == []
    assert await ms.partition_offsets(uuid.uuid4()) == []


async def test_list_offsets_log_append_time(ms: Metastore, clock: FakeClock) -> None:
    t = await make_topic(ms, "t", 1, **{"message.timestamp.type": "LogAppendTime"})
    await ms.commit_object(key(), 1, "a", [batch(t.id, 0, 2, ts=5)])
    clock.advance(1000)
    await ms.commit_object(key(), 1, "a", [batch(t.id, 0, 2, ts=5)])
    found = await ms.list_offsets(t.id, 0, clock.now)
    assert (found.offset, found.timestamp) == (2, clock.now)


async def test_delete_records(ms: Metastore) -> None:
    t = await make_topic(ms, "t", 1)
    await ms.commit_object(key(), 1, "a", [batch(t.id, 0, 10)])
    assert (await ms.delete_records(t.id, 0, 4)).low_watermark == 4
    assert (await ms.delete_records(t.id, 0, 2)).low_watermark == 4  # never moves back
    assert (await ms.delete_records(t.id, 0, 11)).error is E.OFFSET_OUT_OF_RANGE
    assert (await ms.delete_records(t.id, 0, -7)).error is E.OFFSET_OUT_OF_RANGE
    assert (await ms.delete_records(t.id, 3, 1)).error is E.UNKNOWN_TOPIC_OR_PARTITION
    result = await ms.delete_records(t.id, 0, -1)
    assert (result.error, result.low_watermark) == (E.NONE, 10)
    results = await ms.commit_object(key(), 1, "a", [batch(t.id, 0)])
    assert (results[0].base_offset, results[0].log_start_offset) == (10, 10)


# -- idempotent producers ------------------------------------------------------------------


async def test_duplicate_retry_returns_original_offset(ms: Metastore) -> None:
    t = await make_topic(ms, "t", 1)
    first = await ms.commit_object(key(), 1, "a", [batch(t.id, 0, 3, pid=7, epoch=0, seq=0)])
    await ms.commit_object(key(), 1, "a", [batch(t.id, 0, 2, pid=7, epoch=0, seq=3)])
    retry = await ms.commit_object(key(), 1, "a", [batch(t.id, 0, 3, pid=7, epoch=0, seq=0)])
    assert (retry[0].error, retry[0].base_offset) == (E.NONE, first[0].base_offset)
    assert (await ms.list_offsets(t.id, 0, -1)).offset == 5  # the duplicate was not stored
    # duplicate inside one object, and the next sequence still follows
    same = await ms.commit_object(
        key(),
        1,
        "a",
        [
            batch(t.id, 0, 1, pid=7, epoch=0, seq=5),
            batch(t.id, 0, 1, pid=7, epoch=0, seq=5),
            batch(t.id, 0, 1, pid=7, epoch=0, seq=6),
        ],
    )
    assert [(r.error, r.base_offset) for r in same] == [(E.NONE, 5), (E.NONE, 5), (E.NONE, 6)]
    assert len((await ms.find_batches(t.id, 0, 0, 10_000)).batches) == 4


async def test_sequence_gap_is_out_of_order(ms: Metastore) -> None:
    t = await make_topic(ms, "t", 1)
    await ms.commit_object(key(), 1, "a", [batch(t.id, 0, 2, pid=1, epoch=0, seq=0)])
    gap = await ms.commit_object(key(), 1, "a", [batch(t.id, 0, 1, pid=1, epoch=0, seq=3)])
    assert (gap[0].error, gap[0].base_offset) == (E.OUT_OF_ORDER_SEQUENCE_NUMBER, -1)
    ok = await ms.commit_object(key(), 1, "a", [batch(t.id, 0, 1, pid=1, epoch=0, seq=2)])
    assert (ok[0].error, ok[0].base_offset) == (E.NONE, 2)
    # a different producer and a non-idempotent batch are independent
    other = await ms.commit_object(
        key(), 1, "a", [batch(t.id, 0, pid=2, epoch=0, seq=42), batch(t.id, 0)]
    )
    assert [r.error for r in other] == [E.NONE, E.NONE]


async def test_epoch_fencing(ms: Metastore) -> None:
    t = await make_topic(ms, "t", 1)
    await ms.commit_object(key(), 1, "a", [batch(t.id, 0, 1, pid=3, epoch=1, seq=0)])
    stale = await ms.commit_object(key(), 1, "a", [batch(t.id, 0, 1, pid=3, epoch=0, seq=1)])
    assert stale[0].error is E.INVALID_PRODUCER_EPOCH
    bad_start = await ms.commit_object(key(), 1, "a", [batch(t.id, 0, 1, pid=3, epoch=2, seq=5)])
    assert bad_start[0].error is E.OUT_OF_ORDER_SEQUENCE_NUMBER
    bumped = await ms.commit_object(key(), 1, "a", [batch(t.id, 0, 1, pid=3, epoch=2, seq=0)])
    assert (bumped[0].error, bumped[0].base_offset) == (E.NONE, 1)
    old = await ms.commit_object(key(), 1, "a", [batch(t.id, 0, 1, pid=3, epoch=1, seq=1)])
    assert old[0].error is E.INVALID_PRODUCER_EPOCH
    # the old epoch's batches no longer count as duplicates
    replay = await ms.commit_object(key(), 1, "a", [batch(t.id, 0, 1, pid=3, epoch=1, seq=0)])
    assert replay[0].error is E.INVALID_PRODUCER_EPOCH


async def test_unknown_producer_state_accepts_any_sequence(ms: Metastore) -> None:
    t = await make_topic(ms, "t", 2)
    results = await ms.commit_object(key(), 1, "a", [batch(t.id, 1, 1, pid=9, epoch=4, seq=1234)])
    assert results[0].error is E.NONE


async def test_sequence_wraps_at_int32_max(ms: Metastore) -> None:
    t = await make_topic(ms, "t", 1)
    start = INT32_MAX - 1
    first = await ms.commit_object(key(), 1, "a", [batch(t.id, 0, 4, pid=5, epoch=0, seq=start)])
    assert first[0].error is E.NONE  # last sequence wraps to 1
    nxt = await ms.commit_object(key(), 1, "a", [batch(t.id, 0, 1, pid=5, epoch=0, seq=2)])
    assert (nxt[0].error, nxt[0].base_offset) == (E.NONE, 4)
    dup = await ms.commit_object(key(), 1, "a", [batch(t.id, 0, 4, pid=5, epoch=0, seq=start)])
    assert (dup[0].error, dup[0].base_offset) == (E.NONE, 0)
    await ms.commit_object(key(), 1, "a", [batch(t.id, 0, 1, pid=6, epoch=0, seq=INT32_MAX)])
    wrapped = await ms.commit_object(key(), 1, "a", [batch(t.id, 0, 1, pid=6, epoch=0, seq=0)])
    assert wrapped[0].error is E.NONE


async def test_epoch_bump_at_the_sequence_wrap_forgets_the_old_epoch(ms: Metastore) -> None:
    """A new epoch starting at 0 right after the old one's sequence reached int32 max
    is in sequence by number but not by epoch: the old epoch's batches must be gone,
    not kept as duplicates of the new epoch's."""
    t = await make_topic(ms, "t", 1)
    old = [batch(t.id, 0, 1, pid=4, epoch=0, seq=INT32_MAX - n) for n in (3, 2, 1, 0)]
    await ms.commit_objects([ObjectToCommit(key(), 1, "a", [b]) for b in old])
    bumped = await ms.commit_object(key(), 1, "a", [batch(t.id, 0, 1, pid=4, epoch=1, seq=0)])
    assert (bumped[0].error, bumped[0].base_offset) == (E.NONE, 4)
    reused = await ms.commit_object(
        key(), 1, "a", [batch(t.id, 0, 1, pid=4, epoch=1, seq=INT32_MAX - 3)]
    )
    assert reused[0].error is E.OUT_OF_ORDER_SEQUENCE_NUMBER  # not a duplicate of offset 0
    assert (await ms.list_offsets(t.id, 0, -1)).offset == 5


async def test_retry_older_than_last_five_is_out_of_order(ms: Metastore) -> None:
    """Kafka keeps 5 batches per producer and partition; a retry of an older one is
    rejected with OUT_OF_ORDER_SEQUENCE_NUMBER (current Kafka; the old
    DUPLICATE_SEQUENCE_NUMBER is not used)."""
    t = await make_topic(ms, "t", 1)
    in_flight = [batch(t.id, 0, 1, pid=8, epoch=0, seq=s) for s in range(7)]
    results = await ms.commit_object(key(), 1, "a", in_flight)
    assert [r.base_offset for r in results] == list(range(7))
    for s in range(2, 7):  # the last five are still duplicates
        again = await ms.commit_object(key(), 1, "a", [in_flight[s]])
        assert (again[0].error, again[0].base_offset) == (E.NONE, s)
    for s in (0, 1):
        again = await ms.commit_object(key(), 1, "a", [in_flight[s]])
        assert again[0].error is E.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert (await ms.list_offsets(t.id, 0, -1)).offset == 7


async def test_retry_window_after_in_order_groups_of_every_size(ms: Metastore) -> None:
    """In-order groups of 1 to 7 batches per producer, two producers on two
    partitions: after each group exactly the newest 5 batches of each (producer,
    partition) are duplicates and the 6th newest is out of order. (SQLite's in-order
    path reads only each key's newest entry and trims to five in one statement.)"""
    t = await make_topic(ms, "t", 2)
    sent: dict[tuple[int, int], list[tuple[BatchToCommit, int]]] = {}
    for size in (3, 1, 2, 4, 1, 7, 1, 5, 2):
        group = [batch(t.id, p, 1, pid=pid, epoch=0, seq=0) for p in (0, 1) for pid in (11, 12)]
        group = [
            b._replace(base_sequence=len(sent.get((b.partition, b.producer_id), [])) + n)
            for n in range(size)
            for b in group
        ]
        results = await ms.commit_objects([ObjectToCommit(key(), 1, "a", group)])
        for b, r in zip(group, results[0].results, strict=True):
            assert r.error is E.NONE
            sent.setdefault((b.partition, b.producer_id), []).append((b, r.base_offset))
        for history in sent.values():
            for b, offset in history[-5:]:
                again = await ms.commit_object(key(), 1, "a", [b])
                assert (again[0].error, again[0].base_offset) == (E.NONE, offset)
            if len(history) > 5:
                again = await ms.commit_object(key(), 1, "a", [history[-6][0]])
                assert again[0].error is E.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert (await ms.list_offsets(t.id, 0, -1)).offset == 2 * 26


# -- producer ids --------------------------------------------------------------------------


async def test_producer_ids_are_unique(ms: Metastore) -> None:
    results = await asyncio.gather(*(ms.init_producer_id() for _ in range(20)))
    assert all(r.error is E.NONE and r.producer_epoch == 0 for r in results)
    assert len({r.producer_id for r in results}) == 20


async def test_transactional_id_bumps_epoch(ms: Metastore) -> None:
    first = await ms.init_producer_id("tx-1")
    second = await ms.init_producer_id("tx-1")
    other = await ms.init_producer_id("tx-2")
    plain = await ms.init_producer_id()
    assert (
        second.producer_id == first.producer_id
        and second.producer_epoch == first.producer_epoch + 1
    )
    assert len({first.producer_id, other.producer_id, plain.producer_id}) == 3


# -- objects and GC --------------------------------------------------------------------------


async def test_object_gc_helpers(ms: Metastore, clock: FakeClock) -> None:
    t = await make_topic(ms, "t", 1)
    u = await make_topic(ms, "u", 1)
    k_t, k_u = key(), key()
    await ms.commit_object(k_t, 10, "agent-1", [batch(t.id, 0)])
    await ms.commit_object(k_u, 20, "agent-1", [batch(u.id, 0)])
    assert await ms.object_key_registered(k_t)
    assert not await ms.object_key_registered("obj/never-committed")
    info = await ms.get_object(k_u)
    assert info is not None and (info.state, info.size, info.agent_id) == ("live", 20, "agent-1")

    assert await ms.mark_objects_deleting(keys=[k_t, k_u]) == []  # still referenced
    await ms.delete_topic("u")
    clock.advance(1000)
    assert await ms.mark_objects_deleting(created_before_ms=clock.now) == [k_u]
    assert await ms.mark_objects_deleting(keys=[]) == []
    assert await ms.objects_to_delete(older_than_ms=clock.now) == []  # still in its grace period
    clock.advance(1000)
    doomed = await ms.objects_to_delete(older_than_ms=clock.now)
    assert [(o.key, o.state, o.deleting_since_ms) for o in doomed] == [
        (k_u, "deleting", clock.now - 1000)
    ]
    assert await ms.delete_object_rows([k_u, k_t]) == 1  # k_t is live and referenced
    assert not await ms.object_key_registered(k_u)
    assert await ms.object_key_registered(k_t)
    assert await ms.delete_object_rows([]) == 0


async def test_read_leases_hold_objects_from_the_gc(ms: Metastore, clock: FakeClock) -> None:
    t = await make_topic(ms, "t", 1)
    keys = [key() for _ in range(4)]
    for k in keys:
        await ms.commit_object(k, 10, "agent-1", [batch(t.id, 0)])
    g = await ms.acquire_read_lease("job-1", [keys[0], keys[1], "obj/unknown"], 5000, owner="spark")
    assert g.expires_at_ms == clock.now + 5000
    assert g.sizes == {keys[0]: 10, keys[1]: 10} and g.missing == ["obj/unknown"]
    # Renewal extends (never shortens) and adds objects; a second lease overlaps.
    clock.advance(1000)
    g = await ms.acquire_read_lease("job-1", [keys[1], keys[2]], 100)
    assert g.expires_at_ms == clock.now + 4000 and not g.missing
    await ms.acquire_read_lease("job-2", [keys[0]], 60_000)
    leases = {x.lease_id: x for x in await ms.list_read_leases()}
    assert (leases["job-1"].objects, leases["job-1"].owner, leases["job-2"].objects) == (
        3,
        "spark",
        1,
    )
    # Every object retired (topic deleted), past any grace period.
    await ms.delete_topic("t")
    await ms.mark_objects_deleting(created_before_ms=clock.now + 1)
    clock.advance(10)
    claimed = await ms.claim_objects_to_delete(clock.now)
    assert [o.key for o in claimed] == [keys[3]]  # the only one under no lease
    assert claimed[0].state == "purging"
    assert await ms.leased_object_count() == 3
    # A claimed object can no longer be leased: the reader must plan again.
    g = await ms.acquire_read_lease("job-3", [keys[3]], 1000)
    assert g.missing == [keys[3]] and g.sizes == {}
    assert await ms.delete_object_rows([keys[3]]) == 1
    # job-1 expires (its owner died); job-2 is released by its owner.
    clock.advance(5000)
    assert sorted(o.key for o in await ms.claim_objects_to_delete(clock.now)) == sorted(
        [keys[1], keys[2]]
    )
    assert await ms.release_read_lease("job-2")
    assert not await ms.release_read_lease("job-2")
    got = await ms.claim_objects_to_delete(clock.now)
    assert sorted(o.key for o in got) == sorted([keys[0], keys[1], keys[2]])  # claimed stay due
    assert await ms.delete_object_rows([o.key for o in got]) == 3
    assert await ms.leased_object_count() == 0
    assert {x.lease_id for x in await ms.list_read_leases()} <= {"job-3"}
    with pytest.raises((ValueError, MetastoreError)):  # MetastoreError when served
        await ms.acquire_read_lease("", [], 1)


# -- agents --------------------------------------------------------------------------------


async def test_agent_registry(ms: Metastore, clock: FakeClock) -> None:
    await ms.register_agent("a1", "10.0.0.1", 9092, "eu-1a")
    clock.advance(100)
    await ms.register_agent("a2", "10.0.0.2", 9092, None)
    assert [a.id for a in await ms.live_agents(since_ms=clock.now - 100)] == ["a1", "a2"]
    clock.advance(10_000)
    assert await ms.heartbeat("a1")
    assert not await ms.heartbeat("ghost")
    live = await ms.live_agents(since_ms=clock.now - 5_000)
    assert [(a.id, a.host, a.port, a.zone, a.heartbeat_at_ms) for a in live] == [
        ("a1", "10.0.0.1", 9092, "eu-1a", clock.now)
    ]
    await ms.register_agent("a2", "10.0.0.3", 9093, "eu-1b")  # restart with a new address
    assert [(a.id, a.host, a.port) for a in await ms.live_agents(since_ms=clock.now)] == [
        ("a1", "10.0.0.1", 9092),
        ("a2", "10.0.0.3", 9093),
    ]
    await ms.deregister_agent("a1")
    assert [a.id for a in await ms.live_agents(since_ms=0)] == ["a2"]


async def test_heartbeat_publishes_observations(ms: Metastore, clock: FakeClock) -> None:
    """Slow-agent isolation (issue 43): a heartbeat may carry the agent's peer
    observations; every agent reads them back with the registry; a heartbeat
    without them keeps the last ones; a fresh registration starts with none."""
    await ms.register_agent("a1", "h", 9092, instance="i-1")
    await ms.register_agent("a2", "h", 9093, instance="i-2")
    assert [a.observations for a in await ms.live_agents(0)] == [None, None]
    doc = '{"p": {"a2": [2100, 5]}, "i": {"a2": 12345}}'
    assert await ms.heartbeat("a1", "i-1", doc)
    clock.advance(1_000)
    assert await ms.heartbeat("a1", "i-1")  # nothing new to say: the last document stays
    got = {a.id: a.observations for a in await ms.live_agents(0)}
    assert got == {"a1": doc, "a2": None}
    assert not await ms.heartbeat("a1", "i-x", "{}")  # another process's row is not touched
    assert {a.id: a.observations for a in await ms.live_agents(0)}["a1"] == doc


async def test_cluster_id_is_claimed_once(ms: Metastore) -> None:
    """The first agent with a cluster id stores it; asking without one reads it;
    a racing second claim with another id gets the first one back (the agent then
    refuses to start)."""
    assert await ms.claim_cluster_id(None) is None  # nothing stored, nothing stored by asking
    assert await ms.claim_cluster_id(None) is None
    got = await asyncio.gather(ms.claim_cluster_id("prod-eu"), ms.claim_cluster_id("prod-us"))
    assert got[0] == got[1] and got[0] in ("prod-eu", "prod-us")
    assert await ms.claim_cluster_id(None) == got[0]
    assert await ms.claim_cluster_id("other") == got[0]


async def test_agent_identity_claims(ms: Metastore, clock: FakeClock) -> None:
    """Ids, not addresses: agents sharing one advertised address coexist; a second
    live process claiming an id is refused; a restart after the old row went
    stale takes it over; a stale process never removes the new one's row."""
    lb = ("lb.internal", 9092)
    for i, inst in enumerate(["i-a", "i-b", "i-c"]):
        held = await ms.register_agent(
            f"agent-{i}", *lb, "z", peer_host=f"10.0.0.{i}", peer_port=9644, instance=inst,
            live_since_ms=clock.now - 5_000,
        )  # fmt: skip
        assert held is None
    live = await ms.live_agents(since_ms=clock.now)
    assert [(a.id, a.host, a.port, a.peer_host, a.peer_port, a.instance) for a in live] == [
        (f"agent-{i}", *lb, f"10.0.0.{i}", 9644, inst)
        for i, inst in enumerate(["i-a", "i-b", "i-c"])
    ]
    clock.advance(1_000)
    dup = await ms.register_agent(
        "agent-0", *lb, "z", peer_host="10.0.0.9", peer_port=9644, instance="i-x",
        live_since_ms=clock.now - 5_000,
    )  # fmt: skip
    assert dup is not None and (dup.instance, dup.peer_host) == ("i-a", "10.0.0.0")
    assert await ms.heartbeat("agent-0", "i-a") and not await ms.heartbeat("agent-0", "i-x")
    # Same process registering again (after its row was dropped): fine.
    assert await ms.register_agent("agent-0", *lb, "z", instance="i-a", live_since_ms=0) is None
    clock.advance(10_000)  # agent-0 (i-a) went silent: a restart takes the id over
    took = await ms.register_agent(
        "agent-0", *lb, "z", peer_host="10.0.0.9", instance="i-x", live_since_ms=clock.now - 5_000
    )
    assert took is None
    assert not await ms.heartbeat("agent-0", "i-a")  # the old process learns it lost the id
    await ms.deregister_agent("agent-0", "i-a")  # ... and cannot remove the new row
    assert [a.instance for a in await ms.live_agents(since_ms=clock.now) if a.id == "agent-0"] == [
        "i-x"
    ]


def test_batch_to_commit_is_a_tuple() -> None:
    b = BatchToCommit(uuid.uuid4(), 0, 0, 1, 1, 0, 0, 0)
    assert (b.producer_id, b.producer_epoch, b.base_sequence, b.is_transactional) == (
        -1,
        -1,
        -1,
        False,
    )
