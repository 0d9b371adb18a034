"""The deploy configuration boots a real agent: no drift between Terraform and code.

The agent's environment is taken from the Terraform module itself
(``local.agent_environment`` + the per-zone map + the secret names, read with
python-hcl2), rendered with the variable defaults, and the placeholders only
AWS knows are replaced by the test's services:

* the DSN secret (FLOE_METASTORE) is rendered from the module's own
  ``secret_string_wo`` template with the host/port/db/user of a test Postgres
  that speaks TLS with a certificate for ``localhost`` (``sslmode=verify-full``
  against the test CA, standing in for the image's RDS CA bundle);
* FLOE_OBJECTS keeps the module's ``s3://bucket/prefix?region=REGION`` form with
  the test's moto bucket, plus ``&endpoint=`` (the one thing ECS does not need);
* FLOE_ZONE is the zone's key, as the module sets it;
* the listener binds 127.0.0.1 on free ports and advertises them (the NLB's
  zonal DNS name and port in AWS).

Then ``python -m floe_cli.main agent`` runs with exactly that environment,
answers /healthz, and confluent-kafka creates a topic, produces and consumes
through it. A renamed FLOE_* variable, a value format the agent rejects, or a
DSN template it cannot open fails here.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from tests.fixtures.agent_process import healthz_at, scrape_metric
from tests.fixtures.postgres import TlsPostgres
from tests.fixtures.s3 import REGION, free_port
from tests.infra.tf import MODULE_DIR, REPO_ROOT, TfDir, render, variable_defaults

pytestmark = [
    pytest.mark.infra,
    pytest.mark.postgres,
    pytest.mark.s3,
    pytest.mark.interop,
    pytest.mark.timeout(180),
]

ZONE = "us-east-1a"
TEST_OVERRIDES = (
    "FLOE_LISTENERS",
    "FLOE_ADVERTISED_LISTENERS",
    "FLOE_HOST",
    "FLOE_PORT",
    "FLOE_ADMIN_PORT",
    "FLOE_ADVERTISED_HOST",
    "FLOE_ADVERTISED_PORT",
)


def rendered_environment(
    module: TfDir, *, bucket: str, region: str, db: dict[str, Any]
) -> tuple[dict[str, str], dict[str, str]]:
    """(plain env as the module renders it for ZONE, secrets rendered from their templates)."""
    variables = variable_defaults(module)
    variables.update({
        "db_username": db["user"],
        "db_password": db["password"],
        "db_name": db["database"],
        # The image's RDS CA bundle, here the CA of the test's TLS Postgres.
        "db_ca_bundle_path": db["ca_bundle"],
        "internal_token": "test-internal-token-0123456789abcdef",
    })  # fmt: skip
    locals_src = module.locals()
    assert locals_src["object_prefix"] == '${trim(var.object_prefix, "/")}'
    assert locals_src["cluster_id"] == "${coalesce(var.cluster_id, var.name)}"
    assert locals_src["agent_workers"] == (
        "${var.agent_workers > 0 ? var.agent_workers : max(1, floor(var.agent_cpu / 1024))}"
    ), locals_src["agent_workers"]
    assert (
        locals_src["authorizer"] == '${coalesce(var.authorizer, var.enable_sasl ? "acl" : "none")}'
    )
    workers = int(variables["agent_workers"]) or max(1, int(variables["agent_cpu"]) // 1024)
    locals_ = {
        "bucket_name": bucket,
        "region": region,
        "object_prefix": str(variables["object_prefix"]).strip("/"),
        "cluster_id": variables.get("cluster_id") or variables["name"],
        "agent_workers": workers,
        "db_address": db["host"],
        "db_port": db["port"],
        # enable_tls = enable_sasl = false (the defaults): one PLAINTEXT listener.
        "security_protocol": "PLAINTEXT",
        "tls_certfile": "",
        "tls_keyfile": "",
        "sasl_mechanisms": "",
        # No SASL: no authorizer (variables.tf: acl exactly when enable_sasl), no super users.
        "authorizer": "none",
        "super_users": "",
    }
    assert not variables["enable_tls"] and not variables["enable_sasl"]
    env = {
        k: render(str(v), variables, locals_) for k, v in locals_src["agent_environment"].items()
    }

    # Per-zone entries: FLOE_ZONE comes straight from the zone key.
    zone_src = str(locals_src["agent_zone_environment"])
    assert re.search(r"\bFLOE_ZONE = zone\b", zone_src), zone_src
    env["FLOE_ZONE"] = ZONE
    for name in re.findall(r"\b(FLOE_[A-Z_]+)\s*=", zone_src):
        assert name == "FLOE_ZONE" or name in TEST_OVERRIDES, (
            f"{name}: teach this test how to render it"
        )

    # Secrets: FLOE_METASTORE <- the DSN secret, written from the module's template.
    secrets_src = str(locals_src["agent_secrets"])
    assert re.search(r"FLOE_METASTORE = aws_secretsmanager_secret\.metastore_dsn\.arn", secrets_src)
    dsn_template = module.resources()["aws_secretsmanager_secret_version.metastore_dsn"][
        "secret_string_wo"
    ]
    secrets = {"FLOE_METASTORE": render(dsn_template, variables, locals_)}
    # FLOE_PEER_TOKEN <- the internal token secret (the agents' peer routes need it).
    assert re.search(r"FLOE_PEER_TOKEN\s*=\s*local\.internal_token_secret_arn", secrets_src), (
        secrets_src
    )
    token_template = module.resources()["aws_secretsmanager_secret_version.internal_token"][
        "secret_string_wo"
    ]
    secrets["FLOE_PEER_TOKEN"] = render(token_template, variables, locals_)
    return env, secrets


def postgres_parts(pg: TlsPostgres) -> dict[str, Any]:
    """A fresh database on the TLS Postgres, as the module's DSN template needs it
    (the certificate names localhost, like RDS's names its endpoint)."""
    return {
        "user": "postgres",
        "password": "",
        "host": "localhost",
        "port": pg.port,
        "database": pg.create_database(),
        "ca_bundle": str(pg.ca.cert),
    }


def start_agent(
    agent_env: dict[str, str], tmp_path: Path, name: str = "agent"
) -> tuple[subprocess.Popen[bytes], Path]:
    """``python -m floe_cli.main agent`` with no flags: its configuration is the environment."""
    proc_env = {k: v for k, v in os.environ.items() if not k.startswith("FLOE_")}
    proc_env.update(agent_env)
    proc_env["PYTHONUNBUFFERED"] = "1"
    proc_env["PYTHONPATH"] = os.pathsep.join(
        filter(None, [str(REPO_ROOT), proc_env.get("PYTHONPATH")])
    )
    log_path = tmp_path / f"{name}.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "floe_cli.main", "agent"],
            stdout=log, stderr=subprocess.STDOUT, env=proc_env, cwd=tmp_path,
        )  # fmt: skip
    return proc, log_path


