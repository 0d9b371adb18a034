"""What a read plan lets a credential-free reader fetch, and what a renewal may presign again.

Where it sits: helpers of the planning API (:mod:`agent.planning`), between the
metastore's batch rows and the object store's presigner. A segment object holds
the batches of many topics, so a plan never carries a URL for a whole segment
object: per object it grants runs of adjacent planned batches
(:func:`plan_grants`), each presigned as a ranged GET whose signature covers
the ``Range`` header (:func:`presign_grants`, :mod:`objectstore.byte_grants`).
Parquet objects hold one partition of one topic (the compactor writes them per
partition) and are presigned whole.

Journal objects (issue 40: ``journal/`` keys, the last seconds of a partition
before consolidation, or longer if their agent died) live in at least
``journal_quorum`` of the journal buckets, not in the standard one, and the
journal store cannot say which copy a URL should name
(``JournaledStore.presign_get`` is None). Left at that, one journal key in a plan
would leave the whole plan unsigned (credential-free executors then fail on
every object, not only that one). So a journal object's runs are presigned
against one journal bucket that holds a copy *now* (a HEAD, in bucket order):
the copy stays while the lease holds the object, since the GC deletes a journal
object from every bucket only once it is unreferenced and unleased. Executors
with credentials read journal keys without URLs, from the journal URLs the plan
names (``journal_urls``), trying each bucket in turn.

A lease renewal (an executor whose task starts after its plan's URLs expired)
names the runs it wants presigned again. :func:`renewal_grants` checks each run
against what the object holds (:func:`readable_spans`) and the caller's ACLs
*now*: it must lie within batches of topics the caller may READ, and a Parquet
object must hold only such batches; anything else is refused, so a caller
cannot name its way to another topic's bytes. A segment object named without
runs is leased but never presigned.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Any

from metastore.types import BatchLocation
from objectstore import ObjectStore, presign_get, presign_ranges
from objectstore.byte_grants import Range, covered, merge_ranges
from objectstore.errors import ObjectNotFound, ObjectStoreError, SegmentFormatError
from objectstore.journal import JournaledStore, is_journal_key
from objectstore.parquet import is_parquet_key
from objectstore.segment_index import read_index


class RangeRefused(Exception):
    """The caller may not read these bytes of an object. Names no topic: the
    object's other tenants stay unnamed."""

    def __init__(self, principal: str, key: str, lo: int | None = None, hi: int | None = None) -> None:
        what = "the whole object" if lo is None else f"bytes {lo}..{hi} of"
        super().__init__(f"Not authorized to read {what} {key} ({principal} needs READ)")


def plan_grants(
    planned: Iterable[Sequence[BatchLocation]],
) -> tuple[list[str], dict[str, list[Range]]]:
    """(Parquet keys, segment key -> byte runs) for the batches of each planned range:
    runs of adjacent batches of one range, never bridging a hole."""
    parquet: set[str] = set()
    runs: dict[str, list[Range]] = {}
    for batches in planned:
        spans: dict[str, list[Range]] = {}
        for b in batches:
            if is_parquet_key(b.object_key):
                parquet.add(b.object_key)
            else:
                spans.setdefault(b.object_key, []).append((b.byte_pos, b.byte_pos + b.byte_len))
        for k, v in spans.items():
            runs.setdefault(k, []).extend(merge_ranges(v))
    # max_bytes=0: runs of different ranges stay apart (only duplicates fold).
    return sorted(parquet), {k: merge_ranges(v, 0) for k, v in runs.items()}


