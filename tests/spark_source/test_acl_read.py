"""Spark reads obey Kafka ACLs (issue 42): the driver authenticates as the job's Kafka user.

An agent with a SASL_PLAINTEXT listener only, ``authorizer=acl`` and a peer
credential; alice may READ ``orders``, bob may not. A batch read as bob fails
with an authorization error naming the topic, as alice it returns every record,
and nothing in the Spark configuration, the source's options or the driver's
environment holds the peers' credential (the driver never needs it).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import pytest

from agent.security.acl import AclOperation, AclPermission, PatternType, ResourceType
from agent.security.sasl.scram import make_credential
from metastore.types import AclBinding
from spark_source.kafka_auth import KafkaAuthError, TopicAuthorizationError, parse_jaas
from spark_source.options import OptionError, parse_options
from spark_source.source import FloeBatchReader
from tests.fixtures.agent import RunningAgent
from tests.spark_source.test_unit import read_all

PEER = "peer-secret-for-agents-only-0123456789"
N = 40


def _allow(principal: str, op: AclOperation, rtype: ResourceType, name: str) -> AclBinding:
    return AclBinding(int(rtype), name, int(PatternType.LITERAL), principal, "*", int(op), int(AclPermission.ALLOW))


@pytest.fixture
def acl_agent(agent_factory: Callable[..., RunningAgent]) -> RunningAgent:
    agent = agent_factory(
        listeners="SASL_PLAINTEXT://127.0.0.1:0",
        sasl_users="admin:admin-secret",
        authorizer="acl",
        super_users="User:admin",
        peer_token=PEER,
        auto_create_topics=False,
        flush_interval_ms=5,
        failed_auth_delay_ms=1,
    )

    async def setup() -> None:
        meta = agent.broker.meta
        for user in ("alice", "bob"):
            await meta.put_scram_credential(make_credential(user, "SCRAM-SHA-512", f"{user}-pw", iterations=4096))
        await meta.create_acls(
            [
                # Discovery of the planning API is a DescribeConfigs of the broker.
                _allow("User:alice", AclOperation.DESCRIBE_CONFIGS, ResourceType.CLUSTER, "kafka-cluster"),
                _allow("User:bob", AclOperation.DESCRIBE_CONFIGS, ResourceType.CLUSTER, "kafka-cluster"),
                _allow("User:alice", AclOperation.READ, ResourceType.TOPIC, "orders"),
            ]
        )
        await agent.broker.authorizer.reload()

    agent.call(setup())
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    conf = {
        "bootstrap.servers": _bootstrap(agent),
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "PLAIN",
        "sasl.username": "admin",
        "sasl.password": "admin-secret",
    }
    admin = AdminClient(conf)
    for f in admin.create_topics([NewTopic("orders", 2)]).values():
        f.result(timeout=20)
    p = Producer({**conf, "linger.ms": 5})
    for i in range(N):
        p.produce("orders", b"v%d" % i, key=b"k%d" % i, partition=i % 2)
    assert p.flush(30) == 0
    return agent


def _bootstrap(agent: RunningAgent) -> str:
    return f"127.0.0.1:{agent.server.ports['SASL_PLAINTEXT']}"


def _options(agent: RunningAgent, user: str, mechanism: str = "SCRAM-SHA-512") -> dict[str, str]:
    login = "scram.ScramLoginModule" if mechanism.startswith("SCRAM") else "plain.PlainLoginModule"
    return {
        "kafka.bootstrap.servers": _bootstrap(agent),
        "kafka.security.protocol": "SASL_PLAINTEXT",
        "kafka.sasl.mechanism": mechanism,
        "kafka.sasl.jaas.config": (
            f"org.apache.kafka.common.security.{login} required username=\"{user}\" password=\"{user}-pw\";"
        ),
        "subscribe": "orders",
    }


def test_options_parse_the_kafka_user() -> None:
    assert parse_jaas('x.PlainLoginModule required username="a b" password="p\\"w";') == ("a b", 'p"w')
    base = {"kafka.bootstrap.servers": "h:1", "subscribe": "t"}
    o = parse_options(
        {**base, "kafka.security.protocol": "SASL_SSL", "kafka.sasl.username": "u", "kafka.sasl.password": "pw"},
        streaming=False,
    )
    assert o.credentials is not None and o.credentials.mechanism == "PLAIN" and "pw" not in repr(o)
    with pytest.raises(OptionError, match="needs the job's Kafka user"):
        parse_options({**base, "kafka.security.protocol": "SASL_PLAINTEXT"}, streaming=False)
    with pytest.raises(OptionError, match=r"needs kafka\.security\.protocol"):
        parse_options({**base, "kafka.sasl.username": "u"}, streaming=False)
    with pytest.raises(OptionError, match="GSSAPI"):
        parse_options(
            {**base, "kafka.security.protocol": "SASL_PLAINTEXT", "kafka.sasl.mechanism": "GSSAPI"},
            streaming=False,
        )


def test_reader_obeys_read_acls(acl_agent: RunningAgent) -> None:
    got, _ = read_all(FloeBatchReader(parse_options(_options(acl_agent, "alice"), streaming=False)))
    assert len(got) == N
    with pytest.raises(TopicAuthorizationError, match=r"orders.*User:bob needs READ"):
        FloeBatchReader(parse_options(_options(acl_agent, "bob"), streaming=False)).partitions()
    wrong = {**_options(acl_agent, "alice"), "kafka.sasl.password": "nope"}
    with pytest.raises(KafkaAuthError, match="Invalid username or password"):
        FloeBatchReader(parse_options(wrong, streaming=False)).partitions()


@pytest.mark.slow
def test_spark_batch_read_obeys_read_acls(spark: Any, acl_agent: RunningAgent) -> None:
    def load(user: str) -> Any:
        r = spark.read.format("floe")
        for k, v in _options(acl_agent, user).items():
            r = r.option(k, v)
        return r.load()

    rows = load("alice").collect()
    assert sorted(bytes(r["value"]) for r in rows) == sorted(b"v%d" % i for i in range(N))
    with pytest.raises(Exception) as refused:
        load("bob").collect()
    assert "Not authorized" in str(refused.value) and "orders" in str(refused.value)
    # The peers' credential is nowhere on the Spark side.
    conf = dict(spark.sparkContext.getConf().getAll())
    assert not any(PEER in str(v) for v in conf.values())
    assert not any(PEER in v for v in _options(acl_agent, "alice").values())
    assert not any(PEER in v for v in os.environ.values())
