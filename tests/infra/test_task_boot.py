"""The module's secure task definition boots a real agent as ECS would run it.

``modules/floe/tests/boot.tftest.hcl`` applies the module (mock AWS provider)
with TLS + SASL on, the ACL authorizer left to its default and ``User:admin`` as
super user. From that run's state (``terraform test -json -verbose``) this test
takes the agent's task definition as Terraform rendered it and runs it with
tests/infra/task_boot.py: read-only root filesystem, the task's volume as an
empty root-owned directory, the init container first, the agent as its
container's user, with exactly the task definition's environment plus:

* the secrets it names, with the test's values: the DSN rendered from the
  module's own template for a TLS Postgres (``sslmode=verify-full``), the
  internal token, the SASL users, a TLS certificate for ``localhost``;
* the listener bound on 127.0.0.1 at free ports (an NLB's address in AWS), and
  the test's S3 bucket and ``&endpoint=`` on FLOE_OBJECTS; AWS credentials stand
  in for the task role.

Then, over SASL_SSL: the PLAIN super user from Secrets Manager creates a topic
and a SCRAM user; that user's produce is refused (TOPIC_AUTHORIZATION_FAILED)
until the admin grants WRITE; the admin's produce succeeds. The same harness on
the task definition before the TLS volume existed fails at boot with
``OSError: [Errno 30] Read-only file system: '/var/lib/floe/tls'`` (checked by
hand against the previous module; infra/terraform/README.md, "The boot test").
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from tests.fixtures.agent_process import healthz_at
from tests.fixtures.pki import TestCA
from tests.fixtures.postgres import TlsPostgres
from tests.fixtures.s3 import REGION, free_port
from tests.infra.task_boot import Task, can_unshare, image_layout, rendered_task, start_task
from tests.infra.tf import REPO_ROOT, TfDir, render, variable_defaults

pytestmark = [
    pytest.mark.infra,
    pytest.mark.postgres,
    pytest.mark.s3,
    pytest.mark.interop,
    pytest.mark.timeout(300),
]

TEST_FILE = "tests/boot.tftest.hcl"
ZONE = "us-east-1a"
TASK = f'aws_ecs_task_definition.agent["{ZONE}"]'
ADMIN, ADMIN_PW = "admin", "admin-secret-0123"
ALICE, ALICE_PW = "alice", "alice-secret-0123"
TOKEN = "test-internal-token-0123456789abcdef"
# What the test replaces: where the listener binds and what it advertises.
OVERRIDES = (
    "FLOE_LISTENERS", "FLOE_ADVERTISED_LISTENERS", "FLOE_PORT", "FLOE_ADMIN_PORT",
    "FLOE_ADVERTISED_HOST", "FLOE_ADVERTISED_PORT",
)  # fmt: skip


def secret_values(module: TfDir, task: Task, pg: TlsPostgres, tls_dir: Path) -> dict[str, str]:
    """Each secret the task definition injects, with the value the test gives it."""
    variables = variable_defaults(module)
    db = pg.create_database()
    variables.update({
        "db_username": "postgres", "db_password": "", "db_name": db,
        "db_ca_bundle_path": str(pg.ca.cert),  # the image's RDS bundle: the test Postgres' CA
    })  # fmt: skip
    dsn_template = module.resources()["aws_secretsmanager_secret_version.metastore_dsn"][
        "secret_string_wo"
    ]
    ca = TestCA(tls_dir)
    issued = ca.issue("localhost", dns=("localhost",), ips=("127.0.0.1",))
    by_secret = {
        "aws_secretsmanager_secret.metastore_dsn": render(
            dsn_template, variables, {"db_address": "localhost", "db_port": pg.port}
        ),
        "aws_secretsmanager_secret.internal_token[0]": TOKEN,
        "aws_secretsmanager_secret.sasl_users[0]": f'{{"{ADMIN}": "{ADMIN_PW}"}}',
        'aws_secretsmanager_secret.tls["certificate"]': issued.cert.read_text(),
        'aws_secretsmanager_secret.tls["private-key"]': issued.key.read_text(),
    }
    sources = task.secret_sources()
    unknown = {name: src for name, src in sources.items() if src not in by_secret}
    assert not unknown, f"secrets the test cannot fill in (teach it): {unknown}"
    return {name: by_secret[src] for name, src in sources.items()}


def client_conf(port: int, ca: Path, user: str, password: str, mech: str) -> dict[str, Any]:
    return {
        "bootstrap.servers": f"localhost:{port}",
        "security.protocol": "SASL_SSL",
        "ssl.ca.location": str(ca),
        "sasl.mechanism": mech,
        "sasl.username": user,
        "sasl.password": password,
    }


def produce_error(conf: dict[str, Any], topic: str) -> Any:
    from confluent_kafka import Producer

    got: list[Any] = []
    p = Producer({**conf, "message.timeout.ms": 10_000, "enable.idempotence": False})
    p.produce(topic, b"v", on_delivery=lambda err, _msg: got.append(err))
    p.flush(20)
    assert len(got) == 1
    return got[0]


def wait_healthy(proc: subprocess.Popen[bytes], log: Path, admin_port: int, port: int) -> None:
    deadline = time.monotonic() + 60
    delay = 0.05
    while True:
        if proc.poll() is not None:
            pytest.fail(f"the task exited (rc={proc.returncode}):\n{log.read_text()[-6000:]}")
        h = healthz_at(admin_port)
        if h is not None and h.get("kafka_port") == port:
            return
        if time.monotonic() > deadline:
            pytest.fail(f"agent not healthy after 60 s:\n{log.read_text()[-6000:]}")
        time.sleep(delay)  # bounded poll on readiness
        delay = min(delay * 2, 0.5)


def test_secure_task_definition_boots_read_only_and_enforces_acls(
    terraform: str,
    tree: tuple[Path, dict[str, str]],
    tls_postgres: TlsPostgres,
    s3_url: str,
    moto_server: str,
    tmp_path: Path,
) -> None:
    from confluent_kafka import KafkaError
    from confluent_kafka.admin import (
        AclBinding,
        AclOperation,
        AclPermissionType,
        AdminClient,
        NewTopic,
        ResourcePatternType,
        ResourceType,
        ScramCredentialInfo,
        ScramMechanism,
        UserScramCredentialUpsertion,
    )

    why = can_unshare()
    if why is not None:
        if os.environ.get("CI"):
            pytest.fail(why)
        pytest.skip(why)
    root, tf_env = tree
    module_dir = root / "modules" / "floe"
    task = rendered_task(terraform, module_dir, tf_env, TEST_FILE, TASK)
    image = image_layout()
    env = task.environment()

    # The deployment under test, as the task definition states it.
    assert env["FLOE_LISTENERS"] == "SASL_SSL://0.0.0.0:9092"
    assert env["FLOE_AUTHORIZER"] == "acl" and env["FLOE_SUPER_USERS"] == f"User:{ADMIN}"
    assert env["FLOE_SSL_CERTFILE"].startswith("/var/lib/floe/tls/")
    assert [c["name"] for c in task.init_containers()] == ["tls-volume-init"]

    tls_dir = tmp_path / "kafka-tls"
    secrets = secret_values(TfDir.load(module_dir), task, tls_postgres, tls_dir)
    port, admin_port = free_port(), free_port()
    bucket = urlsplit(s3_url).netloc
    # The mock provider's bucket name becomes the test's bucket; the rest is the module's.
    mock_bucket = urlsplit(env["FLOE_OBJECTS"]).netloc
    assert env["FLOE_OBJECTS"] == f"s3://{mock_bucket}/floe?region={REGION}"
    overrides = {
        "FLOE_LISTENERS": f"SASL_SSL://127.0.0.1:{port}",
        "FLOE_ADVERTISED_LISTENERS": f"SASL_SSL://localhost:{port}",
        "FLOE_PORT": str(port),
        "FLOE_ADMIN_PORT": str(admin_port),
        "FLOE_ADVERTISED_HOST": "localhost",
        "FLOE_ADVERTISED_PORT": str(port),
        "FLOE_OBJECTS": env["FLOE_OBJECTS"].replace(mock_bucket, bucket, 1)
        + f"&endpoint={moto_server}",
    }
    assert set(overrides) == {*OVERRIDES, "FLOE_OBJECTS"}
    # The container's environment: the image's ENV, the task definition's
    # environment and secrets; the task role's credentials come from the test's S3.
    proc_env = {k: v for k, v in image.env.items() if k != "PATH"}
    proc_env.update({
        "PATH": os.environ["PATH"], "HOME": image.workdir, "PYTHONPATH": str(REPO_ROOT),
        **{k: v for k, v in os.environ.items() if k.startswith("AWS_")},
    })  # fmt: skip
    proc_env.update({**env, **secrets, **overrides})

    log = tmp_path / "task.log"
    proc = start_task(task, image, proc_env, log)
    try:
        wait_healthy(proc, log, admin_port, port)
        ca = tls_dir / "ca.pem"
        admin_conf = client_conf(port, ca, ADMIN, ADMIN_PW, "PLAIN")
        alice_conf = client_conf(port, ca, ALICE, ALICE_PW, "SCRAM-SHA-512")
        admin = AdminClient(admin_conf)
        admin.create_topics([NewTopic("secure-check", num_partitions=1, replication_factor=1)])[
            "secure-check"
        ].result(30)
        # The first SCRAM user, created by the super user over the wire.
        up = UserScramCredentialUpsertion(
            ALICE, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 8192), ALICE_PW.encode()
        )
        for f in admin.alter_user_scram_credentials([up]).values():
            f.result(30)

        # Authenticated but without an ACL: refused.
        err = produce_error(alice_conf, "secure-check")
        assert err is not None and err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, err
        # The super user is allowed.
        assert produce_error(admin_conf, "secure-check") is None
        # An ACL from the super user opens the topic to alice (the refusal was the authorizer).
        acl = AclBinding(
            ResourceType.TOPIC, "secure-check", ResourcePatternType.LITERAL,
            f"User:{ALICE}", "*", AclOperation.WRITE, AclPermissionType.ALLOW,
        )  # fmt: skip
        for f in admin.create_acls([acl]).values():
            f.result(30)
        deadline = time.monotonic() + 15
        while (err := produce_error(alice_conf, "secure-check")) is not None:
            assert err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, err
            assert time.monotonic() < deadline, "the ACL never took effect"
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
    text = log.read_text()
    assert proc.returncode == 0, text[-4000:]
    assert "Traceback" not in text and "Read-only file system" not in text, text[-4000:]
