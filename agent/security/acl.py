"""Kafka's ACL model: enums with Kafka's codes, validation, and the matching index.

Where it sits: the authorizer (agent/security/authorizer.py) builds an
:class:`AclIndex` from the bindings the metastore holds and asks it one question
per resource; the CreateAcls/DescribeAcls/DeleteAcls handlers validate what
clients send with :func:`validate_binding` / :func:`validate_filter`.

Semantics (Kafka's AclAuthorizer/StandardAuthorizer, KIP-11 and KIP-290):

* an ACL applies to a resource when its pattern is LITERAL with the same name,
  LITERAL ``*`` (every resource of that type), or PREFIXED with a prefix of the name;
* its principal is the caller's or ``User:*``; its host the caller's address or ``*``;
* DENY wins: a matching DENY for the operation (or ALL) refuses;
* otherwise a matching ALLOW for the operation, for ALL, or for an operation that
  implies it allows (READ/WRITE/DELETE/ALTER imply DESCRIBE, ALTER_CONFIGS implies
  DESCRIBE_CONFIGS; a DENY of READ does not deny DESCRIBE);
* a resource with no ACL at all is allowed only with ``allow.everyone.if.no.acl.found``.
"""

from __future__ import annotations

import enum
from collections import defaultdict
from collections.abc import Iterable

from kafka_protocol.exceptions import ProtocolError
from metastore.types import AclBinding, AclBindingFilter

CLUSTER_NAME = "kafka-cluster"
WILDCARD = "*"
WILDCARD_PRINCIPAL = "User:*"


