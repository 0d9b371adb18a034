"""A quorum of object stores: the journal tier's N buckets, written at once, durable at Q.

Where it sits: under :class:`~objectstore.journal.JournaledStore`, which sends it
every key under ``journal/`` (the agent's small journal objects, issue 40). The
agent's uploader PUTs a journal object here and acknowledges its produce
requests once the metastore commit returned, so :meth:`QuorumStore.put` returns
as soon as ``quorum`` of the N buckets hold the object (the seeds' "2-of-3
write"); the other PUTs finish in the background. A bucket that is down or
stalled cannot hold memory or slow the write:

* each bucket has at most ``max_pending`` unfinished PUTs (256: a stalled
  bucket holds at most that many objects' bytes); a PUT that finds its bucket
  at the limit skips it (counted as a failed copy);
* a straggler is abandoned after ``straggler_timeout_s``;
* a PUT whose quorum is not reached within ``quorum_timeout_s`` (two buckets
  stalled) raises :class:`~objectstore.errors.TransientError`, its copies
  going on in the background;
* if the failures leave fewer than ``quorum`` possible copies the PUT raises
  :class:`~objectstore.errors.TransientError` at once: the object is never
  acknowledged on fewer copies than the quorum (the uploader then falls back to
  the standard bucket).

Reads (:meth:`get`, :meth:`head`) ask the bucket that answers best first (fewest
failures, then lowest recent latency) and, if it has not answered within
``hedge_after_s``, the next one too; a missing copy (``ObjectNotFound``) or an
error moves on to the next bucket, so an object missing from one bucket is read
from another. Deletes go to every bucket (a failure on one is logged and left
to the orphan GC, which lists the union of the buckets).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import TypeVar

from objectstore.base import ObjectInfo, ObjectStore, StoreBase, check_key, key_sort
from objectstore.errors import ObjectExists, ObjectNotFound, ObjectStoreError, TransientError

log = logging.getLogger(__name__)
T = TypeVar("T")

# on_put(bucket index, outcome "ok" | "exists" | "failed" | "skipped" | "abandoned", seconds)
PutObserver = Callable[[int, str, float], None]


class _Bucket:
    __slots__ = ("errors", "index", "latency", "pending", "store")

    def __init__(self, index: int, store: ObjectStore) -> None:
        self.index = index
        self.store = store
        self.pending = 0  # unfinished PUTs
        self.errors = 0  # consecutive failures (reset by a success)
        self.latency = 0.0  # EWMA of successful call seconds

    def ok(self, seconds: float) -> None:
        self.errors = 0
        self.latency = seconds if self.latency == 0.0 else 0.8 * self.latency + 0.2 * seconds

    def rank(self) -> tuple[int, int, float]:
        return (min(self.errors, 3), self.pending, self.latency)


class QuorumStore(StoreBase):
    """N stores written in parallel, a PUT durable once ``quorum`` of them hold it."""

    def __init__(
        self,
        stores: Sequence[ObjectStore],
        quorum: int,
        *,
        max_pending: int = 256,
        straggler_timeout_s: float = 30.0,
        quorum_timeout_s: float = 2.0,
        hedge_after_s: float = 0.05,
        on_put: PutObserver | None = None,
    ) -> None:
        if not stores:
            raise ValueError("a journal needs at least one bucket")
        if not 1 <= quorum <= len(stores):
            raise ValueError(f"journal quorum {quorum} not in 1..{len(stores)}")
        self.buckets = [_Bucket(i, s) for i, s in enumerate(stores)]
        self.quorum = quorum
        self._max_pending = max_pending
        self._straggler_timeout = straggler_timeout_s
        self._quorum_timeout = quorum_timeout_s
        self._hedge_after = hedge_after_s
        self._on_put = on_put
        self._stragglers: set[asyncio.Task[None]] = set()
        self._writing: dict[str, set[asyncio.Task[None]]] = {}  # key -> its copies still being PUT

    # -- writes ----------------------------------------------------------------------

    async def put(self, key: str, data: bytes | memoryview) -> None:
        check_key(key)
        loop = asyncio.get_running_loop()
        done: asyncio.Future[None] = loop.create_future()
        done.add_done_callback(lambda f: f.cancelled() or f.exception())  # retrieved even if timed out
        state = {"ok": 0, "failed": 0, "exists": 0}
        n = len(self.buckets)
        first_error: list[BaseException] = []

        def settle() -> None:
            if done.done():
                return
            # A write wins only with ``quorum`` copies of its own: two writers racing on
            # one key cannot both hold a majority (counting another's copy as ours
            # once let two of eight racing writers "win"). A retry that finds its
            # own earlier copies gets ObjectExists, which the retry layer resolves by
            # comparing the bytes (objectstore.retry).
            undecided = n - state["ok"] - state["exists"] - state["failed"]
            if state["ok"] >= self.quorum:
                done.set_result(None)
            elif state["ok"] + undecided >= self.quorum:
                return  # the buckets still writing may make it
            elif state["ok"] + state["exists"] >= self.quorum:
                done.set_exception(ObjectExists(f"{key} exists", key=key))
            elif n - state["failed"] < self.quorum:
                cause = first_error[0] if first_error else None
                done.set_exception(
                    TransientError(
                        f"journal quorum lost for {key}: {state['ok']} of {n} copies,"
                        f" {self.quorum} needed ({cause})",
                        key=key,
                    )
                )

        async def one(b: _Bucket) -> None:
            t0 = time.perf_counter()
            outcome = "failed"
            try:
                await asyncio.wait_for(b.store.put(key, data), self._straggler_timeout)
                outcome = "ok"
            except ObjectExists:
                outcome = "exists"
            except TimeoutError:
                outcome = "abandoned"
            except asyncio.CancelledError:
                outcome = "abandoned"
                raise
            except Exception as e:  # every failure of one copy is one missing copy
                first_error.append(e)
            finally:
                b.pending -= 1
                seconds = time.perf_counter() - t0
                if outcome in ("ok", "exists"):
                    b.ok(seconds)
                    state[outcome] += 1
                else:
                    b.errors += 1
                    state["failed"] += 1
                if self._on_put is not None:
                    self._on_put(b.index, outcome, seconds)
                settle()

        for b in self.buckets:
            if b.pending >= self._max_pending:
                state["failed"] += 1  # stalled: this copy is not attempted
                b.errors += 1
                if self._on_put is not None:
                    self._on_put(b.index, "skipped", 0.0)
                continue
            b.pending += 1
            task = loop.create_task(one(b))
            self._stragglers.add(task)
            task.add_done_callback(self._stragglers.discard)
            self._writing.setdefault(key, set()).add(task)
            task.add_done_callback(functools.partial(self._copy_done, key))
        settle()
        try:
            await asyncio.wait_for(asyncio.shield(done), self._quorum_timeout)
        except TimeoutError:
            raise TransientError(
                f"journal quorum not reached for {key} within {self._quorum_timeout} s:"
                f" {state['ok']} of {n} copies, {self.quorum} needed",
                key=key,
            ) from None

    # -- reads -----------------------------------------------------------------------

    def _order(self) -> list[_Bucket]:
        return sorted(self.buckets, key=_Bucket.rank)

    async def _first(self, call: Callable[[ObjectStore], Awaitable[T]], key: str) -> T:
        """``call`` on the best bucket, hedged to the next one after ``hedge_after_s``;
        the first success wins. Every bucket missing the key: ObjectNotFound."""
        order = self._order()
        running: dict[asyncio.Task[T], _Bucket] = {}
        errors: list[BaseException] = []
        started = 0

        def launch() -> None:
            nonlocal started
            b = order[started]
            started += 1
            t0 = time.perf_counter()

            async def timed() -> T:
                out = await call(b.store)
                b.ok(time.perf_counter() - t0)
                return out

            running[asyncio.ensure_future(timed())] = b

        launch()
        try:
            while running:
                timeout = self._hedge_after if started < len(order) else None
                finished, _ = await asyncio.wait(
                    running, timeout=timeout, return_when=asyncio.FIRST_COMPLETED
                )
                if not finished:
                    launch()  # the hedge
                    continue
                for t in finished:
                    b = running.pop(t)
                    e = t.exception()
                    if e is None:
                        return t.result()
                    if not isinstance(e, ObjectStoreError):
                        raise e  # the caller's mistake (a bad range), the same on every bucket
                    if not isinstance(e, ObjectNotFound):
                        b.errors += 1
                    errors.append(e)
                if not running and started < len(order):
                    launch()
        finally:
            for t in running:
                t.cancel()
        if errors and all(isinstance(e, ObjectNotFound) for e in errors):
            raise ObjectNotFound(f"{key} is in none of the journal buckets", key=key)
        raise TransientError(f"no journal bucket answered for {key}: {errors[-1] if errors else ''}", key=key)

    async def get(self, key: str, start: int | None = None, end: int | None = None) -> bytes:
        return await self._first(lambda s: s.get(key, start, end), key)

    async def head(self, key: str) -> ObjectInfo:
        return await self._first(lambda s: s.head(key), key)

    def _copy_done(self, key: str, task: asyncio.Task[None]) -> None:
        tasks = self._writing.get(key)
        if tasks is not None:
            tasks.discard(task)
            if not tasks:
                del self._writing[key]

    async def delete_many(self, keys: Sequence[str]) -> None:
        # A copy still being written after the quorum answered would land after the
        # delete and bring the key back: let those PUTs finish first (each ends within
        # the straggler timeout; shielded, so a cancelled delete does not cancel them).
        writing = [t for k in keys for t in self._writing.get(k, ())]
        if writing:
            await asyncio.gather(*(asyncio.shield(t) for t in writing), return_exceptions=True)
        results = await asyncio.gather(
            *(b.store.delete_many(keys) for b in self.buckets), return_exceptions=True
        )
        failed = [r for r in results if isinstance(r, BaseException)]
        for r in failed:
            log.warning("journal delete of %d keys failed on one bucket: %s", len(keys), r)
        if len(failed) == len(results) and failed:
            if isinstance(failed[0], ObjectStoreError):
                raise failed[0]
            raise TransientError(f"journal delete failed on every bucket: {failed[0]}")

    async def list(
        self, prefix: str = "", *, start_after: str | None = None
    ) -> AsyncIterator[ObjectInfo]:
        """The union of the buckets' keys, in key order (a key once, whichever copies exist).
        A bucket that fails to list is skipped with a warning (the GC lists again later)."""
        seen: dict[str, ObjectInfo] = {}
        for b in self.buckets:
            try:
                async for info in b.store.list(prefix, start_after=start_after):
                    seen.setdefault(info.key, info)
            except ObjectStoreError as e:
                log.warning("journal bucket %d did not list %r: %s", b.index, prefix, e)
        for k in sorted(seen, key=key_sort):
            yield seen[k]

    async def close(self) -> None:
        for t in list(self._stragglers):
            t.cancel()
        if self._stragglers:
            await asyncio.gather(*self._stragglers, return_exceptions=True)
        for b in self.buckets:
            await b.store.close()
