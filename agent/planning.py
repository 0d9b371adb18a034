"""The planning API (v1): how a Spark driver that only knows ``kafka.bootstrap.servers``
plans reads of Floe's storage through the agents.

Where it sits: routes on the agent's admin HTTP server, registered by
:func:`add_planning_routes`; a driver finds them through DescribeConfigs of a
broker (``floe.planning.url``) on the Kafka port. It turns offset ranges into
object keys and byte ranges (segments) or Parquet objects and offset ranges,
registers the planned objects under a read lease (``Metastore.acquire_read_lease``,
so the compactor's GC keeps them while the job runs) and, for S3 stores,
presigns the objects so executors read them with no credentials. It imports
no part of the Spark source: the shared planning logic is
:mod:`metastore.reads`, the record-level timestamp lookup
:mod:`objectstore.timestamps`.

Routes (JSON in, JSON out; errors ``{"error": {"type", "message"}}`` with 4xx/5xx)::

    GET    /floe/plan/v1                      version, cluster id, store kind
    POST   /floe/plan/v1/partitions           {subscribe|pattern|assign} -> partitions
    POST   /floe/plan/v1/offsets-for-times    {queries: [{topic_id, partition, timestamp}]}
    POST   /floe/plan/v1/read-plan            {ranges, lease?, presign?} -> batches, objects
    PUT    /floe/plan/v1/leases/{id}          {keys, ttl_ms, presign?} renew (+ fresh URLs)
    DELETE /floe/plan/v1/leases/{id}          release
"""

from __future__ import annotations

import logging
import re
import uuid
from typing import TYPE_CHECKING, Any

from aiohttp import web

from metastore.reads import PlanConflict, batch_at_time, plan_ranges, select_partitions
from metastore.types import BatchLocation, MetastoreError
from objectstore import presign_get, public_url
from objectstore.parquet import is_parquet_key, read_offset_range
from objectstore.timestamps import first_offset_in_batch, first_offset_in_rows

if TYPE_CHECKING:
    from agent.broker import Broker

log = logging.getLogger(__name__)

VERSION = 1
PREFIX = "/floe/plan/v1"
MAX_TTL_MS = 7 * 24 * 3600 * 1000


def _error(status: int, kind: str, message: str) -> web.Response:
    return web.json_response({"error": {"type": kind, "message": message}}, status=status)


def _batch_json(b: BatchLocation) -> list[Any]:
    return [
        b.object_key,
        b.byte_pos,
        b.byte_len,
        b.base_offset,
        b.last_offset,
        b.record_count,
        b.max_timestamp,
        b.append_time,
    ]