def wait_healthy(
    proc: subprocess.Popen[bytes], log_path: Path, admin_port: int, port: int, ring: int = 1
) -> dict[str, Any]:
    """Bounded poll until /healthz answers for ``port`` with ``ring`` agents in the ring."""
    deadline = time.monotonic() + 60
    delay = 0.05
    while True:
        if proc.poll() is not None:
            pytest.fail(f"agent exited (rc={proc.returncode}):\n{log_path.read_text()[-6000:]}")
        h = healthz_at(admin_port)
        if h is not None and h.get("kafka_port") == port and len(h.get("ring", [])) >= ring:
            return h
        if time.monotonic() > deadline:
            pytest.fail(
                f"agent not healthy after 60 s (ring {ring}):\n{log_path.read_text()[-6000:]}"
            )
        time.sleep(delay)  # bounded poll on readiness
        delay = min(delay * 2, 0.5)


def stop_agent(proc: subprocess.Popen[bytes], log_path: Path) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, log_path.read_text()[-4000:]
    text = log_path.read_text()
    assert "Traceback" not in text, text[-4000:]


def test_module_environment_boots_a_real_agent(
    tls_postgres: TlsPostgres, s3_url: str, moto_server: str, tmp_path: Path
) -> None:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

    module = TfDir.load(MODULE_DIR)
    bucket = urlsplit(s3_url).netloc
    env, secrets = rendered_environment(
        module, bucket=bucket, region=REGION, db=postgres_parts(tls_postgres)
    )

    # What the module produces, checked before anything is overridden.
    assert env["FLOE_OBJECTS"] == f"s3://{bucket}/floe?region={REGION}"
    assert secrets["FLOE_METASTORE"].startswith("postgresql://")
    # The agent reaches the metastore over TLS, checking the certificate and its name.
    assert secrets["FLOE_METASTORE"].endswith(
        f"?sslmode=verify-full&sslrootcert={tls_postgres.ca.cert}"
    )
    assert env["FLOE_ZONE"] == ZONE

    port, admin_port = free_port(), free_port()
    assert env["FLOE_LISTENERS"] == "PLAINTEXT://0.0.0.0:9092"
    test_env = {
        "FLOE_LISTENERS": f"PLAINTEXT://127.0.0.1:{port}",
        "FLOE_ADVERTISED_LISTENERS": f"PLAINTEXT://127.0.0.1:{port}",
        "FLOE_HOST": "127.0.0.1",
        "FLOE_PORT": str(port),
        "FLOE_ADMIN_PORT": str(admin_port),
        "FLOE_ADVERTISED_HOST": "127.0.0.1",
        "FLOE_ADVERTISED_PORT": str(port),
    }
    assert set(test_env) == set(TEST_OVERRIDES)
    agent_env = {**env, **secrets, **test_env}
    agent_env["FLOE_OBJECTS"] += f"&endpoint={moto_server}"

    proc, log_path = start_agent(agent_env, tmp_path)
    try:
        wait_healthy(proc, log_path, admin_port, port)

        bootstrap = f"127.0.0.1:{port}"
        # The module sets auto_create_topics = false: create the topic like an operator would.
        admin = AdminClient({"bootstrap.servers": bootstrap})
        for fut in admin.create_topics(
            [NewTopic("deploy-check", num_partitions=1, replication_factor=1)]
        ).values():
            fut.result(30)

        producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
        sent = [(f"k{i}".encode(), f"value-{i}".encode()) for i in range(5)]
        for k, v in sent:
            producer.produce("deploy-check", key=k, value=v)
        assert producer.flush(30) == 0

        consumer = Consumer({
            "bootstrap.servers": bootstrap, "group.id": "deploy-check", "enable.auto.commit": False,
        })  # fmt: skip
        got: list[tuple[bytes | None, bytes | None]] = []
        try:
            consumer.assign([TopicPartition("deploy-check", 0, OFFSET_BEGINNING)])
            deadline = time.monotonic() + 30
            while len(got) < len(sent) and time.monotonic() < deadline:
                msg = consumer.poll(0.5)
                if msg is None:
                    continue
                assert msg.error() is None, msg.error()
                got.append((msg.key(), msg.value()))
        finally:
            consumer.close()
        assert got == sent

        # The agent took its zone from FLOE_ZONE (reported as broker.rack) and
        # advertises the address it was given.
        md = admin.list_topics(timeout=10)
        assert [(b.host, b.port) for b in md.brokers.values()] == [("127.0.0.1", port)]
        (broker_id,) = md.brokers
        resource = ConfigResource(ConfigResource.Type.BROKER, str(broker_id))
        configs = admin.describe_configs([resource])[resource].result(30)
        assert configs["broker.rack"].value == ZONE
    finally:
        stop_agent(proc, log_path)


