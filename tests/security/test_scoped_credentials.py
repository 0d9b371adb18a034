"""Scoped internal credentials (issue 42): each secret opens only its own door.

* ``floe metastore serve``: the metastore credential calls what agents call
  (``get_scram_credential`` included: agents verify SCRAM logins), but not the
  admin methods (ACL / SCRAM changes, SCRAM listings: 403); the admin
  credential calls everything; the peers' credential nothing (401).
* The agent's admin port: the peer credential opens ``/blocks`` and ``/kafka``,
  the metastore credential does not.
* The planning API takes no internal credential at all: it authenticates a
  Kafka user (HTTP Basic against PLAIN and SCRAM credentials) and refuses a
  topic the user may not READ with 403 naming it.
* A relayed group request is authorized on the owner with the principal it
  carries: the peer credential alone does not pass the ACLs.
"""

from __future__ import annotations

import base64
import json
import struct
import urllib.error
import urllib.request
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from agent.security.acl import AclOperation, AclPermission, PatternType, ResourceType
from agent.security.sasl.scram import make_credential
from kafka_protocol.framing import RequestHeader, encode_request
from kafka_protocol.messages import HeartbeatRequest, HeartbeatResponse
from metastore import Metastore, MetastoreError, open_metastore
from metastore.remote import RemoteMetastore
from metastore.service import serve
from metastore.types import AclBinding
from tests.fixtures.agent import RunningAgent

PEER = "peer-secret-0123456789abcdef"
META = "metastore-secret-0123456789abcdef"
ADMIN = "metastore-admin-secret-0123456789"
GROUP_AUTHORIZATION_FAILED = 30


# -- floe metastore serve ------------------------------------------------------------------


@pytest.fixture
async def service(tmp_path: Path) -> AsyncIterator[tuple[Metastore, str]]:
    inner = await open_metastore(f"sqlite:///{tmp_path / 'meta.db'}")
    runner, port, svc = await serve(inner, "127.0.0.1", 0, token=META, admin_token=ADMIN)
    try:
        yield inner, f"http://127.0.0.1:{port}"
    finally:
        await svc.close()
        await runner.cleanup()
        await inner.close()


def _acl(principal: str, op: AclOperation, rtype: ResourceType, name: str) -> AclBinding:
    return AclBinding(
        int(rtype), name, int(PatternType.LITERAL), principal, "*", int(op), int(AclPermission.ALLOW)
    )


async def test_metastore_credential_cannot_call_admin_methods(service: tuple[Metastore, str]) -> None:
    inner, url = service
    await inner.put_scram_credential(make_credential("alice", "SCRAM-SHA-256", "pw", iterations=4096))
    async with RemoteMetastore(url, token=META, admin_token="") as agent:
        # What agents call works, SCRAM verification included.
        assert await agent.list_topics() == []
        assert (await agent.get_scram_credential("alice", "SCRAM-SHA-256")) is not None
        # Secrets and security changes do not.
        for call in (
            agent.list_scram_credentials(),
            agent.create_acls([_acl("User:mallory", AclOperation.ALL, ResourceType.CLUSTER, "kafka-cluster")]),
            agent.put_scram_credential(make_credential("mallory", "SCRAM-SHA-256", "x", iterations=4096)),
            agent.delete_scram_credential("alice", "SCRAM-SHA-256"),
        ):
            with pytest.raises(MetastoreError, match="FLOE_METASTORE_ADMIN_TOKEN"):
                await call
    assert (await inner.list_acls())[1] == []
    assert [c.user for c in await inner.list_scram_credentials()] == ["alice"]
    async with RemoteMetastore(url, token=META, admin_token=ADMIN) as admin:
        assert await admin.create_acls([_acl("User:bob", AclOperation.READ, ResourceType.TOPIC, "t")]) == 1
        assert [c.user for c in await admin.list_scram_credentials()] == ["alice"]
    # The peers' credential is not the service's: 401 on every method.
    async with RemoteMetastore(url, token=PEER, admin_token="") as peer:
        with pytest.raises(MetastoreError, match="unauthorized"):
            await peer.list_topics()


