"""Adaptive sealing (AutoBatch): when waiting longer cannot bring more data.

Sits between the connection layer and the produce pipeline's batcher. Each
Kafka connection owns one :class:`ProduceFlow`; the produce handler passes it
with every request it appends to the open segment, and the pipeline releases
it when the request's commit resolves. The flow learns the connection's
in-flight limit from what the client does: ``max.in.flight`` is not sent on
the wire, but a client at its limit stops sending while earlier requests wait,
so the most produce requests ever outstanding at once is the limit it uses (5
for idempotent producers, 1 for a synchronous one, large for librdkafka with
idempotence off).

:class:`SealPolicy` keeps, for the open segment, how many of the flows with
requests in it can still send more. When that number is zero every waiting
connection is blocked on this very segment: waiting longer brings no more data
from them, so the segment is sealed (reason ``blocked``). When no produce
request has arrived for a while the agent is idle and the segment is sealed too
(reason ``idle``). Neither fires before ``flush_min_interval_ms`` have passed
since the previous seal, which bounds the PUT and commit rates. (Counted from
the segment's opening instead, a segment opened while the previous one was
committing would wait the whole minimum again, the commit's time on top of it.)
``flush_interval_ms`` stays the upper bound (reason ``interval``) and
``flush_bytes`` the size bound (``size``).
"""

from __future__ import annotations


class ProduceFlow:
    """One connection's produce requests, as the batcher sees them."""

    __slots__ = ("in_open", "limit", "outstanding")

    def __init__(self) -> None:
        self.outstanding = 0  # appended, not yet resolved (open or sealed segments)
        self.limit = 0  # learned in-flight limit: the most ever outstanding at once
        self.in_open = 0  # requests in the currently open segment

    @property
    def can_send_more(self) -> bool:
        return self.outstanding < self.limit


class SealPolicy:
    """Tracks whether every flow waiting in the open segment is blocked.

    O(1) per append and per release; O(flows in the segment) per seal.
    """

    __slots__ = ("_flows", "_unblocked", "last_append")

    def __init__(self) -> None:
        self._flows: list[ProduceFlow] = []
        self._unblocked = 0  # flows in the open segment that can still send more
        self.last_append = 0.0

    def appended(self, flow: ProduceFlow | None, now: float) -> None:
        self.last_append = now
        if flow is None:
            return
        was = flow.in_open > 0 and flow.can_send_more
        flow.outstanding += 1
        if flow.outstanding > flow.limit:
            flow.limit = flow.outstanding
        if flow.in_open == 0:
            self._flows.append(flow)
        flow.in_open += 1
        self._unblocked += int(flow.can_send_more) - int(was)

    def released(self, flow: ProduceFlow) -> None:
        """A request of ``flow`` was resolved (committed or failed)."""
        was = flow.in_open > 0 and flow.can_send_more
        flow.outstanding -= 1
        if flow.in_open > 0:
            self._unblocked += int(flow.can_send_more) - int(was)

    def sealed(self) -> None:
        for f in self._flows:
            f.in_open = 0
        self._flows.clear()
        self._unblocked = 0

    @property
    def all_blocked(self) -> bool:
        """Some connection waits in the open segment and none of them can send more."""
        return bool(self._flows) and self._unblocked == 0
