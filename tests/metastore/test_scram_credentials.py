"""Contract: SCRAM credentials and agent listener endpoints (issue 15), on SQLite and Postgres."""

from __future__ import annotations

from metastore import Metastore
from metastore.types import ScramCredential
from tests.metastore.helpers import FakeClock


def cred(user: str, mech: str, tag: bytes, iterations: int = 4096) -> ScramCredential:
    return ScramCredential(user, mech, b"salt" + tag, b"stored" + tag, b"server" + tag, iterations)


async def test_scram_credentials_put_get_rotate_delete(ms: Metastore) -> None:
    assert await ms.get_scram_credential("alice", "SCRAM-SHA-512") is None
    await ms.put_scram_credential(cred("alice", "SCRAM-SHA-512", b"1"))
    await ms.put_scram_credential(cred("alice", "SCRAM-SHA-256", b"2"))
    await ms.put_scram_credential(cred("bob", "SCRAM-SHA-512", b"3", 8192))
    assert await ms.get_scram_credential("alice", "SCRAM-SHA-512") == cred("alice", "SCRAM-SHA-512", b"1")
    # Rotation replaces the credential of that mechanism only.
    await ms.put_scram_credential(cred("alice", "SCRAM-SHA-512", b"9", 10000))
    assert await ms.get_scram_credential("alice", "SCRAM-SHA-512") == cred("alice", "SCRAM-SHA-512", b"9", 10000)
    assert await ms.get_scram_credential("alice", "SCRAM-SHA-256") == cred("alice", "SCRAM-SHA-256", b"2")
    listed = await ms.list_scram_credentials()
    assert [(c.user, c.mechanism, c.iterations) for c in listed] == [
        ("alice", "SCRAM-SHA-256", 4096),
        ("alice", "SCRAM-SHA-512", 10000),
        ("bob", "SCRAM-SHA-512", 8192),
    ]
    assert [c.user for c in await ms.list_scram_credentials(["bob", "carol"])] == ["bob"]
    assert await ms.delete_scram_credential("alice", "SCRAM-SHA-512")
    assert not await ms.delete_scram_credential("alice", "SCRAM-SHA-512")
    assert await ms.get_scram_credential("alice", "SCRAM-SHA-512") is None
    assert [c.mechanism for c in await ms.list_scram_credentials(["alice"])] == ["SCRAM-SHA-256"]


async def test_agents_register_every_listener_endpoint(ms: Metastore, clock: FakeClock) -> None:
    eps = "PLAINTEXT://10.0.0.1:9092,SASL_SSL://broker1.example:9094"
    await ms.register_agent("a1", "10.0.0.1", 9092, "z", endpoints=eps)
    await ms.register_agent("a2", "10.0.0.2", 9092, "z")
    live = await ms.live_agents(since_ms=0)
    assert [(a.id, a.endpoints) for a in live] == [("a1", eps), ("a2", None)]
