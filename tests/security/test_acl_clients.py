"""ACLs with real clients over SASL_PLAINTEXT/PLAIN (issue 15).

* Kafka's own ``kafka-acls`` calls through the Java 4.1 AdminClient (createAcls,
  describeAcls, deleteAcls, as User:admin, a super user) create and list ACLs that
  are then enforced on Java producers authenticated as other users;
* negative cases with confluent-kafka, each asserting the exact error the client
  sees: no WRITE on a topic, no READ on a group, DENY over ALLOW, prefixed ACLs,
  deleting a topic without DELETE, Metadata hiding undescribable topics, the super
  user's bypass.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from typing import Any

import pytest

from tests.fixtures.agent import RunningAgent
from tests.fixtures.java import SLF4J_SIMPLE, compile_java, java_binary, maven_classpath

pytestmark = pytest.mark.interop

USERS = "admin:admin-secret,alice:alice-secret,bob:bob-secret"


@pytest.fixture
def acl_agent(agent_factory: Callable[..., RunningAgent]) -> RunningAgent:
    return agent_factory(
        listeners="SASL_PLAINTEXT://127.0.0.1:0",
        sasl_users=USERS,
        authorizer="acl",
        super_users="User:admin",
        auto_create_topics=False,
    )


def conf(agent: RunningAgent, user: str, **extra: Any) -> dict[str, Any]:
    return {
        "bootstrap.servers": f"127.0.0.1:{agent.server.ports['SASL_PLAINTEXT']}",
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "PLAIN",
        "sasl.username": user,
        "sasl.password": f"{user}-secret",
        **extra,
    }


JAVA = r"""
import java.util.*;
import java.util.concurrent.*;
import org.apache.kafka.clients.admin.*;
import org.apache.kafka.clients.producer.*;
import org.apache.kafka.common.acl.*;
import org.apache.kafka.common.resource.*;
import org.apache.kafka.common.serialization.StringSerializer;

public class AclDriver {
    static Properties props(String bs, String user) {
        Properties p = new Properties();
        p.put("bootstrap.servers", bs);
        p.put("security.protocol", "SASL_PLAINTEXT");
        p.put("sasl.mechanism", "PLAIN");
        p.put("sasl.jaas.config", "org.apache.kafka.common.security.plain.PlainLoginModule required username=\""
            + user + "\" password=\"" + user + "-secret\";");
        p.put("request.timeout.ms", "10000");
        p.put("default.api.timeout.ms", "15000");
        return p;
    }

    static String produce(String bs, String user, String topic, boolean idempotent) {
        Properties p = props(bs, user);
        p.put("key.serializer", StringSerializer.class.getName());
        p.put("value.serializer", StringSerializer.class.getName());
        p.put("enable.idempotence", Boolean.toString(idempotent));
        p.put("max.block.ms", "10000");
        p.put("delivery.timeout.ms", "15000");
        try (KafkaProducer<String, String> prod = new KafkaProducer<>(p)) {
            prod.send(new ProducerRecord<>(topic, "k", "v")).get(20, TimeUnit.SECONDS);
            return "OK";
        } catch (ExecutionException e) {
            return e.getCause().getClass().getSimpleName();
        } catch (Exception e) {
            return e.getClass().getSimpleName();
        }
    }

    static AclBinding allow(ResourceType rt, String name, PatternType pt, String who, AclOperation op) {
        return new AclBinding(new ResourcePattern(rt, name, pt), new AccessControlEntry(who, "*", op, AclPermissionType.ALLOW));
    }

