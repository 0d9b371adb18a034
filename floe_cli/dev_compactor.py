"""The compactor of `floe dev`: passes on a timer in a thread of the dev process.

`floe dev` is the whole product on embedded defaults, so it also merges
segments, enforces retention, writes Parquet and commits Iceberg snapshots
(``floe.iceberg.enable`` topics, SQL catalog in the SQLite metastore). The agent
never imports the compactor: this CLI module starts it beside the agent (or
beside the worker supervisor) with its own event loop in a daemon thread, and
stops it when the agent exits. ``--no-compactor`` turns it off,
``--compactor-interval-ms`` sets the pause between passes.

Dev settings differ from `floe compactor run` in one place: Parquet conversion
starts at level 0 (segments straight from the agents), so a table appears within
one interval instead of after 32 segments.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from dataclasses import dataclass, field

log = logging.getLogger("floe.dev.compactor")


@dataclass
class DevCompactor:
    metastore_url: str
    objects_url: str
    interval_ms: int = 10_000
    catalog_url: str = ""
    journal: str = ""  # the agents' journal buckets (comma-separated URLs)
    journal_quorum: int = 2
    passes: int = 0
    _thread: threading.Thread | None = None
    _loop: asyncio.AbstractEventLoop | None = None
    _stop: asyncio.Event | None = None
    _started: threading.Event = field(default_factory=threading.Event)

    def start(self) -> DevCompactor:
        self._thread = threading.Thread(target=self._run, name="floe-compactor", daemon=True)
        self._thread.start()
        self._started.wait(30)
        return self

    def _run(self) -> None:
        try:
            asyncio.run(self._main())
        except Exception:  # the agent keeps running without its compactor
            log.exception("dev compactor stopped")
        finally:
            self._started.set()

    async def _main(self) -> None:
        from compactor.config import CompactorConfig
        from compactor.iceberg import IcebergSync
        from compactor.runner import Compactor, PassSummary
        from metastore import open_metastore
        from objectstore.journal import open_journaled_store, parse_journal_urls

        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        meta = await open_metastore(self.metastore_url)
        store = open_journaled_store(
            self.objects_url, parse_journal_urls(self.journal), quorum=self.journal_quorum
        )
        self._started.set()
        cfg = CompactorConfig(interval_ms=self.interval_ms, parquet_min_level=0)
        iceberg = IcebergSync.from_urls(
            meta, self.catalog_url, self.metastore_url, self.objects_url
        )
        comp = Compactor(meta, store, cfg, iceberg=iceberg)

        def on_pass(s: PassSummary) -> None:
            self.passes += 1
            for line in s.lines():
                log.debug("%s", line)

        try:
            await comp.run_forever(on_pass=on_pass, stop=self._stop)
        finally:
            await store.close()
            await meta.close()

    def stop(self, timeout: float = 10.0) -> None:
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        if self._thread is not None:
            self._thread.join(timeout)
