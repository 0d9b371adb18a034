"""Steps 1-2 of a produce: append a request's batches to the open segment, and seal it.

Where it sits: after the produce handler has validated a request and reserved
its bytes (:mod:`agent.produce.budget`); before :mod:`agent.produce.upload`.
One open segment holds the batches of every partition from every connection.
It is sealed when it reaches ``flush_bytes`` (reason ``size``), when it is older
than ``flush_interval_ms`` (``interval``), or, once ``flush_min_interval_ms``
have passed since the previous seal, as soon as waiting longer cannot bring more
data (:mod:`agent.produce.autobatch`: every connection with requests in it is
blocked at its learned in-flight limit, ``blocked``, or no produce request has
arrived for a while, ``idle``). The reason is counted in
``floe_segment_seals_total{reason}``. A sealed segment gets its object key, its
upload starts at once, and it joins the commit queue in seal order.
"""

from __future__ import annotations

import asyncio

from agent.metrics import METRICS
from agent.produce.abort import Aborter
from agent.produce.autobatch import ProduceFlow
from agent.produce.keys import object_key
from agent.produce.segment import ProduceItem, Segment, Waiter
from agent.produce.upload import Uploader
from agent.produce.withdraw import Withdrawer
from metastore.types import CommitResult
from objectstore.segment import SegmentBuilder


class Batcher(Uploader, Aborter, Withdrawer):
    """The open segment: :meth:`append`, :meth:`tick` and :meth:`seal` (which starts the upload)."""

    async def reserve(self, nbytes: int) -> None:
        await self.budget.acquire(nbytes)

    def append(
        self,
        items: list[ProduceItem],
        reserved: int,
        flow: ProduceFlow | None = None,
        *,
        withdrawable: bool = False,
    ) -> asyncio.Future[list[CommitResult]]:
        """Add one request's batches to the open segment (synchronously, so
        requests from one connection keep their order); the future resolves with
        one result per item after the commit. ``flow`` is the sending
        connection's, for adaptive sealing; ``withdrawable``: the request may be
        withdrawn if that connection closes before its commit starts
        (:mod:`agent.produce.withdraw`)."""
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[list[CommitResult]] = loop.create_future()
        now = self._clock.monotonic()
        seg = self._open
        if seg is None:
            seg = self._open = Segment(SegmentBuilder(), now)
            if self._timer:
                # Seal at exactly opened_at + interval; the half-interval ticker alone
                # seals anywhere in [interval, 1.5 * interval] and adds to every p99.
                loop.call_later(self._interval, self._seal_if_open, seg)
                if self._adaptive:
                    loop.call_later(max(0.0, self._adaptive_at(seg) - now), self._check_adaptive, seg)
        builder = seg.builder
        first = len(builder)
        # No copy: the request frame is not reused, finish() copies once.
        builder.extend(items)
        owner = flow if withdrawable else None
        seg.waiters.append(Waiter(fut, first, len(items), reserved, flow, items, owner))
        seg.nbytes += reserved
        self._policy.appended(flow, now)
        if builder.size >= self._flush_bytes:
            self.seal("size")
        elif self._adaptive and self._policy.all_blocked and now >= self._adaptive_at(seg):
            self.seal("blocked")
        return fut

    def _adaptive_at(self, seg: Segment) -> float:
        """When adaptive sealing may first close ``seg``: the minimum interval after the
        previous seal, or after ``seg`` opened if it is the first. Counting from the last
        seal bounds the PUT and commit rate just as well, and a segment opened while the
        previous one was still committing does not wait a whole minimum again."""
        last = self._last_seal_at
        return (seg.opened_at if last is None else min(last, seg.opened_at)) + self._min_interval

    def _adaptive_reason(self, seg: Segment, now: float) -> str | None:
        if not self._adaptive or now < self._adaptive_at(seg):
            return None
        if self._policy.all_blocked:
            return "blocked"
        if now - self._policy.last_append >= self._idle_gap:
            return "idle"
        return None

    def tick(self) -> None:
        """Abort stalled segments (:mod:`agent.produce.abort`); seal the open segment if
        it is older than the flush interval, or past the minimum interval with every
        waiting connection blocked or the agent idle."""
        self.abort_stalled()
        seg = self._open
        if seg is None:
            return
        now = self._clock.monotonic()
        if now - seg.opened_at >= self._interval:
            self.seal("interval")
            return
        reason = self._adaptive_reason(seg, now)
        if reason is not None:
            self.seal(reason)

    def _check_adaptive(self, seg: Segment) -> None:
        """Timer: at the first adaptive moment, then whenever the agent may have gone idle."""
        if self._open is not seg:
            return
        now = self._clock.monotonic()
        reason = self._adaptive_reason(seg, now)
        if reason is not None:
            self.seal(reason)
            return
        nxt = max(self._policy.last_append + self._idle_gap, self._adaptive_at(seg))
        if nxt < seg.opened_at + self._interval:
            asyncio.get_running_loop().call_later(max(0.0, nxt - now), self._check_adaptive, seg)

    def _seal_if_open(self, seg: Segment) -> None:
        if self._open is seg:
            self.seal("interval")

    async def _tick_loop(self) -> None:
        while True:
            await asyncio.sleep(self._interval / 2)
            self.tick()

    def seal(self, reason: str = "drain") -> None:
        seg = self._open
        if seg is None or len(seg.builder) == 0:
            return
        self._open = None
        self._last_seal_at = now = self._clock.monotonic()
        self._policy.sealed()
        METRICS.seals.labels(reason).inc()
        self._seq += 1
        seg.sealed_at = now
        self._abortable[id(seg)] = seg
        seg.key = self._object_key()
        seg.upload = asyncio.get_running_loop().create_task(self._upload(seg))
        self._inflight += 1
        self._pending[id(seg)] = seg.sealed_at
        self._idle.clear()
        self._sealed.put_nowait(seg)

    def _object_key(self) -> str:
        return object_key(self._prefix, self._agent_id, f"{self._seq:08d}")
