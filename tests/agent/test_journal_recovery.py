"""The journal tier after a crash (issue 40): what a kill -9 leaves behind is recovered.

* killed after its journal objects were acknowledged but before it consolidated
  them (the consolidator's memory is lost): the compactor's L0 merge reads them from
  the journal buckets and rewrites them into standard objects; the GC then deletes
  them from every bucket; every acknowledged record is read once, in order;
* killed after a journal PUT but before its commit: the object is an orphan in the
  journal buckets and the orphan GC removes it from all of them.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from compactor.config import CompactorConfig
from compactor.gc import collect_orphans, delete_retired
from compactor.runner import Compactor
from metastore import open_metastore
from objectstore.journal import open_journaled_store, parse_journal_urls
from tests.agent.test_fetch_protocol import make_topic
from tests.agent.test_journal import _journal, _produce, _read_all


async def _journal_keys(dirs: list[Path]) -> list[set[str]]:
    return [{str(p.relative_to(d)) for p in d.rglob("*") if p.is_file()} for d in dirs]


def test_journal_objects_of_a_killed_agent_are_consolidated_by_the_compactor(agent_factory, tmp_path):
    dirs, urls = _journal(tmp_path)
    agent = agent_factory(journal=urls, consolidate_interval_ms=600_000, consolidate_bytes=1 << 30)
    make_topic(agent, "jk", partitions=3)
    acked = _produce(agent.bootstrap, "jk", 3, 300, "k")
    # kill -9: what the consolidator held in memory is gone (stop() would consolidate it)
    consolidator = agent.broker.pipeline._consolidator
    consolidator._held.clear()
    consolidator._held_bytes = 0
    consolidator._first_at = None
    meta_url, objects_url = agent.broker.config.metastore, agent.broker.config.objects
    agent.stop()
    assert all(any(k.startswith("journal/") for k in ks) for ks in asyncio.run(_journal_keys(dirs)))

    async def compact() -> None:
        meta = await open_metastore(meta_url)
        store = open_journaled_store(objects_url, parse_journal_urls(urls))
        try:
            cfg = CompactorConfig(delete_grace_ms=0, orphan_grace_ms=0)
            await Compactor(meta, store, cfg).run_pass(force=True)
            topic = await meta.get_topic("jk")
            assert topic is not None
            for p in range(3):
                rows = await meta.partition_batches(topic.id, p, max_level=1 << 14)
                assert rows and not [r for r in rows if r.object_key.startswith("journal/")]
            await delete_retired(meta, store, now_ms=1 << 62, grace_ms=0)
        finally:
            await store.close()
            await meta.close()

    asyncio.run(compact())
    assert asyncio.run(_journal_keys(dirs)) == [set(), set(), set()]
    revived = agent_factory(journal=urls, metastore=meta_url, objects=objects_url)
    assert _read_all(revived.bootstrap, "jk", 3, 300) == acked


def test_a_journal_object_put_but_never_committed_is_collected_from_every_bucket(tmp_path):
    dirs, urls = _journal(tmp_path)

    async def run() -> None:
        meta = await open_metastore(f"sqlite:///{tmp_path / 'meta.db'}")
        store = open_journaled_store(f"file://{tmp_path / 'objects'}", parse_journal_urls(urls))
        try:
            await store.put("journal/0000000000001-dead-00000001-abc", b"uncommitted")
            # the PUT returned at the quorum (2 of 3); the third copy may still be landing
            deadline = asyncio.get_running_loop().time() + 10
            while not all(ks for ks in await _journal_keys(dirs)):
                assert asyncio.get_running_loop().time() < deadline, "the third copy never landed"
                await asyncio.sleep(0.01)  # polling a real condition with a deadline
            found = await collect_orphans(meta, store, grace_ms=0)
            assert [o.key for o in found] == ["journal/0000000000001-dead-00000001-abc"]
            assert await _journal_keys(dirs) == [set(), set(), set()]
        finally:
            await store.close()
            await meta.close()

    asyncio.run(run())
