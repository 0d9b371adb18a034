"""Kafka's ACL semantics (agent.security.acl / authorizer), without a network.

Each case is one rule of Kafka's AclAuthorizer: literal, wildcard and prefixed
patterns; principal and host wildcards; DENY wins; implied operations; no ACL
on a resource; super users; authorizeByResourceType."""

from __future__ import annotations

import pytest

from agent.security.acl import (
    AclIndex,
    AclOperation,
    AclPermission,
    PatternType,
    ResourceType,
    validate_binding,
)
from agent.security.authorizer import Authorizer, parse_super_users
from metastore import open_metastore
from metastore.types import AclBinding

Op, RT, PT, P = AclOperation, ResourceType, PatternType, AclPermission
ALICE = "User:alice"
HOST = "10.0.0.7"


def acl(name: str, op: int = Op.READ, *, rt: int = RT.TOPIC, pt: int = PT.LITERAL, who: str = ALICE,
        host: str = "*", perm: int = P.ALLOW) -> AclBinding:  # fmt: skip
    return AclBinding(int(rt), name, int(pt), who, host, int(op), int(perm))


def check(index: AclIndex, op: int, name: str, *, rt: int = RT.TOPIC, who: str = ALICE, host: str = HOST) -> bool | None:
    return index.check(who, host, int(op), int(rt), name)


def test_literal_wildcard_and_prefixed_patterns() -> None:
    idx = AclIndex([acl("orders"), acl("*", Op.WRITE), acl("pay.", Op.DELETE, pt=PT.PREFIXED)])
    assert check(idx, Op.READ, "orders") is True
    assert check(idx, Op.READ, "other") is False  # an ACL applies ('*' for WRITE): not READ
    assert check(idx, Op.WRITE, "anything") is True
    assert check(idx, Op.DELETE, "pay.eu") is True
    assert check(idx, Op.DELETE, "pay") is False  # the prefix is longer than the name
    assert check(idx, Op.READ, "orders", rt=RT.GROUP) is None  # no ACL at all on that group


def test_principal_and_host_matching() -> None:
    idx = AclIndex([acl("t", who="User:*", host="10.0.0.7"), acl("u", who="User:bob")])
    assert check(idx, Op.READ, "t") is True
    assert check(idx, Op.READ, "t", who="User:carol") is True
    assert check(idx, Op.READ, "t", host="10.0.0.8") is False
    assert check(idx, Op.READ, "u") is False
    assert check(idx, Op.READ, "u", who="User:bob") is True
    assert check(idx, Op.READ, "u", who="Group:bob") is False  # the type is part of the principal


def test_deny_wins_over_allow_including_all() -> None:
    idx = AclIndex([acl("t", Op.ALL), acl("t", Op.WRITE, perm=P.DENY)])
    assert check(idx, Op.READ, "t") is True
    assert check(idx, Op.WRITE, "t") is False
    # A DENY through a wildcard or a prefix beats a literal ALLOW.
    idx = AclIndex([acl("secret.x", Op.READ), acl("secret.", Op.ALL, pt=PT.PREFIXED, who="User:*", perm=P.DENY)])
    assert check(idx, Op.READ, "secret.x") is False
    idx = AclIndex([acl("t"), acl("*", Op.READ, perm=P.DENY, host=HOST)])
    assert check(idx, Op.READ, "t") is False
    assert check(idx, Op.READ, "t", host="10.9.9.9") is True


@pytest.mark.parametrize("granted", [Op.READ, Op.WRITE, Op.DELETE, Op.ALTER, Op.DESCRIBE, Op.ALL])
def test_describe_is_implied(granted: AclOperation) -> None:
    assert check(AclIndex([acl("t", granted)]), Op.DESCRIBE, "t") is True


@pytest.mark.parametrize("granted", [Op.CREATE, Op.DESCRIBE_CONFIGS, Op.IDEMPOTENT_WRITE])
def test_describe_is_not_implied_by_others(granted: AclOperation) -> None:
    assert check(AclIndex([acl("t", granted)]), Op.DESCRIBE, "t") is False


