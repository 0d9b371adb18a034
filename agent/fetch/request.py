"""Step 1 of a Fetch, and the read side's one entry point: :func:`serve`.

Where it sits: the Fetch handler (:mod:`agent.handlers.fetch`: versions and
registry) calls :func:`serve`, which decides the request's form and then walks
the steps in order (see :mod:`agent.fetch`):

- sessionless (v4-6, or session id 0 with epoch -1) and full (epoch 0: a new
  session, closing the one named; epoch -1 with a session id: close it) requests:
  :mod:`~agent.fetch.resolve` -> :mod:`~agent.fetch.session` (a new session holds
  every partition) -> :mod:`~agent.fetch.poll` -> :func:`agent.fetch.answer.full`;
- incremental requests (the session's next epoch): :mod:`~agent.fetch.resolve`
  and :func:`agent.fetch.session.update` now, then :mod:`~agent.fetch.poll` ->
  :func:`agent.fetch.answer.incremental`. An unknown session gets
  FETCH_SESSION_ID_NOT_FOUND, a wrong epoch (or a session busy with another
  request) INVALID_FETCH_SESSION_EPOCH, as top-level errors.

The request's form is decided and the session updated at once, in request
order; the look itself is a :class:`~agent.connection.Deferred` (the connection
keeps reading while the Fetch long-polls, responses still leave in order).
``max_bytes`` is capped here by the broker's ``fetch_max_bytes`` (Kafka's
``fetch.max.bytes``, 55 MiB) and, when the response is built, by what is left
of the responses' share (3/4) of the agent's memory budget
(``queued_max_request_bytes``, :mod:`agent.security.limits`; the planned bytes
are reserved in it, :class:`agent.fetch.plan.Reservation`): a Fetch asking 2^31-1 gets at most that, and the
first partition with data still gets its first whole batch (KIP-74).
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine, Generator
from typing import TYPE_CHECKING, Any

from agent.connection import Deferred
from agent.fetch import answer, poll, session
from agent.fetch.plan import Reservation, response_room
from agent.fetch.resolve import resolve
from agent.metrics import METRICS
from kafka_protocol.errors import ErrorCode

if TYPE_CHECKING:
    from agent.connection import RequestContext
    from agent.fetch.host import FetchHost
    from kafka_protocol.messages import FetchRequest, FetchResponse

_SESSIONLESS = METRICS.fetch_forms.labels("sessionless")
_FULL = METRICS.fetch_forms.labels("full")
_INCREMENTAL = METRICS.fetch_forms.labels("incremental")


async def serve(host: FetchHost, ctx: RequestContext, req: FetchRequest) -> Deferred | FetchResponse:
    """Answer one Fetch: a session error at once, else a deferred response."""
    v = ctx.header.api_version
    by_id = v >= 13
    if v < 7 or (req.session_id == 0 and req.session_epoch == session.FINAL_EPOCH):
        _SESSIONLESS.inc()
        return Deferred(_Lazy(lambda: _full(host, ctx, cap(host, ctx, req), by_id, None)))
    cache = host.fetch_sessions
    if req.session_epoch in (session.INITIAL_EPOCH, session.FINAL_EPOCH):  # a full request
        (_FULL if req.session_epoch == session.INITIAL_EPOCH else _SESSIONLESS).inc()
        if req.session_id:
            cache.remove(req.session_id)
        new = None
        if req.session_epoch == session.INITIAL_EPOCH:
            new = cache.create(sum(len(t.partitions) for t in req.topics), by_id)
        return Deferred(_Lazy(lambda: _full(host, ctx, cap(host, ctx, req), by_id, new)))
    held = cache.get(req.session_id)
    if held is None:
        return answer.error(ErrorCode.FETCH_SESSION_ID_NOT_FOUND)
    if req.session_epoch != held.epoch or held.by_id != by_id or held.busy:
        return answer.error(ErrorCode.INVALID_FETCH_SESSION_EPOCH)
    held.epoch = session.next_epoch(held.epoch)
    _INCREMENTAL.inc()
    session.update(held, req, await resolve(host, ctx, req, by_id), by_id)
    return Deferred(_Lazy(lambda: _incremental(host, ctx, cap(host, ctx, req), held)))


def cap(host: FetchHost, ctx: RequestContext, req: FetchRequest) -> FetchRequest:
    """Bound ``req.max_bytes`` by fetch_max_bytes and, at build time, by the
    budget of unread responses left (never below 0: one batch still goes)."""
    limit = host.config.fetch_max_bytes
    budget = getattr(ctx.conn, "response_budget", None)
    if budget is not None:
        limit = min(limit, response_room(budget))
    if req.max_bytes > limit:
        req.max_bytes = limit
    return req


async def _full(
    host: FetchHost, ctx: RequestContext, req: FetchRequest, by_id: bool, new: session.FetchSession | None
) -> FetchResponse:
    """Sessionless, or the first request of a new session (which then holds every
    requested partition and what this response told about it)."""
    wants = await resolve(host, ctx, req, by_id)
    keys = session.hold(new, req, wants, by_id) if new is not None else None
    reservation = _reservation(ctx)
    try:
        results = await poll.until_enough(host, req, wants, fresh=new is not None, reservation=reservation)
        return answer.full(req, wants, results, new, keys)
    finally:
        if reservation is not None:
            reservation.release()


async def _incremental(
    host: FetchHost, ctx: RequestContext, req: FetchRequest, held: session.FetchSession
) -> FetchResponse:
    reservation = _reservation(ctx)
    try:
        return answer.incremental(held, await poll.until_news(host, req, held, reservation))
    finally:
        if reservation is not None:
            reservation.release()


def _reservation(ctx: RequestContext) -> Reservation | None:
    """The bytes this Fetch plans, counted in the agent's response budget until its
    response is handed to the connection. The response is built in the connection's
    writer, which writes it (and counts what stays unread) right after this returns,
    with no await in between: the count moves from the reservation to the connection."""
    budget = getattr(ctx.conn, "response_budget", None)
    return Reservation(budget) if budget is not None else None


class _Lazy:
    """An awaitable that creates its coroutine when first awaited, so a response
    dropped with its connection leaves no "never awaited" coroutine behind."""

    __slots__ = ("_factory",)

    def __init__(self, factory: Callable[[], Coroutine[Any, Any, FetchResponse]]) -> None:
        self._factory = factory

    def __await__(self) -> Generator[Any, None, FetchResponse]:
        return self._factory().__await__()
