"""Read leases of the Spark source: planned objects stay in storage while a job needs them.

Where it sits: the driver plans a batch query or a micro-batch and registers
the objects of the plan under a read lease (``Metastore.acquire_read_lease``,
through the agents' planning API or the metastore) with a deadline; the
compactor's GC never deletes an object under a live lease. Who renews:

* **streaming**: :class:`StreamLeases` lives in the driver's long-running
  streaming worker; a daemon thread renews every open micro-batch's lease at a
  third of its timeout, and ``commit()`` releases the batches Spark finished. If
  the driver dies, renewals stop and the leases expire (``leaseTimeout``, 5 min
  by default).
* **batch**: the planner process does not outlive planning, so the lease starts
  long (``leaseTimeout``, 60 min by default) and every task renews it when it
  starts or keeps reading later than a third of the timeout after the last
  renewal it knows of (:class:`TaskLease`). A job queued longer than the
  timeout before any task starts is not protected: raise ``leaseTimeout``.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from dataclasses import dataclass

from spark_source.agents import AgentBackend
from spark_source.backend import Backend, LeaseSpec
from spark_source.driver import plan_sync
from spark_source.options import SourceOptions
from spark_source.plan import ObjectRef

log = logging.getLogger("spark_source")


def new_lease(opts: SourceOptions, kind: str, *, streaming: bool) -> LeaseSpec:
    return LeaseSpec(
        f"spark-{kind}-{uuid.uuid4().hex}", opts.lease_ttl_ms(streaming), opts.client_label
    )


def wall_ms() -> int:
    return time.time_ns() // 1_000_000


class LeaseLostError(RuntimeError):
    """Objects a task was planned to read were collected (its lease had expired)."""


@dataclass(frozen=True)
class TaskLease:
    """What a task knows of its plan's lease (picklable, shipped in the partition)."""

    lease: LeaseSpec
    renewed_at_ms: int

    def due(self, now_ms: int) -> bool:
        return now_ms - self.renewed_at_ms >= self.lease.ttl_ms // 3


class TaskLeaseKeeper:
    """Executor side: renew the plan's lease when this task runs late (batch queries)."""

    def __init__(
        self,
        opts: SourceOptions,
        ticket: TaskLease | None,
        refs: dict[str, ObjectRef],
    ) -> None:
        self.opts = opts
        self.ticket = ticket
        self.refs = refs  # updated in place with fresh presigned URLs
        self.keys = sorted(refs)
        self.last_ms = ticket.renewed_at_ms if ticket is not None else 0

    def tick(self) -> None:
        t = self.ticket
        if t is None or not self.keys:
            return
        now = wall_ms()
        if now - self.last_ms < t.lease.ttl_ms // 3:
            return
        try:
            missing, fresh = plan_sync(self.opts, self._renew)
        except Exception as e:  # the read itself may still succeed; say why if not
            log.warning("floe source: renewing read lease %s failed: %s", t.lease.lease_id, e)
            self.last_ms = now
            return
        self.last_ms = now
        self.refs.update((k, ref) for k, ref in fresh.items() if k in self.refs)
        if missing:
            raise LeaseLostError(
                f"objects {missing[:3]} planned for this task were collected before it read "
                f"them: the read lease {t.lease.lease_id} expired (the job waited longer than "
                "leaseTimeout); re-run the query or raise leaseTimeout"
            )

    async def _renew(self, backend: Backend) -> tuple[list[str], dict[str, ObjectRef]]:
        """Through the agents: fresh URLs for exactly the plan's byte runs and objects."""
        assert self.ticket is not None
        if isinstance(backend, AgentBackend):
            return await backend.renew_refs(self.ticket.lease, self.keys, self.refs)
        missing, urls = await backend.renew_lease(self.ticket.lease, self.keys)
        return missing, {k: ObjectRef(self.refs[k].size, u) for k, u in urls.items() if k in self.refs}


class StreamLeases:
    """Driver side (streaming): one lease per planned micro-batch, renewed by a thread."""

    def __init__(self, opts: SourceOptions) -> None:
        self.opts = opts
        self._lock = threading.Lock()
        self._open: dict[str, tuple[LeaseSpec, list[str]]] = {}
        self._ends: dict[str, dict[tuple[str, int], int]] = {}  # lease -> batch end offsets
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def new(self) -> LeaseSpec:
        return new_lease(self.opts, "stream", streaming=True)

    def hold(
        self, lease: LeaseSpec, keys: list[str], end: dict[tuple[str, int], int] | None = None
    ) -> None:
        with self._lock:
            self._open[lease.lease_id] = (lease, keys)
            self._ends[lease.lease_id] = dict(end or {})
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="floe-lease-renewer", daemon=True
                )
                self._thread.start()

    def release_all(self, upto: dict[tuple[str, int], int] | None = None) -> None:
        """End the leases of batches Spark committed: those ending at or before ``upto``
        (every partition), or all of them."""
        with self._lock:
            held = [
                i
                for i in self._open
                if upto is None or all(e <= upto.get(tp, -1) for tp, e in self._ends[i].items())
            ]
            for i in held:
                del self._open[i]
                self._ends.pop(i, None)
        for lease_id in held:
            try:
                plan_sync(self.opts, lambda b, i=lease_id: b.release_lease(i))  # type: ignore[misc]
            except Exception as e:  # it expires on its own
                log.warning("floe source: releasing read lease %s failed: %s", lease_id, e)

    def renew_all(self) -> None:
        with self._lock:
            held = list(self._open.values())
        for lease, keys in held:
            try:
                missing, _ = plan_sync(
                    self.opts,
                    lambda b, s=lease, k=keys: b.renew_lease(s, k),  # type: ignore[misc]
                )
            except Exception as e:
                log.warning("floe source: renewing read lease %s failed: %s", lease.lease_id, e)
                continue
            if missing:
                log.warning(
                    "floe source: %d object(s) of lease %s were collected", len(missing), lease.lease_id
                )

    def _run(self) -> None:
        while not self._stop.is_set():
            with self._lock:
                ttls = [lease.ttl_ms for lease, _ in self._open.values()]
            period = max(0.05, min(ttls, default=60_000) / 3 / 1000.0)
            if self._stop.wait(period):
                return
            self.renew_all()

    def stop(self) -> None:
        self._stop.set()
