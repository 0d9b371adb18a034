"""A read plan lets a Spark principal fetch the bytes of its topics' batches and no others.

A segment object holds the batches of many topics. Here ``orders`` (alice may
READ it) and ``secrets`` (she may not) are produced together so they share
segment objects on S3 (moto). The plan alice gets must carry no URL for a
whole segment object: only ranged GETs whose signature covers the ``Range``
header, for runs of ``orders`` batches. moto does not check presigned
signatures, so the enforcing path is :class:`~tests.spark_source.sigv4_gate.SigV4Gate`,
which verifies each GET as S3 does (it accepts the exact granted range, and
refuses no range, the whole object, and a ``secrets`` batch's range with the
same URL). Lease renewal presigns again only ranges within batches alice may
READ. And the executors, reading through the gate, still return every row.
"""

from __future__ import annotations

import base64
import json
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable
from typing import Any

import pytest

from agent.planning import PREFIX
from agent.security.acl import AclOperation, ResourceType
from agent.security.sasl.scram import make_credential
from compactor.config import CompactorConfig
from compactor.runner import Compactor
from objectstore.byte_grants import covered
from spark_source import reader as reader_mod
from spark_source.agents import AgentBackend
from spark_source.driver import plan_sync
from spark_source.options import parse_options
from spark_source.plan import ObjectRef
from spark_source.source import FloeBatchReader
from tests.fixtures.agent import RunningAgent
from tests.spark_source.sigv4_gate import SigV4Gate
from tests.spark_source.test_acl_read import _allow, _bootstrap, _options
from tests.spark_source.test_unit import read_all

pytestmark = pytest.mark.s3

ROUNDS = 6


@pytest.fixture
def shared_agent(agent_factory: Callable[..., RunningAgent], s3_url: str) -> RunningAgent:
    agent = agent_factory(
        objects=s3_url,
        listeners="SASL_PLAINTEXT://127.0.0.1:0",
        sasl_users="admin:admin-secret",
        authorizer="acl",
        super_users="User:admin",
        auto_create_topics=False,
        flush_interval_ms=100,  # both topics' batches land in the same segment objects
        failed_auth_delay_ms=1,
    )

    async def setup() -> None:
        meta = agent.broker.meta
        await meta.put_scram_credential(make_credential("alice", "SCRAM-SHA-512", "alice-pw", iterations=4096))
        await meta.create_acls(
            [
                _allow("User:alice", AclOperation.DESCRIBE_CONFIGS, ResourceType.CLUSTER, "kafka-cluster"),
                _allow("User:alice", AclOperation.READ, ResourceType.TOPIC, "orders"),
            ]
        )
        await agent.broker.authorizer.reload()

    agent.call(setup())
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    conf: dict[str, str | int | float | bool] = {
        "bootstrap.servers": _bootstrap(agent),
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "PLAIN",
        "sasl.username": "admin",
        "sasl.password": "admin-secret",
    }
    admin = AdminClient(conf)
    for f in admin.create_topics([NewTopic("orders", 2), NewTopic("secrets", 1)]).values():
        f.result(timeout=20)
    p = Producer({**conf, "linger.ms": 20})
    for r in range(ROUNDS):
        for i in range(10):
            n = r * 10 + i
            p.produce("orders", b"order-%d" % n, key=b"k%d" % n, partition=n % 2)
            p.produce("secrets", b"SECRET-%d" % n)
        assert p.flush(30) == 0
    return agent


