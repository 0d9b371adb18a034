"""Agents mode: the driver plans through the agents (``kafka.bootstrap.servers`` only).

Where it sits: one :class:`~spark_source.backend.Backend`, beside the direct
metastore mode (:mod:`spark_source.direct`). The driver asks a bootstrap
server, over the Kafka protocol, where the planning API is (DescribeConfigs of
a broker: ``floe.planning.url``), then calls it over HTTP (``agent/planning.py``):
partitions and offsets, timestamps resolved to the exact record, read plans
whose objects the agent leases (and, for S3, presigns, so executors need no
bucket credentials). No database or bucket credentials on the driver, and no
internal credential either (issue 42): with a SASL ``kafka.security.protocol``
the driver authenticates as the job's Kafka user, over the Kafka protocol for
discovery and with HTTP Basic for planning (:mod:`spark_source.kafka_auth`),
and the agents check that user's ACLs (READ on every topic read).
"""

from __future__ import annotations

import itertools
import json
import logging
import socket
import ssl
import struct
import uuid
from collections.abc import Mapping
from typing import Any

import aiohttp

from kafka_protocol.framing import RequestHeader, encode_request
from kafka_protocol.messages import DescribeConfigsRequest, DescribeConfigsResponse
from metastore.types import BatchLocation
from spark_source.backend import (
    DataLossError,
    LeaseSpec,
    PartitionState,
    PlanningError,
    ReadPlan,
    State,
    data_loss,
)
from spark_source.kafka_auth import KafkaAuthError, TopicAuthorizationError, authenticate
from spark_source.offsets import TopicPartition
from spark_source.options import OptionError, SourceOptions
from spark_source.plan import ObjectRef

log = logging.getLogger("spark_source")

PLANNING_KEY = "floe.planning.url"
API_VERSION = 1
_corr = itertools.count(1)
_DISCOVERED: dict[str, str] = {}  # bootstrap servers -> planning URL (per process)


def _servers(bootstrap: str) -> list[tuple[str, int]]:
    out = []
    for item in bootstrap.split(","):
        item = item.strip()
        if not item:
            continue
        host, _, port = item.rpartition(":")
        if not host or not port.isdigit():
            raise OptionError(f"kafka.bootstrap.servers: {item!r} is not host:port")
        out.append((host.strip("[]"), int(port)))
    if not out:
        raise OptionError("kafka.bootstrap.servers names no server")
    return out


