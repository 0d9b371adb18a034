"""ACL storage (issue 15): the same contract over SQLite and Postgres."""

from __future__ import annotations

import asyncio

from metastore import Metastore
from metastore.types import AclBinding, AclBindingFilter

TOPIC, GROUP, CLUSTER = 2, 3, 4
ANY, MATCH, LITERAL, PREFIXED = 1, 2, 3, 4
ALL, READ, WRITE, DESCRIBE = 2, 3, 4, 8
DENY, ALLOW = 2, 3


def b(name: str, op: int = READ, *, rt: int = TOPIC, pt: int = LITERAL, who: str = "User:alice",
      host: str = "*", perm: int = ALLOW) -> AclBinding:  # fmt: skip
    return AclBinding(rt, name, pt, who, host, op, perm)


EVERYTHING = AclBindingFilter(ANY, None, ANY, None, None, ANY, ANY)


async def test_create_list_is_idempotent_and_versioned(ms: Metastore) -> None:
    assert await ms.acl_version() == 0
    assert await ms.list_acls() == (0, [])
    v1 = await ms.create_acls([b("orders"), b("orders"), b("pay.", WRITE, pt=PREFIXED)])
    assert v1 == 1 and await ms.acl_version() == 1
    v2 = await ms.create_acls([b("orders")])  # existing: kept once, version still moves
    assert v2 == 2
    version, acls = await ms.list_acls()
    assert version == 2
    assert sorted(acls) == sorted([b("orders"), b("pay.", WRITE, pt=PREFIXED)])


async def test_filters_literal_prefixed_any_match(ms: Metastore) -> None:
    acls = [
        b("orders"), b("*"), b("ord", pt=PREFIXED), b("o", pt=PREFIXED, perm=DENY), b("other"),
        b("orders", rt=GROUP), b("kafka-cluster", ALL, rt=CLUSTER, who="User:bob", host="10.0.0.1"),
    ]  # fmt: skip
    await ms.create_acls(acls)

    async def names(f: AclBindingFilter) -> list[tuple[int, str, int]]:
        return sorted(
            (a.resource_type, a.resource_name, a.pattern_type) for a in (await ms.list_acls(f))[1]
        )

    # LITERAL: exact name and pattern type; ANY pattern type: exact name, either type.
    assert await names(AclBindingFilter(TOPIC, "orders", LITERAL, None, None, ANY, ANY)) == [
        (TOPIC, "orders", LITERAL)
    ]
    assert await names(AclBindingFilter(ANY, "orders", ANY, None, None, ANY, ANY)) == [
        (TOPIC, "orders", LITERAL), (GROUP, "orders", LITERAL)]  # fmt: skip
    # MATCH: everything that applies to topic "orders": literal, wildcard, covering prefixes.
    assert await names(AclBindingFilter(TOPIC, "orders", MATCH, None, None, ANY, ANY)) == [
        (TOPIC, "*", LITERAL), (TOPIC, "o", PREFIXED), (TOPIC, "ord", PREFIXED), (TOPIC, "orders", LITERAL)]  # fmt: skip
    assert await names(AclBindingFilter(TOPIC, None, PREFIXED, None, None, ANY, ANY)) == [
        (TOPIC, "o", PREFIXED), (TOPIC, "ord", PREFIXED)]  # fmt: skip
    # Entry filter: exact principal/host, ANY or exact operation and permission.
    assert await names(AclBindingFilter(ANY, None, ANY, "User:bob", "10.0.0.1", ALL, ALLOW)) == [
        (CLUSTER, "kafka-cluster", LITERAL)]  # fmt: skip
    assert await names(AclBindingFilter(ANY, None, ANY, "User:*", None, ANY, ANY)) == []
    assert await names(AclBindingFilter(ANY, None, ANY, None, None, ANY, DENY)) == [
        (TOPIC, "o", PREFIXED)
    ]


async def test_delete_reports_each_binding_under_first_filter(ms: Metastore) -> None:
    await ms.create_acls([b("orders"), b("orders", WRITE), b("audit"), b("pay.", pt=PREFIXED)])
    v = await ms.acl_version()
    deleted = await ms.delete_acls([
        AclBindingFilter(TOPIC, "orders", LITERAL, None, None, ANY, ANY),
        AclBindingFilter(ANY, None, ANY, "User:alice", None, READ, ANY),
        AclBindingFilter(TOPIC, "nothing", LITERAL, None, None, ANY, ANY),
    ])  # fmt: skip
    assert sorted(deleted[0]) == sorted([b("orders"), b("orders", WRITE)])
    assert sorted(deleted[1]) == sorted([b("audit"), b("pay.", pt=PREFIXED)])
    assert deleted[2] == []
    assert await ms.list_acls() == (v + 1, [])
    assert await ms.delete_acls([EVERYTHING]) == [[]]
    assert await ms.acl_version() == v + 1  # nothing deleted: no change to see


async def test_concurrent_creates_and_deletes_are_all_counted(ms: Metastore) -> None:
    await asyncio.gather(*(ms.create_acls([b(f"t{i}"), b("shared")]) for i in range(8)))
    version, acls = await ms.list_acls()
    assert version == 8 and len(acls) == 9
    done = await asyncio.gather(*(ms.delete_acls([AclBindingFilter(TOPIC, "shared", LITERAL, None, None, ANY, ANY)])
                                  for _ in range(3)))  # fmt: skip
    assert sum(len(d[0]) for d in done) == 1


async def test_unicode_and_long_names_round_trip(ms: Metastore) -> None:
    acl = b("тема-" + "x" * 900, who="User:CN=alice,O=Acme ünïcode", host="2001:db8::1")
    await ms.create_acls([acl])
    assert (await ms.list_acls())[1] == [acl]


def test_acl_types_cross_the_metastore_wire() -> None:
    """``floe metastore serve`` carries the ACL types (metastore.rpc)."""
    import json

    from metastore.rpc import decode, encode

    value = (
        3,
        [b("orders"), b("pay.", pt=PREFIXED)] * 5,
        AclBindingFilter(TOPIC, None, MATCH, None, "*", ANY, ALLOW),
    )
    assert decode(json.loads(json.dumps(encode(value)))) == value
