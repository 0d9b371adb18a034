"""Fixtures of the security tests: a throwaway PKI (tests.fixtures.pki) and an agent
with SSL + SASL_SSL + SASL_PLAINTEXT listeners, PLAIN users and SCRAM credentials."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.agent import RunningAgent
from tests.fixtures.pki import Issued, TestCA

PLAIN_USERS = "alice:alice-secret,bob:bob-secret"
SCRAM_USERS = {"carol": "carol-secret", "dave": "dave-secret"}


@dataclass
class Pki:
    ca: TestCA
    server: Issued
    client: Issued  # CN=alice


@pytest.fixture
def pki(tmp_path: Path) -> Pki:
    ca = TestCA(tmp_path / "pki")
    return Pki(
        ca,
        ca.issue("localhost", dns=("localhost",), ips=("127.0.0.1",)),
        ca.issue("alice", client=True),
    )


def add_scram_users(agent: RunningAgent, users: dict[str, str]) -> None:
    from agent.security.sasl.scram import HASHES, make_credential

    async def put() -> None:
        for user, pw in users.items():
            for mech in HASHES:
                await agent.broker.meta.put_scram_credential(
                    make_credential(user, mech, pw, iterations=4096)
                )

    agent.call(put())


@pytest.fixture
def secure_agent(agent_factory: Callable[..., RunningAgent], pki: Pki) -> RunningAgent:
    agent = agent_factory(
        listeners="SSL://127.0.0.1:0,SASL_SSL://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
        ssl_certfile=str(pki.server.cert),
        ssl_keyfile=str(pki.server.key),
        ssl_cafile=str(pki.ca.cert),
        ssl_client_auth="requested",
        sasl_users=PLAIN_USERS,
        failed_auth_delay_ms=10,
    )
    add_scram_users(agent, SCRAM_USERS)
    return agent


def bootstrap(agent: RunningAgent, listener: str) -> str:
    return f"127.0.0.1:{agent.server.ports[listener]}"


def ck_tls(agent: RunningAgent, pki: Pki, listener: str, **extra: Any) -> dict[str, Any]:
    return {
        "bootstrap.servers": bootstrap(agent, listener),
        "security.protocol": listener,
        "ssl.ca.location": str(pki.ca.cert),
        **extra,
    }
