"""The planning API (v1): how a Spark driver that only knows ``kafka.bootstrap.servers``
plans reads of Floe's storage through the agents.

Where it sits: routes on the agent's admin HTTP server, registered by
:func:`add_planning_routes`; a driver finds them through DescribeConfigs of a
broker (``floe.planning.url``) on the Kafka port. It turns offset ranges into
object keys and byte ranges (segments) or Parquet objects and offset ranges,
registers the planned objects under a read lease (``Metastore.acquire_read_lease``,
so the compactor's GC keeps them while the job runs) and, for S3 stores,
presigns what executors may read so they need no credentials. It imports
no part of the Spark source: the shared planning logic is
:mod:`metastore.reads`, the record-level timestamp lookup
:mod:`objectstore.timestamps`.

Who may plan (issue 42): the caller authenticates as a Kafka principal
(:mod:`agent.planning_auth`: HTTP Basic with a PLAIN or SCRAM user, or a
bearer JWT where OAUTHBEARER is configured; anonymous only where a Kafka
listener is anonymous too) and, with ``authorizer=acl``, must hold READ on
every topic it plans, as a consumer's Fetch would (DESCRIBE for timestamp
lookups, as ListOffsets; a pattern lists only the topics it may DESCRIBE, as
Metadata does). A refusal is ``403 TopicAuthorizationFailed`` naming the
topic; an unauthenticated caller gets 401. The peers' credential is neither
needed nor accepted here.

What a plan lets a reader fetch: a segment object holds the batches of many
topics, so it is never presigned whole. The plan presigns, per segment
object, one ranged GET per run of adjacent planned batches
(:mod:`agent.planning_grants`; SigV4 signs the ``Range`` header, so S3
refuses the URL for any other bytes); Parquet objects (one partition each)
are presigned whole; a journal object (issue 40, ``journal/`` keys: the last
seconds before consolidation) against one journal bucket that holds a copy. A
lease renewal presigns again only ranges the caller
may read now: each range must lie within batches of topics it holds READ on
(the segment's own footer; a Parquet object's batch rows), anything else is
refused with 403.

The journal tier (issue 40): the last seconds of a partition (longer if an
agent died before consolidating) are batches under ``journal/`` keys, held
only by the journal buckets. Until then ``JournaledStore.presign_get`` answered
None for them and :func:`~agent.planning_grants.presign_grants` dropped every
URL of the plan, so credential-free executors failed on all of its objects, and
executors with credentials looked for journal keys in the standard bucket. The
plan now serves every offset asked for, journal ones included: a journal
object is presigned against a journal bucket that holds a copy, and the plan
names the journal buckets (``journal_urls``, credentials stripped as for
``objects_url``) for executors that read with their own credentials. Stopping
plans at the first journal batch instead was rejected: a micro-batch's end
offset is fixed before it is planned (Spark's offset log), so the cut would
have to move into the partition listing, and a dead agent's journal objects
would then hold every reader back until the compactor merged them.

Routes (JSON in, JSON out; errors ``{"error": {"type", "message"}}`` with 4xx/5xx)::

    GET    /floe/plan/v1                      version, cluster id, store kind
    POST   /floe/plan/v1/partitions           {subscribe|pattern|assign} -> partitions
    POST   /floe/plan/v1/offsets-for-times    {queries: [{topic_id, partition, timestamp}]}
    POST   /floe/plan/v1/read-plan            {ranges, lease?, presign?} -> batches, objects
                                              objects: {key: {size, url?, ranges?: [[s, e, url]]}},
                                              objects_url, journal_urls (journal/ keys)
    PUT    /floe/plan/v1/leases/{id}          {keys, ttl_ms, presign?, ranges?: {key: [[s, e]]}}
                                              renew (+ fresh URLs: urls, ranges)
    DELETE /floe/plan/v1/leases/{id}          release
"""

from __future__ import annotations

import logging
import re
import uuid
from typing import TYPE_CHECKING, Any

from aiohttp import web

