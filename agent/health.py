"""Liveness and readiness of an agent: ``/healthz`` and ``/readyz`` on the admin port.

Where it sits: created by :class:`~agent.server.AgentServer`, probing the parts
the broker owns. ``/healthz`` is liveness: the process and its event loop
answer (a load balancer or ECS restarts the task when it does not). ``/readyz``
is readiness: whether this agent can do its job now, so a load balancer sends
clients elsewhere while it cannot. Three checks, each run every
``interval_s`` with its own deadline (``deadline_s``):

* metastore reachable: a registry read answers within the deadline;
* object store writable: a small probe object is PUT (and deleted) within the
  deadline, under ``_health/`` (its own prefix: no data key is touched);
* produce pipeline not stalled: no sealed segment has waited for its upload and
  commit longer than ``stall_s``.

A failing check turns the agent not-ready at once; so a store or metastore
that stops answering is seen within ``interval_s + deadline_s`` (1 + 3 s by
default, well inside a load balancer's 10 s), and ready again at the first
passing round. The clock and the probes' deadline are injected, so tests call
:meth:`Readiness.check_once` directly instead of sleeping.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass, field
from typing import Any

from agent.clock import Clock, SystemClock
from agent.tasks import cancel_and_wait

log = logging.getLogger(__name__)

PROBE_PREFIX = "_health/"


@dataclass
class Check:
    ok: bool = False
    detail: str = "not checked yet"
    at_ms: int = 0


@dataclass
class ReadyState:
    checks: dict[str, Check] = field(default_factory=dict)

    @property
    def ready(self) -> bool:
        return bool(self.checks) and all(c.ok for c in self.checks.values())

    def reasons(self) -> list[str]:
        return [f"{name}: {c.detail}" for name, c in sorted(self.checks.items()) if not c.ok]

    def as_json(self) -> dict[str, Any]:
        return {
            "ready": self.ready,
            "checks": {n: {"ok": c.ok, "detail": c.detail, "at_ms": c.at_ms} for n, c in self.checks.items()},
        }


class Readiness:
    def __init__(
        self,
        meta: Any,
        store: Any,
        pipeline_stall_s: Callable[[], float],
        *,
        agent_id: str,
        clock: Clock | None = None,
        interval_s: float = 1.0,
        deadline_s: float = 3.0,
        stall_s: float = 30.0,
    ) -> None:
        self.meta = meta
        self.store = store
        self.pipeline_stall_s = pipeline_stall_s
        self.agent_id = agent_id
        self.clock = clock or SystemClock()
        self.interval_s = interval_s
        self.deadline_s = deadline_s
        self.stall_s = stall_s
        self.state = ReadyState()
        self._task: asyncio.Task[None] | None = None
        self._was_ready: bool | None = None

    async def _metastore(self) -> str:
        await self.meta.live_agents(self.clock.now_ms())
        return "reachable"

    async def _object_store(self) -> str:
        key = f"{PROBE_PREFIX}{self.agent_id[:40]}-{uuid.uuid4().hex[:12]}"
        await self.store.put(key, b"floe readiness probe")
        with suppress(Exception):  # a leftover probe is harmless; the write is what counts
            await self.store.delete_many([key])
        return "writable"

    async def _run(self, name: str, probe: Callable[[], Any]) -> Check:
        try:
            detail = await asyncio.wait_for(probe(), self.deadline_s)
            return Check(True, detail, self.clock.now_ms())
        except TimeoutError:
            return Check(False, f"no answer within {self.deadline_s:g} s", self.clock.now_ms())
        except Exception as e:
            msg = str(e).splitlines()[0][:300] if str(e) else type(e).__name__
            return Check(False, msg, self.clock.now_ms())

    async def check_once(self) -> ReadyState:
        """One round of all checks (concurrently); returns and keeps the result."""
        meta, store = await asyncio.gather(
            self._run("metastore", self._metastore), self._run("object_store", self._object_store)
        )
        waited = self.pipeline_stall_s()
        now = self.clock.now_ms()
        pipeline = (
            Check(True, "flowing", now)
            if waited <= self.stall_s
            else Check(False, f"a segment has waited {waited:.0f} s for upload and commit", now)
        )
        self.state = ReadyState({"metastore": meta, "object_store": store, "produce_pipeline": pipeline})
        if self.state.ready != self._was_ready:
            if self.state.ready:
                log.info("ready")
            else:
                log.warning("not ready: %s", "; ".join(self.state.reasons()))
            self._was_ready = self.state.ready
        return self.state

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._loop(), name="readiness")

    async def _loop(self) -> None:
        while True:
            try:
                await self.check_once()
            except asyncio.CancelledError:
                raise
            except Exception:  # a bug in a check must not stop the others
                log.exception("readiness round failed")
            await asyncio.sleep(self.interval_s)

    async def stop(self) -> None:
        await cancel_and_wait(self._task)
        self._task = None
