"""SCRAM credentials managed like Kafka's: confluent-kafka's AdminClient
alter/describe_user_scram_credentials and `floe users`, then used to authenticate."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.fixtures.agent import RunningAgent
from tests.security.test_sasl_plain import ck_round_trip
from tests.security.test_tls_clients import _auth_error


@pytest.fixture
def scram_agent(agent_factory: Callable[..., RunningAgent]) -> RunningAgent:
    return agent_factory(
        listeners="PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0", failed_auth_delay_ms=10
    )


def scram_conf(agent: RunningAgent, user: str, pw: str, mech: str = "SCRAM-SHA-512") -> dict[str, str]:
    return {
        "bootstrap.servers": f"127.0.0.1:{agent.server.ports['SASL_PLAINTEXT']}",
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": mech,
        "sasl.username": user,
        "sasl.password": pw,
    }


def test_admin_client_creates_rotates_describes_deletes(scram_agent: RunningAgent) -> None:
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import (
        AdminClient,
        ScramCredentialInfo,
        ScramMechanism,
        UserScramCredentialDeletion,
        UserScramCredentialUpsertion,
    )

    admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{scram_agent.port}"})
    up = UserScramCredentialUpsertion("erin", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 8192), b"pw-1")
    for f in admin.alter_user_scram_credentials([up]).values():
        f.result(10)
    futs = admin.describe_user_scram_credentials(["erin"])
    got = futs["erin"].result(10)
    assert [(i.mechanism, i.iterations) for i in got.scram_credential_infos] == [(ScramMechanism.SCRAM_SHA_512, 8192)]
    assert len(ck_round_trip(scram_conf(scram_agent, "erin", "pw-1"), "scram-admin", n=3)) == 3
    # Rotate: the old password stops working, the new one works.
    up2 = UserScramCredentialUpsertion("erin", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096), b"pw-2")
    for f in admin.alter_user_scram_credentials([up2]).values():
        f.result(10)
    assert "SCRAM-SHA-512" in _auth_error(scram_conf(scram_agent, "erin", "pw-1"))
    assert len(ck_round_trip(scram_conf(scram_agent, "erin", "pw-2"), "scram-admin-2", n=2)) == 2
    # Errors as Kafka: unknown user described, too few iterations, missing deletion.
    with pytest.raises(KafkaException, match="does not exist"):
        admin.describe_user_scram_credentials(["nobody"])["nobody"].result(10)
    bad = UserScramCredentialUpsertion("frank", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 100), b"x")
    with pytest.raises(KafkaException, match="Too few iterations"):
        admin.alter_user_scram_credentials([bad])["frank"].result(10)
    gone = UserScramCredentialDeletion("erin", ScramMechanism.SCRAM_SHA_512)
    admin.alter_user_scram_credentials([gone])["erin"].result(10)
    with pytest.raises(KafkaException, match="does not exist"):
        admin.alter_user_scram_credentials([gone])["erin"].result(10)


def test_floe_users_cli(scram_agent: RunningAgent, tmp_path: Path) -> None:
    url = f"sqlite:///{scram_agent.data_dir / 'meta.db'}"
    floe = [sys.executable, "-m", "floe_cli.main", "users", "--metastore", url]
    out = subprocess.run([*floe, "add", "gina", "--password", "g-secret", "-m", "SCRAM-SHA-256"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    listed = subprocess.run([*floe, "list"], capture_output=True, text=True, timeout=60, check=True).stdout
    assert "gina\tSCRAM-SHA-256\titerations=8192" in listed and "g-secret" not in listed
    assert len(ck_round_trip(scram_conf(scram_agent, "gina", "g-secret", "SCRAM-SHA-256"), "cli-user", n=2)) == 2
    out = subprocess.run([*floe, "delete", "gina"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and "deleted gina: SCRAM-SHA-256" in out.stdout
    assert "SCRAM-SHA-256" in _auth_error(scram_conf(scram_agent, "gina", "g-secret", "SCRAM-SHA-256"))
