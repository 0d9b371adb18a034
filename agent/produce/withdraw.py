"""Withdrawing a closed connection's unacknowledged batches before they are committed.

Where it sits: beside :mod:`agent.produce.abort`; the server calls
:meth:`Withdrawer.withdraw` when a Kafka connection closes
(:meth:`agent.server.AgentServer._closed`), and the committer
(:mod:`agent.produce.commit`) leaves withdrawn batches out of the commit.

Why: a client closes a connection with Produce requests in flight when its own
deadline passed (librdkafka bounds a request's timeout by its messages'
remaining ``message.timeout.ms`` and disconnects on a timed-out request) or
when it died. An idempotent librdkafka producer then drains, takes a new epoch
(or producer id) and re-sends what it had not seen acknowledged from sequence
0; if the stalled commit then stored the first copy as well, the record is in
the log twice and no sequencer can tell (issue 43). Kafka avoids this by
answering in milliseconds; Floe's answer waits for a seal, a PUT and a commit,
which under a store stall or overload outlives the client's deadline.

So, when a connection closes, every request of it that was sent with acks != 0
and whose segment's commit has not started (the open segment and the sealed,
abortable ones, :mod:`agent.produce.abort`) is withdrawn:

* its waiter is marked withdrawn and answered NOT_ENOUGH_REPLICAS (nobody reads
  the answer: the connection is gone);
* its idempotent batches fence their producer and partition
  (:meth:`~agent.produce.admission.Admission.fence`), as an abort does;
* the committer commits the segment's other batches and not these; their bytes
  stay in the object, unreferenced, and leave with it.

Nothing acknowledged is withdrawn (an acknowledged request's commit has
returned), and acks=0 requests are never withdrawn (their sender closes
without waiting for anything). A request whose commit has started is committed
as usual. Withdrawn requests are counted in
``floe_produce_aborted_total{reason="client_gone"}``.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from agent.metrics import METRICS
from agent.produce.segment import PipelineState, Segment, error_results
from kafka_protocol.errors import ErrorCode
from metastore.types import BatchToCommit, CommitResult

log = logging.getLogger(__name__)

CLIENT_GONE = "client_gone"
WITHDRAWN = METRICS.produce_aborted.labels(CLIENT_GONE)  # on /metrics (0) from the start


class Withdrawer(PipelineState):
    """:meth:`withdraw` a closed connection's requests; :func:`kept` for the committer."""

    def withdraw(self, owner: object) -> int:
        """Withdraw the uncommitted requests appended with ``owner`` (a connection's
        produce flow); returns how many were withdrawn."""
        segs: list[Segment] = list(self._abortable.values())
        if self._open is not None:
            segs.append(self._open)
        n = 0
        for seg in segs:
            for w in seg.waiters:
                if w.owner is owner and not w.withdrawn and not w.future.done():
                    w.withdrawn = True
                    seg.withdrawn += 1
                    self.admission.fence(w.items)
                    w.future.set_result(error_results(ErrorCode.NOT_ENOUGH_REPLICAS, w.count))
                    n += 1
        if n:
            WITHDRAWN.inc(n)
            log.warning("connection closed: %d unacknowledged produce request(s) withdrawn", n)
        return n


def kept(seg: Segment, batches: Sequence[BatchToCommit]) -> list[int] | None:
    """The indexes of ``seg``'s batches to commit, or None when none was withdrawn."""
    if not seg.withdrawn:
        return None
    drop = bytearray(len(batches))
    for w in seg.waiters:
        if w.withdrawn:
            drop[w.first : w.first + w.count] = b"\x01" * w.count
    return [i for i, d in enumerate(drop) if not d]


def spread(results: Sequence[CommitResult], keep: list[int], n: int) -> list[CommitResult]:
    """The results of the ``keep`` batches back in their places among ``n``; the
    withdrawn ones get NOT_ENOUGH_REPLICAS (never read: their waiters are answered)."""
    out = error_results(ErrorCode.NOT_ENOUGH_REPLICAS, n)
    for i, r in zip(keep, results, strict=True):
        out[i] = r
    return out