    public static void main(String[] args) throws Exception {
        String bs = args[0];
        try (Admin admin = Admin.create(props(bs, "admin"))) {
            admin.createTopics(List.of(new NewTopic("acl-t", 1, (short) 1), new NewTopic("acl-pay.eu", 1, (short) 1)))
                .all().get(15, TimeUnit.SECONDS);
            // kafka-acls --add --allow-principal User:alice --operation Write --topic acl-t
            // kafka-acls --add --allow-principal User:bob --operation Write --topic acl-pay. --resource-pattern-type prefixed
            // kafka-acls --add --deny-principal User:bob --operation All --topic acl-pay.eu
            admin.createAcls(List.of(
                allow(ResourceType.TOPIC, "acl-t", PatternType.LITERAL, "User:alice", AclOperation.WRITE),
                allow(ResourceType.TOPIC, "acl-pay.", PatternType.PREFIXED, "User:bob", AclOperation.WRITE),
                new AclBinding(new ResourcePattern(ResourceType.TOPIC, "acl-pay.eu", PatternType.LITERAL),
                    new AccessControlEntry("User:bob", "*", AclOperation.ALL, AclPermissionType.DENY))
            )).all().get(15, TimeUnit.SECONDS);
            // kafka-acls --list
            List<String> listed = new ArrayList<>();
            for (AclBinding b : admin.describeAcls(AclBindingFilter.ANY).values().get(15, TimeUnit.SECONDS)) {
                listed.add(b.pattern().resourceType() + ":" + b.pattern().name() + ":" + b.pattern().patternType() + ":"
                    + b.entry().principal() + ":" + b.entry().operation() + ":" + b.entry().permissionType());
            }
            Collections.sort(listed);
            for (String s : listed) System.out.println("ACL " + s);
            System.out.println("ALICE acl-t " + produce(bs, "alice", "acl-t", true));
            System.out.println("BOB acl-t " + produce(bs, "bob", "acl-t", false));
            System.out.println("BOB acl-pay.eu " + produce(bs, "bob", "acl-pay.eu", false));
            // kafka-acls --remove --allow-principal User:alice --operation Write --topic acl-t
            Collection<AclBinding> removed = admin.deleteAcls(List.of(new AclBindingFilter(
                new ResourcePatternFilter(ResourceType.TOPIC, "acl-t", PatternType.LITERAL),
                new AccessControlEntryFilter("User:alice", null, AclOperation.ANY, AclPermissionType.ANY))))
                .all().get(15, TimeUnit.SECONDS);
            System.out.println("REMOVED " + removed.size());
            System.out.println("ALICE-AFTER acl-t " + produce(bs, "alice", "acl-t", false));
            System.out.println("ADMIN acl-t " + produce(bs, "admin", "acl-t", true));
        }
        try (Admin alice = Admin.create(props(bs, "alice"))) {
            try {
                alice.describeAcls(AclBindingFilter.ANY).values().get(15, TimeUnit.SECONDS);
                System.out.println("ALICE-DESCRIBE OK");
            } catch (ExecutionException e) {
                System.out.println("ALICE-DESCRIBE " + e.getCause().getClass().getSimpleName());
            }
        }
    }
}
"""


def test_java_admin_acls_are_enforced(acl_agent: RunningAgent, tmp_path: Any) -> None:
    cp = compile_java(JAVA, maven_classpath(["org.apache.kafka:kafka-clients:4.1.0", SLF4J_SIMPLE]), tmp_path)
    run = subprocess.run(
        [java_binary(), "-cp", cp, "AclDriver", f"127.0.0.1:{acl_agent.server.ports['SASL_PLAINTEXT']}"],
        capture_output=True, text=True, timeout=240,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-4000:]
    lines = [line for line in run.stdout.splitlines() if line.split(" ")[0].isupper()]
    assert lines == [
        "ACL TOPIC:acl-pay.:PREFIXED:User:bob:WRITE:ALLOW",
        "ACL TOPIC:acl-pay.eu:LITERAL:User:bob:ALL:DENY",
        "ACL TOPIC:acl-t:LITERAL:User:alice:WRITE:ALLOW",
        "ALICE acl-t OK",
        "BOB acl-t TopicAuthorizationException",
        "BOB acl-pay.eu TopicAuthorizationException",  # DENY over the prefixed ALLOW
        "REMOVED 1",
        "ALICE-AFTER acl-t TopicAuthorizationException",
        "ADMIN acl-t OK",  # the super user needs no ACL
        "ALICE-DESCRIBE ClusterAuthorizationException",
    ], run.stdout


# -- confluent-kafka: the exact errors a client sees ------------------------------------------


def admin_acl(agent: RunningAgent, *bindings: tuple[Any, ...]) -> None:
    from confluent_kafka.admin import AclBinding, AdminClient

    admin = AdminClient(conf(agent, "admin"))
    for f in admin.create_acls([AclBinding(*b) for b in bindings], request_timeout=15).values():
        f.result(timeout=20)


def make_topics(agent: RunningAgent, *names: str) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient(conf(agent, "admin"))  # kept alive until the futures resolve
    for f in admin.create_topics([NewTopic(n, 1) for n in names]).values():
        f.result(timeout=20)


def produce_error(agent: RunningAgent, user: str, topic: str) -> Any:
    from confluent_kafka import Producer

    got: list[Any] = []
    p = Producer(conf(agent, user, **{"message.timeout.ms": 10_000, "enable.idempotence": False}))
    p.produce(topic, b"v", on_delivery=lambda err, _msg: got.append(err))
    p.flush(20)
    assert len(got) == 1
    return got[0]


def test_confluent_negative_cases(acl_agent: RunningAgent) -> None:
    from confluent_kafka import Consumer, KafkaError
    from confluent_kafka.admin import AclOperation as O
    from confluent_kafka.admin import AclPermissionType as Perm
    from confluent_kafka.admin import AdminClient
    from confluent_kafka.admin import ResourcePatternType as PT
    from confluent_kafka.admin import ResourceType as R

    make_topics(acl_agent, "orders", "pay.eu", "pay.us", "secret")
    # A principal without WRITE on a topic producing.
    err = produce_error(acl_agent, "alice", "orders")
    assert err is not None and err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    # Prefixed ACLs, and DENY overriding ALLOW.
    admin_acl(
        acl_agent,
        (R.TOPIC, "pay.", PT.PREFIXED, "User:alice", "*", O.WRITE, Perm.ALLOW),
        (R.TOPIC, "pay.us", PT.LITERAL, "User:*", "*", O.WRITE, Perm.DENY),
        (R.TOPIC, "orders", PT.LITERAL, "User:alice", "*", O.READ, Perm.ALLOW),
    )
    assert produce_error(acl_agent, "alice", "pay.eu") is None
    err = produce_error(acl_agent, "alice", "pay.us")
    assert err is not None and err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    # Without READ on the group, consuming fails with GROUP_AUTHORIZATION_FAILED.
    c = Consumer(conf(acl_agent, "alice", **{"group.id": "g-alice", "auto.offset.reset": "earliest"}))
    c.subscribe(["orders"])
    errors = []
    for _ in range(30):
        m = c.poll(1.0)
        if m is not None and m.error():
            errors.append(m.error().code())
            break
    c.close()
    assert errors == [KafkaError.GROUP_AUTHORIZATION_FAILED]
    # Metadata lists only what alice may describe (WRITE/READ imply DESCRIBE).
    alice_admin = AdminClient(conf(acl_agent, "alice"))
    assert set(alice_admin.list_topics(timeout=10).topics) == {"orders", "pay.eu", "pay.us"}
    assert set(AdminClient(conf(acl_agent, "admin")).list_topics(timeout=10).topics) == {"orders", "pay.eu", "pay.us", "secret"}
    # Deleting a topic without DELETE.
    fut = alice_admin.delete_topics(["orders"], operation_timeout=10)["orders"]
    with pytest.raises(Exception) as exc:
        fut.result(timeout=20)
    assert exc.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    # The super user bypasses everything: produce to "secret" (no ACL at all) and delete it.
    assert produce_error(acl_agent, "admin", "secret") is None
    root = AdminClient(conf(acl_agent, "admin"))
    root.delete_topics(["secret"], operation_timeout=10)["secret"].result(timeout=20)