class PlanningService:
    def __init__(self, broker: Broker) -> None:
        self.broker = broker

    @property
    def meta(self) -> Any:
        return self.broker.meta

    def routes(self, app: web.Application) -> None:
        app.router.add_get(PREFIX, self.info)
        app.router.add_post(PREFIX + "/partitions", self.partitions)
        app.router.add_post(PREFIX + "/offsets-for-times", self.offsets_for_times)
        app.router.add_post(PREFIX + "/read-plan", self.read_plan)
        app.router.add_put(PREFIX + "/leases/{lease_id}", self.renew)
        app.router.add_delete(PREFIX + "/leases/{lease_id}", self.release)

    async def _body(self, request: web.Request) -> dict[str, Any]:
        body = await request.json()
        if not isinstance(body, dict):
            raise ValueError("the request body must be a JSON object")
        return body

    async def _call(self, request: web.Request, fn: Any) -> web.Response:
        client = request.headers.get("X-Floe-Client", "")
        try:
            return web.json_response(await fn(await self._body(request)))
        except (ValueError, KeyError, TypeError, AttributeError, IndexError, re.error) as e:
            return _error(400, "BadRequest", f"{type(e).__name__}: {e}")
        except LookupError as e:
            return _error(409, "DataLoss", str(e))
        except PlanConflict as e:
            return _error(503, "Retriable", str(e))
        except MetastoreError as e:
            log.warning("planning API (%s): metastore failed: %s", client, e)
            return _error(503, "Retriable", f"metastore: {e}")

    async def info(self, _: web.Request) -> web.Response:
        cfg = self.broker.config
        return web.json_response(
            {
                "version": VERSION,
                "versions": [VERSION],
                "cluster_id": cfg.cluster_id,
                "agent_id": cfg.agent_id,
                "objects": public_url(cfg.objects),
            }
        )

    async def partitions(self, request: web.Request) -> web.Response:
        async def go(body: dict[str, Any]) -> Any:
            assign = body.get("assign")
            found = await select_partitions(
                self.meta,
                subscribe=[str(t) for t in body.get("subscribe") or []],
                pattern=body.get("pattern"),
                assign=(
                    {str(t): [int(p) for p in ps] for t, ps in assign.items()}
                    if isinstance(assign, dict)
                    else None
                ),
            )
            out = [
                {
                    "topic": r.topic.name,
                    "topic_id": str(r.topic.id),
                    "partition": r.partition,
                    "log_start": r.log_start,
                    "high_watermark": r.high_watermark,
                }
                for r in found
            ]
            if body.get("read_committed") and found:
                # read_committed readers stop at the last stable offset and skip the
                # aborted transactions (from the metastore, never by decoding).
                views = await self.meta.stable_offsets(
                    [(r.topic.id, r.partition, r.log_start) for r in found]
                )
                for entry, r, v in zip(out, found, views, strict=True):
                    if not v.error:
                        entry["last_stable"] = min(v.last_stable_offset, r.high_watermark)
                        entry["aborted"] = [list(a) for a in v.aborted]
            return {"partitions": out}

        return await self._call(request, go)

    async def offsets_for_times(self, request: web.Request) -> web.Response:
        async def go(body: dict[str, Any]) -> Any:
            out = []
            for q in body["queries"]:
                tid, part, ts = uuid.UUID(q["topic_id"]), int(q["partition"]), int(q["timestamp"])
                offset, batch = await batch_at_time(self.meta, tid, part, ts)
                if batch is not None:
                    exact = await self._record_offset(batch, ts)
                    if exact is not None:
                        offset = max(offset, exact)
                out.append(offset)
            return {"offsets": out}

        return await self._call(request, go)

    async def _record_offset(self, b: BatchLocation, ts: int) -> int | None:
        if is_parquet_key(b.object_key):
            data = await self.broker.store.get(b.object_key)
            rows = read_offset_range(data, b.base_offset, b.last_offset)
            return first_offset_in_rows(rows, ts)
        data = await self.broker.cache.read(b.object_key, b.byte_pos, b.byte_pos + b.byte_len)
        return first_offset_in_batch(data, b.base_offset, ts)

    async def _urls(self, keys: list[str], presign: bool, ttl_ms: int) -> dict[str, str]:
        if not presign:
            return {}
        urls: dict[str, str] = {}
        for k in keys:
            url = await presign_get(self.broker.store, k, max(60, ttl_ms // 1000))
            if url is None:
                return {}
            urls[k] = url
        return urls

    async def read_plan(self, request: web.Request) -> web.Response:
        async def go(body: dict[str, Any]) -> Any:
            ranges = [
                (uuid.UUID(r["topic_id"]), int(r["partition"]), int(r["start"]), int(r["end"]))
                for r in body["ranges"]
            ]
            lease = body.get("lease") or None
            ttl = min(int(lease["ttl_ms"]), MAX_TTL_MS) if lease else 0
            plan = await plan_ranges(
                self.meta,
                ranges,
                lease_id=str(lease["id"]) if lease else None,
                ttl_ms=ttl,
                owner=str(lease.get("owner", "")) if lease else "",
            )
            keys = sorted({b.object_key for r in plan.ranges for b in r.batches})
            urls = await self._urls(keys, bool(body.get("presign")), ttl or 3_600_000)
            return {
                "ranges": [
                    {
                        "first": r.first,
                        "lost": list(r.lost) if r.lost else None,
                        "batches": [_batch_json(b) for b in r.batches],
                    }
                    for r in plan.ranges
                ],
                "objects": {
                    k: {"size": plan.sizes.get(k, -1), "url": urls.get(k)} for k in keys
                },
                "objects_url": public_url(self.broker.config.objects),
                "lease_expires_ms": plan.expires_at_ms,
            }

        return await self._call(request, go)

    async def renew(self, request: web.Request) -> web.Response:
        lease_id = request.match_info["lease_id"]

        async def go(body: dict[str, Any]) -> Any:
            ttl = min(int(body["ttl_ms"]), MAX_TTL_MS)
            keys = [str(k) for k in body.get("keys") or []]
            grant = await self.meta.acquire_read_lease(
                lease_id, keys, ttl, owner=str(body.get("owner", ""))
            )
            present = [k for k in keys if k not in set(grant.missing)]
            return {
                "expires_ms": grant.expires_at_ms,
                "missing": grant.missing,
                "urls": await self._urls(present, bool(body.get("presign")), ttl),
            }

        return await self._call(request, go)

    async def release(self, request: web.Request) -> web.Response:
        lease_id = request.match_info["lease_id"]
        try:
            released = await self.meta.release_read_lease(lease_id)
        except MetastoreError as e:
            return _error(503, "Retriable", f"metastore: {e}")
        return web.json_response({"released": released})


def add_planning_routes(app: web.Application, broker: Broker) -> PlanningService:
    """Serve the planning API on ``app`` (the agent's admin HTTP server)."""
    service = PlanningService(broker)
    service.routes(app)
    return service