def _api(agent: RunningAgent, method: str, path: str, body: Any, user: str = "alice") -> tuple[int, Any]:
    auth = base64.b64encode(f"{user}:{user}-pw".encode()).decode()
    req = urllib.request.Request(
        f"http://127.0.0.1:{agent.server.admin_port}{PREFIX}{path}",
        data=json.dumps(body).encode(),
        method=method,
        headers={"Authorization": f"Basic {auth}", "Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def _get(url: str, rng: str | None) -> tuple[int, bytes]:
    req = urllib.request.Request(url, headers={"Range": rng} if rng else {})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def _tenants(agent: RunningAgent, key: str) -> dict[str, list[tuple[int, int]]]:
    """Topic name -> byte spans of its batches in object ``key`` (from the metastore)."""

    async def go() -> dict[str, list[tuple[int, int]]]:
        meta = agent.broker.meta
        info = await meta.get_object(key)
        out: dict[str, list[tuple[int, int]]] = {}
        for b in await meta.batches_in_objects([info.id]):
            topic = await meta.get_topic(b.topic_id)
            out.setdefault(topic.name, []).append((b.byte_pos, b.byte_pos + b.byte_len))
        return out

    result: dict[str, list[tuple[int, int]]] = agent.call(go())
    return result


def _plan(agent: RunningAgent) -> tuple[str, dict[str, Any]]:
    status, got = _api(agent, "POST", "/partitions", {"subscribe": ["orders"]})
    assert status == 200, got
    lease = f"spark-test-{uuid.uuid4().hex}"
    ranges = [
        {"topic_id": p["topic_id"], "partition": p["partition"], "start": p["log_start"], "end": p["high_watermark"]}
        for p in got["partitions"]
    ]
    status, plan = _api(
        agent, "POST", "/read-plan", {"ranges": ranges, "presign": True, "lease": {"id": lease, "ttl_ms": 600_000}}
    )
    assert status == 200, plan
    return lease, plan


def test_plan_grants_only_the_topics_batches(shared_agent: RunningAgent, moto_server: str) -> None:
    agent = shared_agent
    _, plan = _plan(agent)
    shared = []
    for key, obj in plan["objects"].items():
        assert obj["url"] is None, "a segment object is never presigned whole"
        tenants = _tenants(agent, key)
        mine = tenants["orders"]
        for lo, hi, url in obj["ranges"]:
            assert covered(lo, hi, mine), f"{key} [{lo},{hi}) reaches past orders' batches"
            assert "X-Amz-SignedHeaders=host%3Brange" in url  # SigV4, Range signed
        if "secrets" in tenants:
            shared.append((key, obj, tenants))
    assert shared, "test premise: orders and secrets share a segment object"

    key, obj, tenants = shared[0]
    lo, hi, url = obj["ranges"][0]
    secret_lo, secret_hi = tenants["secrets"][0]
    expected = agent.call(agent.broker.store.get(key, lo, hi))
    with SigV4Gate(moto_server, {"testing": "testing"}) as gate:
        via = gate.route(url)
        status, data = _get(via, f"bytes={lo}-{hi - 1}")
        assert status == 206 and data == expected and b"SECRET" not in data
        # The same URL for the whole object, without a Range, or for secrets' bytes: refused.
        for rng in (None, f"bytes=0-{obj['size'] - 1}", f"bytes={secret_lo}-{secret_hi - 1}", f"bytes={lo}-{hi}"):
            status, data = _get(via, rng)
            assert status == 403 and b"SignatureDoesNotMatch" in data, rng
        assert len(gate.refused) == 4
    # (moto alone serves any range of the URL: it does not check presigned signatures.)
    assert _get(url, None)[0] == 200


def test_lease_renewal_presigns_only_readable_ranges(shared_agent: RunningAgent) -> None:
    agent = shared_agent
    lease, plan = _plan(agent)
    key, obj = next((k, o) for k, o in plan["objects"].items() if "secrets" in _tenants(agent, k))
    secret_lo, secret_hi = _tenants(agent, key)["secrets"][0]
    base = {"keys": [key], "ttl_ms": 600_000, "presign": True}
    for bad in ([[secret_lo, secret_hi]], [[0, obj["size"]]], [[obj["ranges"][0][0], obj["size"]]]):
        status, got = _api(agent, "PUT", f"/leases/{lease}", {**base, "ranges": {key: bad}})
        assert status == 403 and got["error"]["type"] == "TopicAuthorizationFailed", got
        assert "secrets" not in got["error"]["message"]  # the other tenant stays unnamed
    # A segment key named without ranges: the lease is renewed, no URL is issued.
    status, got = _api(agent, "PUT", f"/leases/{lease}", base)
    assert status == 200 and got["urls"] == {} and got["ranges"] == {}
    # The plan's own runs: fresh URLs for exactly those bytes.
    runs = [[lo, hi] for lo, hi, _ in obj["ranges"]]
    status, got = _api(agent, "PUT", f"/leases/{lease}", {**base, "ranges": {key: runs}})
    assert status == 200 and [r[:2] for r in got["ranges"][key]] == runs
    # Another principal may renew nothing it cannot read (bob has no READ at all).
    agent.call(
        agent.broker.meta.put_scram_credential(make_credential("bob", "SCRAM-SHA-512", "bob-pw", iterations=4096))
    )
    status, got = _api(agent, "PUT", f"/leases/{lease}", {**base, "ranges": {key: runs}}, user="bob")
    assert status == 403


def test_renewal_after_compaction_moved_the_batches(shared_agent: RunningAgent) -> None:
    """The compactor moved the batch rows to new objects; the planned ones live on
    under the lease, and their runs are still granted (from the segment's footer)."""
    agent = shared_agent
    lease, plan = _plan(agent)
    cfg = CompactorConfig(l0_trigger=1, delete_grace_ms=0, orphan_grace_ms=0)
    summary = agent.call(Compactor(agent.broker.meta, agent.broker.store, cfg).run_pass(force=True), timeout=120)
    assert summary.phases["merge L0->L1"].committed > 0
    key, obj = next(iter(plan["objects"].items()))
    assert "orders" not in _tenants(agent, key)  # its rows point elsewhere now
    runs = [[lo, hi] for lo, hi, _ in obj["ranges"]]
    body = {"keys": [key], "ttl_ms": 600_000, "presign": True, "ranges": {key: runs}}
    status, got = _api(agent, "PUT", f"/leases/{lease}", body)
    assert status == 200 and got["missing"] == [] and [r[:2] for r in got["ranges"][key]] == runs


def test_executors_read_the_same_rows_through_the_gate(
    shared_agent: RunningAgent, moto_server: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    opts = parse_options(_options(shared_agent, "alice"), streaming=False)
    r = FloeBatchReader(opts)
    parts = r.partitions()
    refs = {k: ref for p in parts for k, ref in p.refs.items()}
    assert refs and all(ref.ranges and not ref.url for ref in refs.values())
    # The executor-side renewal asks for exactly the plan's runs and gets them again.
    lease = next(p.lease for p in parts if p.lease is not None).lease

    async def renew(b: Any) -> tuple[list[str], dict[str, ObjectRef]]:
        assert isinstance(b, AgentBackend)
        return await b.renew_refs(lease, sorted(refs), refs)

    missing, fresh = plan_sync(opts, renew)
    assert not missing and {k: [x[:2] for x in v.ranges] for k, v in fresh.items()} == {
        k: [x[:2] for x in v.ranges] for k, v in refs.items()
    }

    def no_client(self: Any) -> Any:
        raise AssertionError("executors must read through the presigned URLs")

    monkeypatch.setattr(reader_mod.Storage, "_s3", no_client)
    with SigV4Gate(moto_server, {"testing": "testing"}) as gate:
        for p in parts:
            for k, ref in p.refs.items():
                p.refs[k] = ObjectRef(ref.size, None, tuple((lo, hi, gate.route(u)) for lo, hi, u in ref.ranges))
        got, _ = read_all(r, parts)
        assert gate.refused == []
    assert sorted(x[4] or b"" for x in got) == sorted(b"order-%d" % n for n in range(ROUNDS * 10))


@pytest.mark.slow
def test_spark_reads_through_ranged_urls(spark: Any, shared_agent: RunningAgent) -> None:
    """Real Spark executors, no AWS credentials needed: the ranged URLs of the plan
    (moto serves them without checking signatures; the gate tests above check those)."""
    r = spark.read.format("floe")
    for k, v in _options(shared_agent, "alice").items():
        r = r.option(k, v)
    rows = r.load().collect()
    assert sorted(bytes(x["value"]) for x in rows) == sorted(b"order-%d" % n for n in range(ROUNDS * 10))


def test_reader_reads_runs_whole_and_never_outside_them(monkeypatch: pytest.MonkeyPatch) -> None:
    """Executor side, no server: a span is assembled from whole granted runs (each GET
    asks for exactly its run's bytes, once), and a batch no run covers is an error
    before any request."""
    from spark_source.plan import ReadTask, SegmentSpan
    from spark_source.reader import Storage, read_task

    asked: list[tuple[str, int, int]] = []

    def fake_http(url: str, pos: int, length: int, timeout_s: float) -> bytes:
        asked.append((url, pos, length))
        return bytes(range(256))[pos % 256 :][:length].ljust(length, b"\0")

    monkeypatch.setattr(reader_mod, "_http_range", fake_http)
    storage = Storage("presigned://")
    runs = ((100, 140, "u1"), (160, 200, "u2"))
    ref = ObjectRef(1000, None, runs)
    data = storage.read_range("k", 120, 60, ref)  # spans both runs and the hole between
    assert asked == [("u1", 100, 40), ("u2", 160, 40)]
    assert data[:20] == bytes(range(120, 140)) and data[20:40] == bytes(20) and data[40:] == bytes(range(160, 180))
    storage.read_range("k", 170, 20, ref)
    assert len(asked) == 2  # the last run is kept for the next span
    task = ReadTask("t", 0, 0, 10, (SegmentSpan("k", 100, 100, ((0, 40, 0), (40, 20, 5))),))
    with pytest.raises(OSError, match="grants no read of the batch at offset 5"):
        list(read_task(task, storage, refs={"k": ref}))
    assert len(asked) == 2