class ResourceType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class AclOperation(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14


class AclPermission(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


Op = AclOperation
RT = ResourceType

# An ALLOW of any of these grants the key (Kafka's AclOperation javadoc).
IMPLIED_BY: dict[int, frozenset[int]] = {
    op: frozenset({op, Op.ALL}) for op in AclOperation if op not in (Op.UNKNOWN, Op.ANY)
}
IMPLIED_BY[Op.DESCRIBE] = frozenset({Op.DESCRIBE, Op.READ, Op.WRITE, Op.DELETE, Op.ALTER, Op.ALL})
IMPLIED_BY[Op.DESCRIBE_CONFIGS] = frozenset({Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS, Op.ALL})

# The operations each resource type has (authorized-operations bit sets).
OPERATIONS: dict[int, tuple[AclOperation, ...]] = {
    RT.TOPIC: (Op.READ, Op.WRITE, Op.CREATE, Op.DESCRIBE, Op.DELETE, Op.ALTER, Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS),
    RT.GROUP: (Op.READ, Op.DESCRIBE, Op.DELETE),
    RT.CLUSTER: (
        Op.CREATE, Op.CLUSTER_ACTION, Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS, Op.IDEMPOTENT_WRITE, Op.ALTER,
        Op.DESCRIBE,
    ),
    RT.TRANSACTIONAL_ID: (Op.DESCRIBE, Op.WRITE),
}  # fmt: skip


def _known(cls: type[enum.IntEnum], code: int) -> int:
    """``code`` if ``cls`` names it, else UNKNOWN (0), like Kafka's ``fromCode``."""
    try:
        return int(cls(code))
    except ValueError:
        return 0


def validate_binding(b: AclBinding) -> str | None:
    """Why CreateAcls must refuse ``b`` (INVALID_REQUEST), or None (Kafka's AclControlManager rules)."""
    if _known(ResourceType, b.resource_type) in (RT.UNKNOWN, RT.ANY):
        return f"Invalid resourceType {b.resource_type}"
    if b.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
        return f"Invalid patternType {b.pattern_type}"
    if _known(AclOperation, b.operation) in (Op.UNKNOWN, Op.ANY):
        return f"Invalid operation {b.operation}"
    if b.permission not in (AclPermission.DENY, AclPermission.ALLOW):
        return f"Invalid permissionType {b.permission}"
    if not b.resource_name:
        return "Resource name should not be empty"
    if b.resource_type == RT.CLUSTER and b.resource_name != CLUSTER_NAME:
        return f"The only valid name for the CLUSTER resource is {CLUSTER_NAME}"
    kind, sep, name = b.principal.partition(":")
    if not sep or not kind or not name:
        return f"Could not parse principal from `{b.principal}` (no colon is present separating the principal type from the principal name)"
    if not b.host:
        return "Host should not be empty"
    return None


def check_no_unknown(kind: str, *codes: int) -> None:
    """Kafka's request classes refuse an UNKNOWN (0) resource type, pattern type,
    operation or permission while parsing (IllegalArgumentException), and the broker
    closes the connection: so do we (ProtocolError closes it, with a log line)."""
    if 0 in codes:
        raise ProtocolError(f"{kind} contains UNKNOWN elements")


def validate_filter(f: AclBindingFilter) -> str | None:
    """Why a Describe/DeleteAcls filter is invalid (an UNKNOWN element), or None."""
    if _known(ResourceType, f.resource_type) == RT.UNKNOWN:
        return f"Invalid resourceTypeFilter {f.resource_type}"
    if _known(PatternType, f.pattern_type) == PatternType.UNKNOWN:
        return f"Invalid patternTypeFilter {f.pattern_type}"
    if _known(AclOperation, f.operation) == Op.UNKNOWN:
        return f"Invalid operation {f.operation}"
    if _known(AclPermission, f.permission) == AclPermission.UNKNOWN:
        return f"Invalid permissionType {f.permission}"
    return None


class AclIndex:
    """The bindings, indexed by (resource type, name) for literal patterns and by
    (resource type, prefix) for prefixed ones; a check is a few dict lookups."""

    def __init__(self, bindings: Iterable[AclBinding] = ()) -> None:
        self.literal: dict[tuple[int, str], list[AclBinding]] = defaultdict(list)
        self.prefixed: dict[tuple[int, str], list[AclBinding]] = defaultdict(list)
        self.prefix_lengths: dict[int, list[int]] = defaultdict(list)
        self.by_type: dict[int, list[AclBinding]] = defaultdict(list)
        self.count = 0
        for b in bindings:
            self.count += 1
            self.by_type[b.resource_type].append(b)
            if b.pattern_type == PatternType.LITERAL:
                self.literal[(b.resource_type, b.resource_name)].append(b)
            elif b.pattern_type == PatternType.PREFIXED:
                self.prefixed[(b.resource_type, b.resource_name)].append(b)
        lengths: dict[int, set[int]] = defaultdict(set)
        for rt, name in self.prefixed:
            lengths[rt].add(len(name))
        self.prefix_lengths.update({rt: sorted(ls) for rt, ls in lengths.items()})

    def matching(self, rtype: int, name: str) -> list[AclBinding]:
        """Every binding whose pattern applies to resource ``name`` of type ``rtype``."""
        out: list[AclBinding] = []
        lit = self.literal
        out.extend(lit.get((rtype, name), ()))
        if name != WILDCARD:
            out.extend(lit.get((rtype, WILDCARD), ()))
        pre = self.prefixed
        for n in self.prefix_lengths.get(rtype, ()):
            if n > len(name):
                break
            out.extend(pre.get((rtype, name[:n]), ()))
        return out

    def check(self, principal: str, host: str, op: int, rtype: int, name: str) -> bool | None:
        """True (allowed), False (denied) or None (no ACL on this resource at all)."""
        acls = self.matching(rtype, name)
        if not acls:
            return None
        allowed = False
        grants = IMPLIED_BY.get(op, frozenset({op, Op.ALL}))
        for a in acls:
            if a.principal != principal and a.principal != WILDCARD_PRINCIPAL:
                continue
            if a.host != host and a.host != WILDCARD:
                continue
            if a.permission == AclPermission.DENY:
                if a.operation == op or a.operation == Op.ALL:
                    return False
            elif a.permission == AclPermission.ALLOW and a.operation in grants:
                allowed = True
        return allowed

    def any_allowed(self, principal: str, host: str, op: int, rtype: int) -> bool:
        """Kafka's ``authorizeByResourceType``: may the caller ``op`` on at least one
        resource of ``rtype``? An ALLOW counts unless a DENY covers all it allows."""

        def applies(a: AclBinding, perm: int) -> bool:
            return (
                a.permission == perm
                and a.principal in (principal, WILDCARD_PRINCIPAL)
                and a.host in (host, WILDCARD)
                and a.operation in (op, Op.ALL)
            )

        acls = self.by_type.get(rtype, ())
        deny_lit = {a.resource_name for a in acls if applies(a, AclPermission.DENY) and a.pattern_type == PatternType.LITERAL}
        if WILDCARD in deny_lit:
            return False
        deny_pre = [a.resource_name for a in acls if applies(a, AclPermission.DENY) and a.pattern_type == PatternType.PREFIXED]

        def dominated(name: str) -> bool:
            return any(name.startswith(p) for p in deny_pre)

        for a in acls:
            if not applies(a, AclPermission.ALLOW):
                continue
            if a.pattern_type == PatternType.PREFIXED and not dominated(a.resource_name):
                return True
            if a.pattern_type == PatternType.LITERAL and (
                a.resource_name == WILDCARD or (a.resource_name not in deny_lit and not dominated(a.resource_name))
            ):
                return True
        return False
