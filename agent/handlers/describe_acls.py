"""DescribeAcls (key 29).

Behavior: lists the ACL bindings one filter matches (read from the metastore,
so a binding just created through another agent is listed), grouped by
resource pattern. Kafka's filter semantics (metastore.types.AclBindingFilter):
a null name/principal/host and ANY codes match everything, pattern type ANY
matches either pattern type with the exact name, MATCH every pattern that
applies to the named resource (literal, ``*``, covering prefixes). Needs
DESCRIBE on the CLUSTER (else CLUSTER_AUTHORIZATION_FAILED); a code 0
(UNKNOWN) closes the connection as Kafka's request parser does, another code
Kafka does not name matches nothing (Kafka answers no ACLs); without an
authorizer SECURITY_DISABLED.

Versions: 0-3 (v0 is LITERAL only, its ANY meaning LITERAL; v2+ flexible).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agent.handlers.registry import handler
from agent.security.acl import AclOperation, PatternType, check_no_unknown
from agent.security.authorizer import cluster_allowed
from kafka_protocol.errors import ErrorCode
from kafka_protocol.messages import DescribeAclsRequest, DescribeAclsResponse
from metastore import MetastoreError
from metastore.types import AclBindingFilter

if TYPE_CHECKING:
    from agent.broker import Broker
    from agent.connection import RequestContext

Resource = DescribeAclsResponse.DescribeAclsResource
Acl = DescribeAclsResponse.DescribeAclsResource.AclDescription


def _error(code: int, message: str) -> DescribeAclsResponse:
    return DescribeAclsResponse(throttle_time_ms=0, error_code=code, error_message=message, resources=[])


@handler(DescribeAclsRequest)
async def handle(broker: Broker, ctx: RequestContext, req: DescribeAclsRequest) -> DescribeAclsResponse:
    check_no_unknown(
        "DescribeAclsRequest", req.resource_type_filter, req.pattern_type_filter, req.operation, req.permission_type
    )
    if broker.authorizer is None:
        return _error(ErrorCode.SECURITY_DISABLED, "No Authorizer is configured.")
    if not cluster_allowed(broker, ctx, AclOperation.DESCRIBE):
        return _error(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "Cluster authorization failed.")
    pattern = req.pattern_type_filter
    if ctx.header.api_version == 0 and pattern == PatternType.ANY:
        pattern = PatternType.LITERAL
    flt = AclBindingFilter(
        req.resource_type_filter, req.resource_name_filter, pattern, req.principal_filter, req.host_filter,
        req.operation, req.permission_type,
    )  # fmt: skip
    try:
        _, bindings = await broker.meta.list_acls(flt)
    except MetastoreError as e:
        return _error(ErrorCode.UNKNOWN_SERVER_ERROR, f"metastore: {e}"[:500])
    resources: dict[tuple[int, str, int], Resource] = {}
    for b in bindings:
        key = (b.resource_type, b.resource_name, b.pattern_type)
        r = resources.get(key)
        if r is None:
            r = resources[key] = Resource(
                resource_type=b.resource_type, resource_name=b.resource_name, pattern_type=b.pattern_type, acls=[]
            )
        r.acls.append(Acl(principal=b.principal, host=b.host, operation=b.operation, permission_type=b.permission))
    return DescribeAclsResponse(throttle_time_ms=0, error_code=0, error_message=None, resources=list(resources.values()))
