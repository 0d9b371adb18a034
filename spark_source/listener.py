"""Kafka-style lag metrics for ``floe`` sources from streaming progress events.

Spark's Kafka source reports ``minOffsetsBehindLatest``, ``maxOffsetsBehindLatest``
and ``avgOffsetsBehindLatest`` in ``SourceProgress.metrics``. A Python data
source cannot add metrics, but it reports its latest offset
(``reportLatestOffset``), which Spark puts in every progress event next to
the batch's end offset; this listener turns the two into the same metrics::

    lag = FloeLagListener()
    spark.streams.addListener(lag)
    ...
    lag.latest[query.id]   # {"minOffsetsBehindLatest": "0", ...}
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from typing import Any

from pyspark.sql.streaming.listener import StreamingQueryListener

from spark_source.offsets import lag_metrics

__all__ = ["FloeLagListener", "lag_metrics", "source_lag"]


def _is_floe(end: Any) -> bool:
    """Offsets in Kafka's shape: ``{"topic": {"0": 42}}``."""
    return isinstance(end, dict) and all(
        isinstance(v, dict) and all(str(k).lstrip("-").isdigit() for k in v) for v in end.values()
    )


def source_lag(progress: Any) -> list[dict[str, str]]:
    """Lag metrics of every Kafka-shaped source in one ``StreamingQueryProgress``."""
    out: list[dict[str, str]] = []
    for src in getattr(progress, "sources", None) or []:
        try:
            end = json.loads(src.endOffset) if isinstance(src.endOffset, str) else src.endOffset
            latest = (
                json.loads(src.latestOffset)
                if isinstance(src.latestOffset, str)
                else src.latestOffset
            )
        except (TypeError, ValueError):
            continue
        if not _is_floe(end) or not _is_floe(latest):
            continue
        m = lag_metrics(end, latest)
        if m is not None:
            out.append(m)
    return out


class FloeLagListener(StreamingQueryListener):
    """Keeps the latest lag metrics per query id (and calls ``callback`` if given)."""

    def __init__(self, callback: Callable[[str, dict[str, str]], None] | None = None) -> None:
        self.callback = callback
        self.latest: dict[str, dict[str, str]] = {}
        self.history: dict[str, list[dict[str, str]]] = {}
        self._lock = threading.Lock()

    def onQueryStarted(self, event: Any) -> None:
        pass

    def onQueryProgress(self, event: Any) -> None:
        progress = event.progress
        for m in source_lag(progress):
            qid = str(progress.id)
            with self._lock:
                self.latest[qid] = m
                self.history.setdefault(qid, []).append(m)
            if self.callback is not None:
                self.callback(qid, m)

    def onQueryIdle(self, event: Any) -> None:
        pass

    def onQueryTerminated(self, event: Any) -> None:
        pass