def test_describe_configs_implied_by_alter_configs_but_deny_is_not_implied() -> None:
    idx = AclIndex([acl("t", Op.ALTER_CONFIGS)])
    assert check(idx, Op.DESCRIBE_CONFIGS, "t") is True
    assert check(idx, Op.ALTER, "t") is False
    # DENY READ does not deny DESCRIBE (Kafka implies only on ALLOW).
    idx = AclIndex([acl("t", Op.READ, perm=P.DENY), acl("t", Op.DESCRIBE)])
    assert check(idx, Op.DESCRIBE, "t") is True
    assert check(idx, Op.READ, "t") is False


def test_any_allowed_by_resource_type() -> None:
    def any_write(*bindings: AclBinding) -> bool:
        return AclIndex(bindings).any_allowed(ALICE, HOST, Op.WRITE, RT.TOPIC)

    assert not any_write()
    assert any_write(acl("t", Op.WRITE))
    assert not any_write(acl("t", Op.WRITE), acl("t", Op.WRITE, perm=P.DENY))
    assert not any_write(acl("t", Op.WRITE), acl("*", Op.ALL, perm=P.DENY))
    assert not any_write(acl("pay.x", Op.WRITE), acl("pay.", Op.WRITE, pt=PT.PREFIXED, perm=P.DENY))
    assert any_write(acl("pay.", Op.WRITE, pt=PT.PREFIXED), acl("pay.x", Op.WRITE, perm=P.DENY))
    assert any_write(acl("*", Op.WRITE), acl("t", Op.WRITE, perm=P.DENY))


@pytest.mark.parametrize(
    ("binding", "message"),
    [
        (AclBinding(1, "t", 3, ALICE, "*", 3, 3), "Invalid resourceType 1"),
        (AclBinding(99, "t", 3, ALICE, "*", 3, 3), "Invalid resourceType 99"),
        (AclBinding(2, "t", 2, ALICE, "*", 3, 3), "Invalid patternType 2"),
        (AclBinding(2, "t", 3, ALICE, "*", 1, 3), "Invalid operation 1"),
        (AclBinding(2, "t", 3, ALICE, "*", 3, 1), "Invalid permissionType 1"),
        (AclBinding(2, "", 3, ALICE, "*", 3, 3), "Resource name should not be empty"),
        (AclBinding(4, "my-cluster", 3, ALICE, "*", 7, 3), "The only valid name for the CLUSTER resource is kafka-cluster"),
        (AclBinding(2, "t", 3, "alice", "*", 3, 3), "Could not parse principal"),
    ],
)
def test_validate_binding(binding: AclBinding, message: str) -> None:
    why = validate_binding(binding)
    assert why is not None and why.startswith(message)
    assert validate_binding(binding._replace(
        resource_type=2, resource_name="t", pattern_type=3, principal=ALICE, operation=3, permission=3)) is None  # fmt: skip


def test_super_users_parse() -> None:
    assert parse_super_users(" User:admin ;User:floe") == frozenset({"User:admin", "User:floe"})
    with pytest.raises(ValueError, match="Type:name"):
        parse_super_users("admin")


async def test_authorizer_fails_closed_then_memoises_and_reloads(tmp_path) -> None:
    meta = await open_metastore(f"sqlite:///{tmp_path / 'm.db'}")
    try:
        az = Authorizer(meta, super_users=frozenset({"User:admin"}))
        assert not az.authorize(ALICE, HOST, Op.READ, RT.TOPIC, "t")  # nothing loaded: refused
        assert az.authorize("User:admin", HOST, Op.DELETE, RT.CLUSTER, "kafka-cluster")
        await az.reload()
        assert not az.authorize(ALICE, HOST, Op.READ, RT.TOPIC, "t")  # no ACL: refused by default
        await meta.create_acls([acl("t")])
        assert not az.authorize(ALICE, HOST, Op.READ, RT.TOPIC, "t")  # memoised until a reload
        await az.reload()
        assert az.authorize(ALICE, HOST, Op.READ, RT.TOPIC, "t")
        everyone = Authorizer(meta, allow_everyone_if_no_acl_found=True)
        await everyone.reload()
        assert everyone.authorize("User:bob", HOST, Op.WRITE, RT.TOPIC, "no-acls-here")
        assert not everyone.authorize("User:bob", HOST, Op.READ, RT.TOPIC, "t")  # t has ACLs
        assert az.operations(ALICE, HOST, RT.TOPIC, "t") == (1 << Op.READ) | (1 << Op.DESCRIBE)
    finally:
        await meta.close()