def _read_exact(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("connection closed by the broker")
        buf += chunk
    return bytes(buf)


def _describe_broker(host: str, port: int, opts: SourceOptions) -> dict[str, str]:
    """Broker configs (DescribeConfigs v1, resource BROKER "") over the Kafka protocol,
    after SASL authentication on a SASL listener."""
    timeout_s, client_id = opts.request_timeout_ms / 1000, opts.client_label
    req = DescribeConfigsRequest(
        resources=[
            DescribeConfigsRequest.DescribeConfigsResource(
                resource_type=4, resource_name="", configuration_keys=[PLANNING_KEY]
            )
        ]
    )
    with socket.create_connection((host, port), timeout=timeout_s) as raw:
        sock = raw
        if opts.security_protocol == "SASL_SSL":
            sock = ssl.create_default_context().wrap_socket(raw, server_hostname=host)
        if opts.credentials is not None:
            authenticate(sock, opts.credentials, client_id, _read_exact, lambda: next(_corr))
        corr = next(_corr)
        sock.sendall(encode_request(RequestHeader(32, 1, corr, client_id), req))
        (size,) = struct.unpack(">i", _read_exact(sock, 4))
        body = _read_exact(sock, size)
    (got,) = struct.unpack_from(">i", body, 0)
    if got != corr:
        raise ConnectionError(f"correlation id {got} != {corr}")
    resp = DescribeConfigsResponse.decode(memoryview(body)[4:], 1)
    out: dict[str, str] = {}
    for r in resp.results:
        if r.error_code == 31:  # CLUSTER_AUTHORIZATION_FAILED
            who = opts.credentials.username if opts.credentials else "ANONYMOUS"
            raise KafkaAuthError(
                f"Kafka user {who!r} may not describe the broker configs that name the planning"
                " API (grant it DESCRIBE_CONFIGS on the cluster)"
            )
        for c in r.configs:
            if c.value is not None:
                out[c.name] = c.value
    return out


def discover(opts: SourceOptions) -> str:
    """The planning API URL of the cluster at ``kafka.bootstrap.servers``."""
    assert opts.bootstrap_servers is not None
    cached = _DISCOVERED.get(opts.bootstrap_servers)
    if cached is not None:
        return cached
    errors = []
    for host, port in _servers(opts.bootstrap_servers):
        try:
            configs = _describe_broker(host, port, opts)
        except (OSError, ValueError) as e:
            errors.append(f"{host}:{port}: {e}")
            continue
        url = configs.get(PLANNING_KEY)
        if not url:
            raise OptionError(
                f"kafka.bootstrap.servers {host}:{port} is not a Floe cluster (its broker "
                f"configs have no {PLANNING_KEY}); format(\"floe\") reads Floe, "
                "format(\"kafka\") reads Apache Kafka"
            )
        _DISCOVERED[opts.bootstrap_servers] = url
        return url
    raise PlanningError("no bootstrap server reachable: " + "; ".join(errors))


def _runs(raw: Any) -> tuple[tuple[int, int, str], ...]:
    """The byte runs ``[[start, end, url], ...]`` of one object in a plan."""
    return tuple((int(lo), int(hi), str(url)) for lo, hi, url in raw or ())


def _tp_key(tp: TopicPartition) -> str:
    return f"{tp[0]}\x00{tp[1]}"


class AgentBackend:
    def __init__(self, opts: SourceOptions, url: str, session: aiohttp.ClientSession) -> None:
        self.opts = opts
        self.url = url.rstrip("/")
        self.session = session

    @classmethod
    async def open(cls, opts: SourceOptions) -> AgentBackend:
        url = discover(opts)
        timeout = aiohttp.ClientTimeout(total=opts.request_timeout_ms / 1000)
        creds = opts.credentials.basic_header() if opts.credentials is not None else {}
        session = aiohttp.ClientSession(
            # The planning API authenticates the job's Kafka user (agent/planning_auth.py)
            # and checks its ACLs; the driver holds no internal credential.
            timeout=timeout, headers={"X-Floe-Client": opts.client_label, **creds}
        )
        backend = cls(opts, url, session)
        try:
            info = await backend._call("GET", "")
        except BaseException:
            await session.close()
            raise
        if API_VERSION not in info.get("versions", [info.get("version")]):
            await session.close()
            raise PlanningError(
                f"the agents at {url} speak planning API versions {info.get('versions')}, "
                f"this Spark source needs {API_VERSION}"
            )
        backend.info = info
        return backend

    info: dict[str, Any]

    async def close(self) -> None:
        await self.session.close()

    async def _call(self, method: str, path: str, body: Any = None) -> Any:
        try:
            async with self.session.request(
                method,
                self.url + path,
                data=None if body is None else json.dumps(body),
                headers={"Content-Type": "application/json"},
            ) as r:
                payload = await r.json(content_type=None)
        except (aiohttp.ClientError, TimeoutError, ValueError) as e:
            raise PlanningError(f"planning API {self.url}{path}: {e}") from e
        if isinstance(payload, dict) and "error" in payload:
            err = payload["error"]
            msg = f"planning API {path or '/'}: {err.get('message')}"
            if err.get("type") == "TopicAuthorizationFailed":
                raise TopicAuthorizationError(f"Not authorized: {err.get('message')}")
            if err.get("type") == "SaslAuthenticationFailed":
                raise KafkaAuthError(f"Kafka authentication failed at {self.url}: {err.get('message')}")
            if err.get("type") == "DataLoss":
                raise DataLossError(msg)
            if err.get("type") == "BadRequest":
                raise OptionError(msg)
            raise PlanningError(msg)
        return payload

    async def partition_state(self, opts: SourceOptions) -> State:
        body: dict[str, Any] = {}
        if opts.subscribe:
            body["subscribe"] = list(opts.subscribe)
        elif opts.subscribe_pattern is not None:
            body["pattern"] = opts.subscribe_pattern
        else:
            body["assign"] = {t: list(ps) for t, ps in (opts.assign or {}).items()}
        if opts.isolation_level == "read_committed":
            body["read_committed"] = True
        got = await self._call("POST", "/partitions", body)
        return {
            (p["topic"], int(p["partition"])): PartitionState(
                uuid.UUID(p["topic_id"]),
                int(p["log_start"]),
                int(p.get("last_stable", p["high_watermark"])),
                tuple((int(a[0]), int(a[1]), int(a[2])) for a in p.get("aborted") or ()),
            )
            for p in got["partitions"]
        }

    async def offsets_for_times(
        self, queries: Mapping[TopicPartition, tuple[uuid.UUID, int]]
    ) -> dict[TopicPartition, int]:
        tps = list(queries)
        got = await self._call(
            "POST",
            "/offsets-for-times",
            {
                "queries": [
                    {"topic_id": str(queries[tp][0]), "partition": tp[1], "timestamp": queries[tp][1]}
                    for tp in tps
                ]
            },
        )
        return {tp: int(o) for tp, o in zip(tps, got["offsets"], strict=True)}

    def _presign(self) -> bool:
        access = self.opts.object_access
        if access == "auto":
            return str(self.info.get("objects", "")).startswith("s3://")
        return access == "presigned"

    async def read_plan(
        self,
        ranges: Mapping[TopicPartition, tuple[uuid.UUID, int, int]],
        *,
        fail_on_data_loss: bool,
        lease: LeaseSpec | None,
    ) -> ReadPlan:
        tps = list(ranges)
        body: dict[str, Any] = {
            "ranges": [
                {"topic_id": str(tid), "partition": tp[1], "start": s, "end": e}
                for tp, (tid, s, e) in ranges.items()
            ],
            "presign": self._presign(),
        }
        if lease is not None:
            body["lease"] = {"id": lease.lease_id, "ttl_ms": lease.ttl_ms, "owner": lease.owner}
        got = await self._call("POST", "/read-plan", body)
        objects_url = self.opts.objects or got["objects_url"]
        plan = ReadPlan(
            objects_url=objects_url,
            # Batches still in the journal tier: read from its buckets (unless presigned).
            journal_urls=self.opts.journal or tuple(str(u) for u in got.get("journal_urls") or ()),
            lease_expires_ms=got.get("lease_expires_ms"),
        )
        for tp, r in zip(tps, got["ranges"], strict=True):
            if r.get("lost"):
                lo, hi = r["lost"]
                data_loss(
                    f"{tp[0]}-{tp[1]}: offsets {lo}..{hi - 1} deleted while planning",
                    fail_on_data_loss,
                )
                plan.starts[tp] = int(r["first"])
            plan.batches[tp] = [BatchLocation(*b) for b in r["batches"]]
        plan.objects = {
            k: ObjectRef(int(v.get("size", -1)), v.get("url"), _runs(v.get("ranges")))
            for k, v in got["objects"].items()
        }
        if self._presign() and any(not v.presigned for v in plan.objects.values()):
            if self.opts.object_access == "presigned":
                raise PlanningError("the agents' object store cannot presign URLs")
        return plan

    async def renew_lease(
        self, lease: LeaseSpec, keys: list[str]
    ) -> tuple[list[str], dict[str, str]]:
        """Extend the lease; returns the keys already collected and, when objects are
        presigned, fresh URLs of the whole (Parquet) objects among them. Segment
        objects are only ever presigned by byte range: :meth:`renew_refs`."""
        missing, refs = await self.renew_refs(lease, keys, {})
        return missing, {k: r.url for k, r in refs.items() if r.url}

    async def renew_refs(
        self, lease: LeaseSpec, keys: list[str], refs: Mapping[str, ObjectRef]
    ) -> tuple[list[str], dict[str, ObjectRef]]:
        """Extend the lease on ``keys``; returns the keys already collected and ``refs``
        with fresh URLs (a task may start after its plan's URLs expired). The agent
        presigns again only the byte runs of ``refs`` (those of the plan) and only
        if the job's user may still READ them; anything else is refused."""
        presign = self._presign() and any(r.presigned for r in refs.values())
        got = await self._call(
            "PUT",
            f"/leases/{lease.lease_id}",
            {
                "keys": keys,
                "ttl_ms": lease.ttl_ms,
                "owner": lease.owner,
                "presign": presign,
                "ranges": {k: [[lo, hi] for lo, hi, _ in r.ranges] for k, r in refs.items() if r.ranges},
            },
        )
        urls = dict(got.get("urls") or {})
        runs = got.get("ranges") or {}
        fresh = {
            k: ObjectRef(r.size, urls.get(k, r.url), _runs(runs.get(k)) or r.ranges)
            for k, r in refs.items()
        }
        return [str(k) for k in got.get("missing", [])], fresh

    async def release_lease(self, lease_id: str) -> None:
        await self._call("DELETE", f"/leases/{lease_id}")