def test_module_environment_peer_cache_hit(
    tls_postgres: TlsPostgres, s3_url: str, moto_server: str, tmp_path: Path
) -> None:
    """Two agents of one zone booted with the module's environment (FLOE_HOST
    0.0.0.0, FLOE_PEER_ADDRESS=auto: the task's private address) find each other
    and share blocks: reads through one agent of objects the other owns on the
    ring are peer GETs (served by the owner), with no peer failure to fall back on.
    (Consumers follow the partition leader, so whichever agent leads reads all 16
    objects; the chance that it owns all of them on the ring is 2**-16.)"""
    from confluent_kafka import Consumer, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic

    module = TfDir.load(MODULE_DIR)
    bucket = urlsplit(s3_url).netloc
    env, secrets = rendered_environment(
        module, bucket=bucket, region=REGION, db=postgres_parts(tls_postgres)
    )
    assert env["FLOE_HOST"] == "0.0.0.0" and env["FLOE_PEER_ADDRESS"] == "auto"
    agents: list[tuple[subprocess.Popen[bytes], Path, int, int]] = []
    try:
        for name in ("a", "b"):
            port, admin_port = free_port(), free_port()
            agent_env = {
                **env, **secrets,
                "FLOE_PORT": str(port), "FLOE_ADMIN_PORT": str(admin_port),
                "FLOE_LISTENERS": f"PLAINTEXT://0.0.0.0:{port}",
                "FLOE_ADVERTISED_LISTENERS": f"PLAINTEXT://127.0.0.1:{port}",
                "FLOE_ADVERTISED_HOST": "127.0.0.1", "FLOE_ADVERTISED_PORT": str(port),
                # The leader writes the 16 objects; with write-through it would read them from its own cache.
                "FLOE_FETCH_CACHE_WRITES": "false",
            }  # fmt: skip
            agent_env["FLOE_OBJECTS"] += f"&endpoint={moto_server}"
            proc, log_path = start_agent(agent_env, tmp_path, name)
            agents.append((proc, log_path, port, admin_port))
        for proc, log_path, port, admin_port in agents:
            wait_healthy(proc, log_path, admin_port, port, ring=2)

        (_, _, port_a, admin_a), (_, _, port_b, admin_b) = agents
        admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{port_a}"})
        admin.create_topics([NewTopic("peer-check", num_partitions=1, replication_factor=1)])[
            "peer-check"
        ].result(30)
        # 16 objects: one flush per produce call (flush() waits for the ack).
        producer = Producer({"bootstrap.servers": f"127.0.0.1:{port_a}", "linger.ms": 0})
        for i in range(16):
            producer.produce("peer-check", value=f"object-{i}".encode() * 100)
            assert producer.flush(30) == 0

        def total(name: str) -> float:
            return sum(scrape_metric(admin, name) for admin in (admin_a, admin_b))

        before = {n: total(n) for n in ("floe_peer_gets_total", "floe_peer_serves_total")}
        consumer = Consumer({"bootstrap.servers": f"127.0.0.1:{port_b}", "group.id": "peer-check"})
        got = 0
        try:
            consumer.assign([TopicPartition("peer-check", 0, 0)])
            deadline = time.monotonic() + 30
            while got < 16 and time.monotonic() < deadline:
                got += sum(1 for m in consumer.consume(16, 0.5) if m.error() is None)
        finally:
            consumer.close()
        assert got == 16
        # The partition's leader (on the ring) reads every object: those the other
        # agent owns come from it, which loads each from S3 once and serves it.
        assert total("floe_peer_gets_total") > before["floe_peer_gets_total"]
        assert total("floe_peer_serves_total") > before["floe_peer_serves_total"]
        assert total("floe_peer_get_failures_total") == 0
    finally:
        for proc, log_path, _, _ in agents:
            stop_agent(proc, log_path)
