"""Fuzz of the ACL request surfaces (CreateAcls, DescribeAcls, DeleteAcls) on the wire.

Random requests - every int8 value for resource type, pattern type, operation and
permission, null and odd names/principals/hosts, every version - are encoded by
our codec and sent to a real agent with an authorizer. A request with an
UNKNOWN (0) code closes the connection (Kafka's parser refuses it); every other
answer carries a Kafka error code (0 or INVALID_REQUEST as Kafka would) on a
connection that stays up, and the stored ACLs must equal a model: a creation is
stored iff Kafka's validation accepts it, a delete removes what its filters
match, a describe lists what its filter matches. Then huge requests: 20,000 creations and filters, 100 KB names.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent.security.acl import validate_binding, validate_filter
from kafka_protocol.errors import ErrorCode as E
from kafka_protocol.messages import CreateAclsRequest, DeleteAclsRequest, DescribeAclsRequest
from metastore.types import AclBinding, AclBindingFilter
from tests.agent.test_acls_wire import Client

Creation = CreateAclsRequest.AclCreation
Filter = DeleteAclsRequest.DeleteAclsFilter

int8 = st.one_of(st.integers(0, 8), st.integers(-128, 127))
names = st.one_of(st.sampled_from(["", "*", "t", "t1", "pay.", "kafka-cluster", "ü"]), st.text(max_size=20))
principals = st.one_of(st.sampled_from(["User:a", "User:*", "alice", ":x", "User:", ""]), st.text(max_size=12))
hosts = st.sampled_from(["*", "127.0.0.1", "", "::1"])


def opt(s: Any) -> Any:
    return st.one_of(st.none(), s)


creations = st.builds(
    Creation, resource_type=int8, resource_name=names, resource_pattern_type=int8, principal=principals,
    host=hosts, operation=int8, permission_type=int8,
)  # fmt: skip
filters = st.builds(
    Filter, resource_type_filter=int8, resource_name_filter=opt(names), pattern_type_filter=int8,
    principal_filter=opt(principals), host_filter=opt(hosts), operation=int8, permission_type=int8,
)  # fmt: skip
steps = st.lists(
    st.one_of(
        st.tuples(st.just("create"), st.lists(creations, max_size=6), st.integers(0, 3)),
        st.tuples(st.just("delete"), st.lists(filters, max_size=3), st.integers(0, 3)),
        st.tuples(st.just("describe"), filters, st.integers(0, 3)),
    ),
    max_size=8,
)

_AGENTS: dict[int, Any] = {}


def as_filter(f: Filter, version: int) -> AclBindingFilter:
    pattern = 3 if version == 0 and f.pattern_type_filter == 1 else f.pattern_type_filter
    return AclBindingFilter(f.resource_type_filter, f.resource_name_filter, pattern, f.principal_filter, f.host_filter,
                            f.operation, f.permission_type)  # fmt: skip


def _has_unknown(kind: str, body: Any) -> bool:
    if kind == "create":
        return any(0 in (c.resource_type, c.resource_pattern_type, c.operation, c.permission_type) for c in body)
    fs = body if kind == "delete" else [body]
    return any(0 in (f.resource_type_filter, f.pattern_type_filter, f.operation, f.permission_type) for f in fs)


def _describe(f: Filter) -> DescribeAclsRequest:
    return DescribeAclsRequest(
        resource_type_filter=f.resource_type_filter, resource_name_filter=f.resource_name_filter,
        pattern_type_filter=f.pattern_type_filter, principal_filter=f.principal_filter, host_filter=f.host_filter,
        operation=f.operation, permission_type=f.permission_type,
    )  # fmt: skip


def describe_all(c: Client) -> set[AclBinding]:
    r = c.call(DescribeAclsRequest(resource_type_filter=1, resource_name_filter=None, pattern_type_filter=1,
                                   principal_filter=None, host_filter=None, operation=1, permission_type=1), 3)  # fmt: skip
    assert r.error_code == 0
    return {AclBinding(res.resource_type, res.resource_name, res.pattern_type, a.principal, a.host, a.operation,
                       a.permission_type) for res in r.resources for a in res.acls}  # fmt: skip


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=steps)
def test_acl_requests_fuzz(agent_factory: Any, steps: list[Any]) -> None:
    agent = _AGENTS.get(id(agent_factory))  # one agent for every example of a run
    if agent is None:
        agent = _AGENTS[id(agent_factory)] = agent_factory(authorizer="acl", super_users="User:admin")
    c = Client(agent, "User:admin")
    try:
        c.call(DeleteAclsRequest(filters=[Filter(resource_type_filter=1, resource_name_filter=None, pattern_type_filter=1,
               principal_filter=None, host_filter=None, operation=1, permission_type=1)]), 3)  # fmt: skip
        model: set[AclBinding] = set()
        for kind, body, version in steps:
            if version == 0:  # v0 has no pattern type on the wire: LITERAL
                for x in body if kind != "describe" else [body]:
                    if kind == "create":
                        x.resource_pattern_type = 3
                    elif x.pattern_type_filter not in (1, 3):
                        x.pattern_type_filter = 3
            if _has_unknown(kind, body):
                # Kafka's parser refuses UNKNOWN (0) codes and closes the connection: so must we.
                req: Any = (CreateAclsRequest(creations=body) if kind == "create" else DeleteAclsRequest(filters=body)
                            if kind == "delete" else _describe(body))  # fmt: skip
                with pytest.raises((AssertionError, OSError)):
                    c.call(req, version)
                c.close()
                c = Client(agent, "User:admin")
                assert describe_all(c) == model
                continue
            if kind == "create":
                res = c.call(CreateAclsRequest(creations=body), version)
                assert len(res.results) == len(body)
                for cr, r in zip(body, res.results, strict=True):
                    b = AclBinding(cr.resource_type, cr.resource_name, cr.resource_pattern_type, cr.principal, cr.host,
                                   cr.operation, cr.permission_type)  # fmt: skip
                    expected = E.INVALID_REQUEST if validate_binding(b) else 0
                    assert r.error_code == expected, (b, r)
                    if not expected:
                        model.add(b)
            elif kind == "delete":
                res = c.call(DeleteAclsRequest(filters=body), version)
                assert len(res.filter_results) == len(body)
                gone: set[AclBinding] = set()
                for f, r in zip(body, res.filter_results, strict=True):
                    flt = as_filter(f, version)
                    if validate_filter(flt):
                        assert r.error_code == E.INVALID_REQUEST and r.matching_acls == []
                        continue
                    assert r.error_code == 0
                    got = {AclBinding(m.resource_type, m.resource_name, m.pattern_type, m.principal, m.host,
                                      m.operation, m.permission_type) for m in r.matching_acls}  # fmt: skip
                    assert got == {b for b in model - gone if flt.matches(b)}
                    gone |= got
                model -= gone
            else:
                res = c.call(_describe(body), version)
                flt = as_filter(body, version)
                assert res.error_code == 0  # a code Kafka does not name matches nothing
                got = {(r.resource_type, r.resource_name, r.pattern_type, a.principal, a.host, a.operation,
                        a.permission_type) for r in res.resources for a in r.acls}  # fmt: skip
                assert got == {tuple(b) for b in model if flt.matches(b)}
            assert describe_all(c) == model
        c.alive()
    finally:
        c.close()


def test_huge_acl_requests(agent_factory: Any) -> None:
    agent = agent_factory(authorizer="acl", super_users="User:admin")
    c = Client(agent, "User:admin")
    big = "x" * 100_000
    many = [Creation(resource_type=2, resource_name=f"t{i}", resource_pattern_type=3, principal="User:a", host="*",
                     operation=3, permission_type=3) for i in range(20_000)]  # fmt: skip
    many.append(Creation(resource_type=2, resource_name=big, resource_pattern_type=4, principal="User:" + big,
                         host=big, operation=3, permission_type=3))  # fmt: skip
    res = c.call(CreateAclsRequest(creations=many), 3)
    assert {r.error_code for r in res.results} <= {0, E.UNKNOWN_SERVER_ERROR}
    assert len(res.results) == len(many)
    flt = Filter(resource_type_filter=2, resource_name_filter=big, pattern_type_filter=2, principal_filter=None,
                 host_filter=None, operation=1, permission_type=1)  # fmt: skip
    small = Filter(resource_type_filter=2, resource_name_filter="t7", pattern_type_filter=2, principal_filter=None,
                   host_filter=None, operation=1, permission_type=1)  # fmt: skip
    d = c.call(DeleteAclsRequest(filters=[flt] + [small] * 20_000), 3)
    assert len(d.filter_results) == 20_001 and all(r.error_code == 0 for r in d.filter_results)
    assert len(d.filter_results[0].matching_acls) == 1 and len(d.filter_results[1].matching_acls) == 1
    assert describe_all(c) <= {AclBinding(2, f"t{i}", 3, "User:a", "*", 3, 3) for i in range(20_000)}
    c.alive()
    # Unprivileged callers get an error code for the same, never a dropped connection.
    anon = Client(agent, None)
    assert {r.error_code for r in anon.call(CreateAclsRequest(creations=many), 3).results} == {E.CLUSTER_AUTHORIZATION_FAILED}
    anon.alive()