async def test_clients_take_their_credentials_from_the_environment(
    service: tuple[Metastore, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """What `floe users` / `floe acls` and the compactor do: open_metastore(url) with env tokens."""
    _, url = service
    monkeypatch.delenv("FLOE_INTERNAL_TOKEN", raising=False)
    monkeypatch.setenv("FLOE_METASTORE_TOKEN", META)
    monkeypatch.delenv("FLOE_METASTORE_ADMIN_TOKEN", raising=False)
    async with await open_metastore(url) as compactor:
        assert await compactor.list_topics() == []
        with pytest.raises(MetastoreError, match="admin credential"):
            await compactor.list_scram_credentials()
    monkeypatch.setenv("FLOE_METASTORE_ADMIN_TOKEN", ADMIN)
    async with await open_metastore(url) as cli:
        assert await cli.list_scram_credentials() == []
    # The legacy single token is the metastore credential, never the admin one.
    monkeypatch.delenv("FLOE_METASTORE_TOKEN")
    monkeypatch.delenv("FLOE_METASTORE_ADMIN_TOKEN")
    monkeypatch.setenv("FLOE_INTERNAL_TOKEN", META)
    async with await open_metastore(url) as legacy:
        assert await legacy.list_topics() == []
        with pytest.raises(MetastoreError, match="admin credential"):
            await legacy.create_acls([_acl("User:x", AclOperation.ALL, ResourceType.CLUSTER, "kafka-cluster")])


def test_legacy_token_is_peer_and_metastore_credential() -> None:
    from metastore.internal_auth import metastore_token, peer_token

    assert peer_token("", "legacy") == "legacy" and metastore_token("", "legacy") == "legacy"
    assert peer_token("p", "legacy") == "p" and metastore_token("m", "legacy") == "m"


# -- the agent's admin port --------------------------------------------------------------------


def _http(
    url: str, *, method: str = "GET", data: bytes | None = None, auth: str | None = None
) -> tuple[int, Any]:
    req = urllib.request.Request(url, method=method, data=data)
    if auth is not None:
        req.add_header("Authorization", auth)
    try:
        with urllib.request.urlopen(req, timeout=15) as r:
            return int(r.status), r.read()
    except urllib.error.HTTPError as e:
        return int(e.code), e.read()


def _basic(user: str, pw: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{pw}".encode()).decode()


@pytest.fixture
def acl_agent(agent_factory: Callable[..., RunningAgent]) -> RunningAgent:
    agent = agent_factory(
        listeners="SASL_PLAINTEXT://127.0.0.1:0",
        sasl_users="admin:admin-secret",
        authorizer="acl",
        super_users="User:admin",
        peer_token=PEER,
        metastore_token=META,
        failed_auth_delay_ms=1,
    )

    async def setup() -> None:
        meta = agent.broker.meta
        for user in ("alice", "bob"):
            await meta.put_scram_credential(make_credential(user, "SCRAM-SHA-512", f"{user}-pw", iterations=4096))
        await meta.create_topic("orders", 2, {})
        await meta.create_topic("secret", 1, {})
        await meta.create_acls(
            [
                _acl("User:alice", AclOperation.READ, ResourceType.TOPIC, "orders"),
                _acl("User:bob", AclOperation.READ, ResourceType.TOPIC, "secret"),
                _acl("User:bob", AclOperation.READ, ResourceType.GROUP, "bobs"),
            ]
        )
        await agent.broker.authorizer.reload()

    agent.call(setup())
    return agent


def test_admin_port_routes_take_the_peer_credential_only(acl_agent: RunningAgent) -> None:
    base = f"http://127.0.0.1:{acl_agent.server.admin_port}"
    assert _http(f"{base}/blocks", auth=f"Bearer {PEER}")[0] == 400  # the handler ran
    assert _http(f"{base}/blocks", auth=f"Bearer {META}")[0] == 401
    assert _http(f"{base}/kafka", method="POST", data=b"", auth=f"Bearer {META}")[0] == 401
    # ... and the planning API takes neither internal credential.
    assert _http(f"{base}/floe/plan/v1", auth=f"Bearer {PEER}")[0] == 401
    assert _http(f"{base}/floe/plan/v1", auth=f"Bearer {META}")[0] == 401


def test_planning_api_authenticates_kafka_users(acl_agent: RunningAgent) -> None:
    base = f"http://127.0.0.1:{acl_agent.server.admin_port}/floe/plan/v1"
    status, body = _http(base)
    assert status == 401 and b"authentication required" in body
    assert _http(base, auth=_basic("alice", "wrong"))[0] == 401
    assert _http(base, auth=_basic("nobody", "alice-pw"))[0] == 401
    assert _http(base, auth=_basic("alice", "alice-pw"))[0] == 200  # SCRAM credential
    assert _http(base, auth=_basic("admin", "admin-secret"))[0] == 200  # PLAIN user
    assert _http(base, auth="Basic !!!")[0] == 401


def _plan(agent: RunningAgent, route: str, body: dict[str, Any], user: str) -> tuple[int, Any]:
    url = f"http://127.0.0.1:{agent.server.admin_port}/floe/plan/v1/{route}"
    status, raw = _http(url, method="POST", data=json.dumps(body).encode(), auth=_basic(user, f"{user}-pw"))
    return status, json.loads(raw)


def test_planning_api_checks_read_acls(acl_agent: RunningAgent) -> None:
    status, got = _plan(acl_agent, "partitions", {"subscribe": ["orders"]}, "alice")
    assert status == 200 and {p["partition"] for p in got["partitions"]} == {0, 1}
    status, got = _plan(acl_agent, "partitions", {"subscribe": ["secret"]}, "alice")
    assert status == 403 and got["error"]["type"] == "TopicAuthorizationFailed"
    assert "secret" in got["error"]["message"] and "READ" in got["error"]["message"]
    # A topic that does not exist is refused the same way: existence does not leak.
    status, got = _plan(acl_agent, "partitions", {"assign": {"missing": [0]}}, "alice")
    assert status == 403 and "missing" in got["error"]["message"]
    # A pattern sees only what the user may describe.
    status, got = _plan(acl_agent, "partitions", {"pattern": ".*"}, "alice")
    assert status == 200 and {p["topic"] for p in got["partitions"]} == {"orders"}
    # Plans by topic id are checked too (the id of a topic alice may not read).
    _, bobs = _plan(acl_agent, "partitions", {"subscribe": ["secret"]}, "bob")
    secret_id = bobs["partitions"][0]["topic_id"]
    ranges = {"ranges": [{"topic_id": secret_id, "partition": 0, "start": 0, "end": 0}]}
    status, got = _plan(acl_agent, "read-plan", ranges, "alice")
    assert status == 403 and "secret" in got["error"]["message"]
    assert _plan(acl_agent, "read-plan", ranges, "bob")[0] == 200
    queries = {"queries": [{"topic_id": secret_id, "partition": 0, "timestamp": 0}]}
    assert _plan(acl_agent, "offsets-for-times", queries, "alice")[0] == 403


# -- relayed group requests ------------------------------------------------------------------


def _relay_heartbeat(agent: RunningAgent, group: str, principal: str | None) -> tuple[int, int | None]:
    frame = encode_request(
        RequestHeader(12, 0, 7, "relay-test"), HeartbeatRequest(group_id=group, generation_id=1, member_id="m")
    )[4:]  # the relay sends the frame without its size prefix
    req = urllib.request.Request(
        f"http://127.0.0.1:{agent.server.admin_port}/kafka", method="POST", data=frame
    )
    req.add_header("Authorization", f"Bearer {PEER}")
    if principal is not None:
        req.add_header("X-Floe-Principal", principal)
    try:
        with urllib.request.urlopen(req, timeout=15) as r:
            data = r.read()
    except urllib.error.HTTPError as e:
        return int(e.code), None
    (corr,) = struct.unpack_from(">i", data, 4)
    assert corr == 7
    return 200, HeartbeatResponse.decode(memoryview(data)[8:], 0).error_code


def test_relayed_requests_are_authorized_with_the_carried_principal(acl_agent: RunningAgent) -> None:
    # The peer credential alone (no principal: anonymous) does not pass the group's ACL.
    assert _relay_heartbeat(acl_agent, "bobs", None) == (200, GROUP_AUTHORIZATION_FAILED)
    assert _relay_heartbeat(acl_agent, "bobs", "User:alice") == (200, GROUP_AUTHORIZATION_FAILED)
    status, code = _relay_heartbeat(acl_agent, "bobs", "User:bob")
    assert status == 200 and code != GROUP_AUTHORIZATION_FAILED
    assert _relay_heartbeat(acl_agent, "bobs", "not a principal")[0] == 400


async def test_planning_logins_are_remembered_for_a_minute_only(tmp_path: Path) -> None:
    """A SCRAM password change takes effect on the planning API within CACHE_S (clock injected)."""
    from aiohttp.test_utils import make_mocked_request

    from agent.config import AgentConfig
    from agent.planning_auth import CACHE_S, PlanningAuth, PlanningAuthError

    now = [1000.0]
    config = AgentConfig(
        listeners="SASL_PLAINTEXT://127.0.0.1:0", objects="memory://", failed_auth_delay_ms=0
    )
    async with await open_metastore(f"sqlite:///{tmp_path / 'm.db'}") as meta:
        await meta.put_scram_credential(make_credential("carol", "SCRAM-SHA-256", "old", iterations=4096))
        auth = PlanningAuth(config, meta, now=lambda: now[0])

        def req(pw: str) -> Any:
            return make_mocked_request("GET", "/floe/plan/v1", headers={"Authorization": _basic("carol", pw)})

        assert await auth.principal(req("old")) == "User:carol"
        await meta.put_scram_credential(make_credential("carol", "SCRAM-SHA-256", "new", iterations=4096))
        assert await auth.principal(req("old")) == "User:carol"  # remembered
        now[0] += CACHE_S + 1
        with pytest.raises(PlanningAuthError, match="Invalid username or password"):
            await auth.principal(req("old"))
        assert await auth.principal(req("new")) == "User:carol"
        with pytest.raises(PlanningAuthError, match="authentication required"):
            await auth.principal(make_mocked_request("GET", "/floe/plan/v1"))
