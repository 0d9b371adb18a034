"""Step 5 of a produce: answer the waiting requests, strictly in seal order.

Where it sits: last, after :mod:`agent.produce.commit`. Each committed group's
segments are answered in seal order: every waiting request gets its batches'
results (base offsets, or an error), its connection's flow is released
(:mod:`agent.produce.autobatch`), its bytes go back to the budget
(:mod:`agent.produce.budget`), and the commit is announced (``on_commit``: the
agent's long-polls and the cluster's wake-ups; ``on_committed``: the tail
index). Nothing is acknowledged before the object is durable and the commit has
returned. A journal object, once answered, goes to the consolidator
(:mod:`agent.produce.consolidate`). A request not answered within its ``timeout_ms`` is answered
REQUEST_TIMED_OUT (:func:`expire_after`), as Kafka answers it.
"""

from __future__ import annotations

import asyncio
import logging

from agent.metrics import METRICS
from agent.produce.segment import REQUEST_TIMED_OUT, PipelineState, Segment, error_results
from metastore.types import CommitResult

log = logging.getLogger(__name__)


def expire_after(
    fut: asyncio.Future[list[CommitResult]], seconds: float, n: int
) -> asyncio.Future[list[CommitResult]]:
    """``fut``'s results, or REQUEST_TIMED_OUT for its ``n`` batches if it is not
    done within ``seconds`` (Kafka's produce purgatory: acks not satisfied within the
    request's ``timeout_ms``). The commit goes on either way; the budget and the flow
    are released by the ack loop when it resolves."""
    loop = asyncio.get_running_loop()
    out: asyncio.Future[list[CommitResult]] = loop.create_future()

    def expire() -> None:
        if not out.done():
            METRICS.produce_timeouts.inc()
            out.set_result(error_results(REQUEST_TIMED_OUT, n))

    timer = loop.call_later(seconds, expire)

    def done(f: asyncio.Future[list[CommitResult]]) -> None:
        timer.cancel()
        if out.done():
            return
        if f.cancelled():
            out.cancel()
        elif (e := f.exception()) is not None:
            out.set_exception(e)
        else:
            out.set_result(f.result())

    fut.add_done_callback(done)
    return out


class Acker(PipelineState):
    async def _ack_loop(
        self,
        acks: asyncio.Queue[tuple[list[Segment], asyncio.Task[list[list[CommitResult]]]] | None],
        slots: asyncio.Semaphore,
    ) -> None:
        """Answers the groups strictly in seal order."""
        while (item := await acks.get()) is not None:
            group, task = item
            outcomes = await task
            released = self._policy.released
            for seg, results in zip(group, outcomes, strict=True):
                if self._on_committed is not None:
                    self._committed(seg, results)
                for w in seg.waiters:
                    if w.flow is not None:
                        released(w.flow)
                    if not w.future.done():
                        w.future.set_result(results[w.first : w.first + w.count])
                self.budget.release_nowait(seg.nbytes)
                if seg.data is not None:
                    if self._consolidator is not None and any(r.base_offset >= 0 for r in results):
                        self._consolidator.add(seg.key, seg.data)  # off the critical path
                    seg.data = None
                if self._on_commit is not None:
                    self._on_commit(seg.partitions)
                self._inflight -= 1
                self._pending.pop(id(seg), None)
            if self._inflight == 0:
                self._idle.set()
            slots.release()

    def _committed(self, seg: Segment, results: list[CommitResult]) -> None:
        """Tell ``on_committed`` (the tail index) where the segment's batches went."""
        up = seg.upload
        if up is None or not up.done() or up.cancelled() or up.exception() is not None:
            return
        assert self._on_committed is not None
        try:
            self._on_committed(seg.key, up.result()[1], results)
        except Exception:  # an index is never worth an answer
            log.exception("on_committed failed for %s", seg.key)