async def presign_grants(
    store: ObjectStore, parquet: Sequence[str], runs: Mapping[str, Sequence[Range]], ttl_ms: int
) -> tuple[dict[str, str], dict[str, list[list[Any]]]]:
    """Whole-object URLs of ``parquet`` and ``[start, end, url]`` per run of ``runs``;
    nothing at all when the store cannot presign (executors then read directly)."""
    expires = max(60, ttl_ms // 1000)
    urls: dict[str, str] = {}
    ranged: dict[str, list[list[Any]]] = {}
    keys = [*parquet, *runs]
    signers = dict(zip(keys, await asyncio.gather(*(_signer(store, k) for k in keys)), strict=True))
    for k in parquet:
        url = await presign_get(signers[k], k, expires)
        if url is None:
            return {}, {}
        urls[k] = url
    for k, spans in runs.items():
        signed = await presign_ranges(signers[k], k, expires, spans)
        if signed is None:
            return {}, {}
        ranged[k] = [[lo, hi, url] for (lo, hi), url in zip(spans, signed, strict=True)]
    return urls, ranged


def _journaled(store: ObjectStore) -> JournaledStore | None:
    """The journal tier under ``store``'s wrappers, if it has one."""
    inner: Any = store
    for _ in range(8):
        if isinstance(inner, JournaledStore):
            return inner
        inner = getattr(inner, "inner", None)
        if inner is None:
            break
    return None


async def _signer(store: ObjectStore, key: str) -> ObjectStore:
    """The store whose URL for ``key`` a reader can use: for a journal key, a journal
    bucket that holds a copy (the first that answers a HEAD); else ``store`` itself."""
    journaled = _journaled(store) if is_journal_key(key) else None
    if journaled is None:
        return store
    errors = []
    for bucket in journaled.journal.buckets:
        try:
            await bucket.store.head(key)
        except ObjectStoreError as e:  # missing here, or the bucket failing: the next one
            errors.append(f"bucket {bucket.index}: {e}")
            continue
        return bucket.store
    raise ObjectNotFound(f"{key}: no journal bucket holds it ({'; '.join(errors)})")


TopicName = Callable[[uuid.UUID], Awaitable[str | None]]


async def readable_spans(
    meta: Any,
    store: ObjectStore,
    topic_name: TopicName,
    may_read: Callable[[str], bool],
    keys: Iterable[str],
) -> dict[str, list[Range] | None]:
    """Per registered key: the byte spans of its batches of READable topics, or None
    for a Parquet object that holds only such batches (all of it may be read).

    A segment object's batches come from its own footer (CRC-checked): it still
    says whose bytes are where after the compactor moved the batch rows to newer
    objects (the old one lives on under the lease). Parquet objects are final
    (never merged again), so their batch rows in the metastore say it."""
    spans: dict[str, list[Range]] = {}
    whole: dict[str, bool] = {}
    names: dict[uuid.UUID, str | None] = {}
    parquet_ids: dict[int, str] = {}

    async def note(k: str, topic_id: uuid.UUID, lo: int, hi: int) -> None:
        if topic_id not in names:
            names[topic_id] = await topic_name(topic_id)
        name = names[topic_id]
        if name is not None and may_read(name):
            spans[k].append((lo, hi))
        else:
            whole[k] = False

    for k in keys:
        info = await meta.get_object(k)
        if info is None:
            continue  # collected: the lease reports it missing
        spans[k], whole[k] = [], is_parquet_key(k)
        if is_parquet_key(k):
            parquet_ids[info.id] = k
            continue
        try:
            entries = await read_index(store, k, object_size=info.size)
        except ObjectNotFound:
            del spans[k]
            continue
        except SegmentFormatError:
            entries = []  # nothing provable: nothing granted
        for e in entries:
            await note(k, e.topic_id, e.byte_pos, e.byte_pos + e.byte_len)
    if parquet_ids:
        for b in await meta.batches_in_objects(sorted(parquet_ids)):
            k = parquet_ids.get(b.object_id, b.object_key)
            if k in spans:
                await note(k, b.topic_id, b.byte_pos, b.byte_pos + b.byte_len)
    return {k: None if whole[k] and spans[k] else merge_ranges(spans[k], 0) for k in spans}


async def renewal_grants(
    meta: Any,
    store: ObjectStore,
    topic_name: TopicName,
    may_read: Callable[[str], bool],
    principal: str,
    keys: Sequence[str],
    wanted: Mapping[str, Sequence[Range]],
) -> tuple[list[str], dict[str, list[Range]]]:
    """(Parquet keys, segment runs) a renewal may presign again; RangeRefused if any
    named one reaches bytes the caller may not READ. Keys the GC already took are
    left out (the lease reports them missing)."""
    parquet = sorted({k for k in keys if is_parquet_key(k)})
    readable = await readable_spans(meta, store, topic_name, may_read, sorted({*parquet, *wanted}))
    for k in parquet:
        if k in readable and readable[k] is not None:
            raise RangeRefused(principal, k)
    runs: dict[str, list[Range]] = {}
    for k, spans in wanted.items():
        if k not in readable or is_parquet_key(k):
            continue
        allowed = readable[k]
        for lo, hi in spans:
            if hi <= lo or allowed is None or not covered(lo, hi, allowed):
                raise RangeRefused(principal, k, lo, hi)
        runs[k] = list(spans)
    return [k for k in parquet if k in readable], runs
