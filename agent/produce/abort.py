"""Aborting stalled segments: their requests answered "not persisted" before clients time out.

Where it sits: beside the upload and commit steps (:mod:`agent.produce.upload`,
:mod:`agent.produce.commit`), run by the batcher's tick
(:meth:`~agent.produce.append.Batcher.tick`). When the oldest sealed segment
whose commit has not started has waited longer than ``produce_abort_ms`` since
it was sealed (a PUT that hangs: S3 stalled, a journal quorum that never
forms), that segment, every segment sealed after it and the open segment are
aborted together, a clean cut:

* each is marked aborted and leaves the abortable set; the committer checks the
  mark at the one place a commit starts (:mod:`agent.produce.commit`), so an
  aborted segment is never committed, and nothing sealed before the abort is
  committed after an aborted one (no sequence gap reaches the sequencer);
* its upload is cancelled; if the PUT lands after all, the object is an orphan
  (no metastore row) that the GC removes after its grace period;
* its bytes go back to the budget and every request with batches in it is
  answered NOT_ENOUGH_REPLICAS for all of its batches: librdkafka's "retry, not
  persisted" (the same epoch and sequence, no epoch bump, no duplicate: the
  batch was not stored and never will be from this attempt);
* its idempotent batches fence their producer and partition
  (:meth:`~agent.produce.admission.Admission.fence`), so batches pipelined
  behind them are refused until the aborted sequence is retried.

A segment whose commit has started is not abortable: it finishes normally
(its outcome is what the metastore says). Aborted requests are counted in
``floe_produce_aborted_total{reason="stalled_upload"}`` (requests, not batches).
Without aborting, those requests waited out the stall; librdkafka's request
timeout (bounded by the messages' remaining ``message.timeout.ms``) fired
first, the client bumped its epoch and re-sent batches that the stalled
PUT + commit then stored as well (issue 43).
"""

from __future__ import annotations

import logging

from agent.metrics import METRICS
from agent.produce.segment import PipelineState, Segment, error_results
from kafka_protocol.errors import ErrorCode

log = logging.getLogger(__name__)

NOT_PERSISTED = ErrorCode.NOT_ENOUGH_REPLICAS
STALLED_UPLOAD = "stalled_upload"
ABORTED = METRICS.produce_aborted.labels(STALLED_UPLOAD)  # on /metrics (0) from the start


class Aborter(PipelineState):
    """:meth:`abort_stalled`: the clean cut described above."""

    @property
    def abort_ms(self) -> int:
        return round(self._abort_s * 1000)

    @abort_ms.setter
    def abort_ms(self, ms: int) -> None:
        self._abort_s = max(0, ms) / 1000.0

    def abort_stalled(self) -> int:
        """Abort if the oldest segment whose commit has not started is past the
        deadline; returns the number of requests answered NOT_ENOUGH_REPLICAS."""
        if self._abort_s <= 0 or not self._abortable:
            return 0
        first = next(iter(self._abortable.values()))
        waited = self._clock.monotonic() - first.sealed_at
        if waited < self._abort_s:
            return 0
        # Commits start in seal order, so the abortable ones are the latest sealed.
        segs = list(self._abortable.values())
        self._abortable.clear()
        opened = self._open
        if opened is not None and len(opened.builder) > 0:
            self._open = None  # its seal timers find it gone
            self._policy.sealed()
            segs.append(opened)
        requests = sum(self._abort(seg) for seg in segs)
        if self._inflight == 0:
            self._idle.set()
        ABORTED.inc(requests)
        log.warning(
            "store stalled: segment %s waited %.1f s for its upload; aborted it and %d later"
            " segments (%d requests answered NOT_ENOUGH_REPLICAS, to be retried)",
            first.key, waited, len(segs) - 1, requests,
        )  # fmt: skip
        return requests

    def _abort(self, seg: Segment) -> int:
        seg.aborted = True
        if seg.upload is not None:  # sealed: counted in flight
            seg.upload.cancel()
            self._inflight -= 1
            self._pending.pop(id(seg), None)
        released = self._policy.released
        for w in seg.waiters:
            if w.flow is not None:
                released(w.flow)
            self.admission.fence(w.items)
            if not w.future.done():
                w.future.set_result(error_results(NOT_PERSISTED, w.count))
        self.budget.release_nowait(seg.nbytes)
        n = len(seg.waiters)
        seg.waiters = []
        seg.data = None
        return n