from agent.planning_auth import PlanningAuth, PlanningAuthError
from agent.planning_grants import RangeRefused, plan_grants, presign_grants, renewal_grants
from agent.security.acl import AclOperation, ResourceType
from metastore.reads import PlanConflict, batch_at_time, plan_ranges, select_partitions
from metastore.types import BatchLocation, MetastoreError
from objectstore import public_url
from objectstore.byte_grants import Range
from objectstore.errors import ObjectStoreError
from objectstore.journal import parse_journal_urls
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


class TopicAuthorizationFailed(Exception):
    """The caller may not ``op`` the topic (answered 403, naming it)."""

    def __init__(self, principal: str, op: AclOperation, topic: str) -> None:
        super().__init__(f"Not authorized to access topics: [{topic}] ({principal} needs {op.name} on it)")


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
        self.auth = PlanningAuth(broker.config, broker.meta)

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

    async def _who(self, request: web.Request) -> tuple[str, str]:
        """(principal, client host) of the caller; PlanningAuthError if unauthenticated."""
        return await self.auth.principal(request), request.remote or ""

    def _check(self, who: tuple[str, str], op: AclOperation, topic: str) -> None:
        """Raise TopicAuthorizationFailed unless ``who`` may ``op`` ``topic`` (Kafka's ACLs)."""
        if not self._may(who, op, topic):
            raise TopicAuthorizationFailed(who[0], op, topic)

    def _may(self, who: tuple[str, str], op: AclOperation, topic: str) -> bool:
        a = self.broker.authorizer
        return a is None or a.authorize(who[0], who[1], op, ResourceType.TOPIC, topic)

    async def _check_id(self, who: tuple[str, str], op: AclOperation, topic_id: uuid.UUID) -> None:
        if self.broker.authorizer is None:
            return
        info = await self.broker.topic_by_id(topic_id)
        if info is not None:  # an unknown id plans nothing
            self._check(who, op, info.name)

    async def _call(self, request: web.Request, fn: Any) -> web.Response:
        client = request.headers.get("X-Floe-Client", "")
        try:
            who = await self._who(request)
        except PlanningAuthError as e:
            return _unauthenticated(str(e))
        try:
            return web.json_response(await fn(await self._body(request), who))
        except (TopicAuthorizationFailed, RangeRefused) as e:
            return _error(403, "TopicAuthorizationFailed", str(e))
        except (ValueError, KeyError, TypeError, AttributeError, IndexError, re.error) as e:
            return _error(400, "BadRequest", f"{type(e).__name__}: {e}")
        except LookupError as e:
            return _error(409, "DataLoss", str(e))
        except PlanConflict as e:
            return _error(503, "Retriable", str(e))
        except MetastoreError as e:
            log.warning("planning API (%s): metastore failed: %s", client, e)
            return _error(503, "Retriable", f"metastore: {e}")
        except ObjectStoreError as e:  # a renewal reads segment footers
            log.warning("planning API (%s): object store failed: %s", client, e)
            return _error(503, "Retriable", f"object store: {e}")

    async def info(self, request: web.Request) -> web.Response:
        try:
            await self._who(request)
        except PlanningAuthError as e:
            return _unauthenticated(str(e))
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
        async def go(body: dict[str, Any], who: tuple[str, str]) -> Any:
            assign = body.get("assign")
            subscribe = [str(t) for t in body.get("subscribe") or []]
            assigned = (
                {str(t): [int(p) for p in ps] for t, ps in assign.items()} if isinstance(assign, dict) else None
            )
            # Named topics are checked before they are looked up: a refusal never tells
            # whether the topic exists.
            for name in (*subscribe, *(assigned or {})):
                self._check(who, AclOperation.READ, name)
            found = await select_partitions(
                self.meta, subscribe=subscribe, pattern=body.get("pattern"), assign=assigned
            )
            if body.get("pattern") is not None and not subscribe and assigned is None:
                # As Metadata: a pattern sees only the topics it may DESCRIBE; those must be READ.
                found = [r for r in found if self._may(who, AclOperation.DESCRIBE, r.topic.name)]
                for r in found:
                    self._check(who, AclOperation.READ, r.topic.name)
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
        async def go(body: dict[str, Any], who: tuple[str, str]) -> Any:
            out = []
            for q in body["queries"]:
                tid, part, ts = uuid.UUID(q["topic_id"]), int(q["partition"]), int(q["timestamp"])
                await self._check_id(who, AclOperation.DESCRIBE, tid)
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

    async def _topic_name(self, topic_id: uuid.UUID) -> str | None:
        info = await self.broker.topic_by_id(topic_id)
        return info.name if info is not None else None

    async def read_plan(self, request: web.Request) -> web.Response:
        async def go(body: dict[str, Any], who: tuple[str, str]) -> Any:
            ranges = [
                (uuid.UUID(r["topic_id"]), int(r["partition"]), int(r["start"]), int(r["end"]))
                for r in body["ranges"]
            ]
            for tid in {r[0] for r in ranges}:
                await self._check_id(who, AclOperation.READ, tid)
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
            urls: dict[str, str] = {}
            ranged: dict[str, list[list[Any]]] = {}
            if body.get("presign"):
                parquet, runs = plan_grants(r.batches for r in plan.ranges)
                urls, ranged = await presign_grants(
                    self.broker.store, parquet, runs, ttl or 3_600_000
                )
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
                    k: {"size": plan.sizes.get(k, -1), "url": urls.get(k), "ranges": ranged.get(k)}
                    for k in keys
                },
                "objects_url": public_url(self.broker.config.objects),
                # Unpresigned journal/ keys: executors read them from these buckets in turn.
                "journal_urls": [public_url(u) for u in parse_journal_urls(self.broker.config.journal)],
                "lease_expires_ms": plan.expires_at_ms,
            }

        return await self._call(request, go)

    async def renew(self, request: web.Request) -> web.Response:
        lease_id = request.match_info["lease_id"]

        async def go(body: dict[str, Any], who: tuple[str, str]) -> Any:
            ttl = min(int(body["ttl_ms"]), MAX_TTL_MS)
            keys = [str(k) for k in body.get("keys") or []]
            wanted = {
                str(k): [(int(lo), int(hi)) for lo, hi in v]
                for k, v in (body.get("ranges") or {}).items()
            }
            parquet: list[str] = []
            runs: dict[str, list[Range]] = {}
            if body.get("presign"):
                parquet, runs = await renewal_grants(
                    self.meta,
                    self.broker.store,
                    self._topic_name,
                    lambda name: self._may(who, AclOperation.READ, name),
                    who[0],
                    keys,
                    wanted,
                )
            grant = await self.meta.acquire_read_lease(
                lease_id, sorted({*keys, *wanted}), ttl, owner=str(body.get("owner", ""))
            )
            gone = set(grant.missing)
            urls, ranged = await presign_grants(
                self.broker.store,
                [k for k in parquet if k not in gone],
                {k: v for k, v in runs.items() if k not in gone},
                ttl,
            )
            return {
                "expires_ms": grant.expires_at_ms,
                "missing": grant.missing,
                "urls": urls,
                "ranges": ranged,
            }

        return await self._call(request, go)

    async def release(self, request: web.Request) -> web.Response:
        lease_id = request.match_info["lease_id"]
        try:
            await self._who(request)
        except PlanningAuthError as e:
            return _unauthenticated(str(e))
        try:
            released = await self.meta.release_read_lease(lease_id)
        except MetastoreError as e:
            return _error(503, "Retriable", f"metastore: {e}")
        return web.json_response({"released": released})


def _unauthenticated(message: str) -> web.Response:
    return web.json_response(
        {"error": {"type": "SaslAuthenticationFailed", "message": message}},
        status=401,
        headers={"WWW-Authenticate": 'Basic realm="floe"'},
    )


def add_planning_routes(app: web.Application, broker: Broker) -> PlanningService:
    """Serve the planning API on ``app`` (the agent's admin HTTP server)."""
    service = PlanningService(broker)
    service.routes(app)
    return service
