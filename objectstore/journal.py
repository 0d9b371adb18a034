"""The journal tier beside the standard bucket: one store that routes by key.

Where it sits: what every component that touches object bytes opens when a
journal is configured (``FLOE_JOURNAL``, issue 40): the agent's uploader and
fetch cache, the consolidator, the compactor and its GC. Keys under
:data:`JOURNAL_PREFIX` (the agent's small, short-lived journal objects) go to a
:class:`~objectstore.quorum.QuorumStore` of N low-latency buckets (S3 Express
One Zone directory buckets in three zones in production); every other key goes
to the standard bucket. Readers need not know which tier holds a batch: the
index names the key, the key names the tier, and consolidation moves batches
from the journal to the standard bucket by repointing them in the metastore.

:func:`open_journaled_store` builds it from URLs::

    store = open_journaled_store(
        "s3://floe/objects",
        ["s3://j-az1--use1-az1--x-s3/j", "s3://j-az2--use1-az2--x-s3/j", "file:///mnt/j3"],
        quorum=2,
    )
"""

from __future__ import annotations

import builtins
from collections.abc import AsyncIterator, Sequence
from typing import Any

from objectstore.base import ObjectInfo, ObjectStore, StoreBase, key_sort, store_chain
from objectstore.quorum import PutObserver, QuorumStore

JOURNAL_PREFIX = "journal/"


def is_journal_key(key: str) -> bool:
    return key.startswith(JOURNAL_PREFIX)


def parse_journal_urls(text: str) -> list[str]:
    """``FLOE_JOURNAL``: comma-separated object store URLs (commas inside a URL's
    query are not supported; use one URL per bucket). Empty: no journal."""
    return [u.strip() for u in text.split(",") if u.strip()]


class JournaledStore(StoreBase):
    """``journal/`` keys on the quorum of journal buckets, the rest on the standard store."""

    def __init__(self, standard: ObjectStore, journal: QuorumStore) -> None:
        self.standard = standard
        self.journal = journal
        self.inner = standard  # presigning walks ``inner``: standard keys only

    def _for(self, key: str) -> ObjectStore:
        return self.journal if is_journal_key(key) else self.standard

    async def put(self, key: str, data: bytes | memoryview) -> None:
        await self._for(key).put(key, data)

    async def get(self, key: str, start: int | None = None, end: int | None = None) -> bytes:
        return await self._for(key).get(key, start, end)

    async def head(self, key: str) -> ObjectInfo:
        return await self._for(key).head(key)

    async def delete_many(self, keys: Sequence[str]) -> None:
        journal = [k for k in keys if is_journal_key(k)]
        standard = [k for k in keys if not is_journal_key(k)]
        if standard:
            await self.standard.delete_many(standard)
        if journal:
            await self.journal.delete_many(journal)

    async def list(
        self, prefix: str = "", *, start_after: str | None = None
    ) -> AsyncIterator[ObjectInfo]:
        """Both tiers' keys under ``prefix``, in key order."""
        infos: list[ObjectInfo] = []
        async for info in self.standard.list(prefix, start_after=start_after):
            if not is_journal_key(info.key):
                infos.append(info)
        if JOURNAL_PREFIX.startswith(prefix) or prefix.startswith(JOURNAL_PREFIX):
            async for info in self.journal.list(prefix, start_after=start_after):
                infos.append(info)
        infos.sort(key=lambda i: key_sort(i.key))
        for info in infos:
            yield info

    async def presign_get(
        self, key: str, expires_s: int, byte_range: tuple[int, int] | None = None
    ) -> str | None:
        """Standard keys as the standard store signs them; journal keys cannot be
        presigned (which copy?): None, and the reader asks the agent instead."""
        if is_journal_key(key):
            return None
        from objectstore import presign_get

        return await presign_get(self.standard, key, expires_s, byte_range)

    async def presign_ranges(
        self, key: str, expires_s: int, ranges: Sequence[tuple[int, int]]
    ) -> builtins.list[str] | None:
        if is_journal_key(key):
            return None
        from objectstore import presign_ranges

        return await presign_ranges(self.standard, key, expires_s, ranges)

    async def client(self) -> None:
        """Build every bucket's HTTP client now (the agent calls this at start): the
        first journal PUT must not pay botocore's model loading against its quorum
        deadline."""
        for store in (self.standard, *(b.store for b in self.journal.buckets)):
            make = next((m for s in store_chain(store) if callable(m := getattr(s, "client", None))), None)
            if make is not None:
                await make()

    async def close(self) -> None:
        await self.journal.close()
        await self.standard.close()


def open_journaled_store(
    url: str,
    journal_urls: Sequence[str],
    *,
    quorum: int = 2,
    on_put: PutObserver | None = None,
    **quorum_opts: Any,
) -> ObjectStore:
    """The standard store of ``url``; with ``journal_urls``, wrapped with the journal tier."""
    from objectstore import open_object_store

    standard = open_object_store(url)
    if not journal_urls:
        return standard
    buckets = [open_object_store(u) for u in journal_urls]
    return JournaledStore(standard, QuorumStore(buckets, quorum, on_put=on_put, **quorum_opts))
