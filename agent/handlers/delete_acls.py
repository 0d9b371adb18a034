"""DeleteAcls (key 31).

Behavior: deletes every ACL binding one of the filters matches, in one
metastore transaction, and answers per filter the bindings it deleted (a
binding two filters match is listed under the first, as Kafka does); this
agent's ACL cache is reloaded at once, the others' at their next poll. Filter
semantics as in DescribeAcls. Needs ALTER on the CLUSTER (else
CLUSTER_AUTHORIZATION_FAILED per filter); a filter with a code Kafka does not
name gets INVALID_REQUEST and deletes nothing, a code 0 (UNKNOWN) closes the
connection as Kafka's request parser does; without an authorizer
SECURITY_DISABLED.

Versions: 0-3 (v0 is LITERAL only, its ANY meaning LITERAL; v2+ flexible).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agent.handlers.registry import handler
from agent.security.acl import AclOperation, PatternType, check_no_unknown, validate_filter
from agent.security.authorizer import cluster_allowed
from kafka_protocol.errors import ErrorCode
from kafka_protocol.messages import DeleteAclsRequest, DeleteAclsResponse
from metastore import MetastoreError
from metastore.types import AclBindingFilter

if TYPE_CHECKING:
    from agent.broker import Broker
    from agent.connection import RequestContext

Result = DeleteAclsResponse.DeleteAclsFilterResult
Matching = DeleteAclsResponse.DeleteAclsFilterResult.DeleteAclsMatchingAcl


def _all(req: DeleteAclsRequest, code: int, message: str) -> DeleteAclsResponse:
    return DeleteAclsResponse(
        throttle_time_ms=0,
        filter_results=[Result(error_code=code, error_message=message, matching_acls=[]) for _ in req.filters],
    )


@handler(DeleteAclsRequest)
async def handle(broker: Broker, ctx: RequestContext, req: DeleteAclsRequest) -> DeleteAclsResponse:
    for f in req.filters:
        check_no_unknown("DeleteAclsRequest", f.resource_type_filter, f.pattern_type_filter, f.operation, f.permission_type)
    if broker.authorizer is None:
        return _all(req, ErrorCode.SECURITY_DISABLED, "No Authorizer is configured.")
    if not cluster_allowed(broker, ctx, AclOperation.ALTER):
        return _all(req, ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "Cluster authorization failed.")
    v0 = ctx.header.api_version == 0
    results = [Result(error_code=0, error_message=None, matching_acls=[]) for _ in req.filters]
    valid: list[AclBindingFilter] = []
    valid_at: list[int] = []
    for i, f in enumerate(req.filters):
        pattern = PatternType.LITERAL if v0 and f.pattern_type_filter == PatternType.ANY else f.pattern_type_filter
        flt = AclBindingFilter(
            f.resource_type_filter, f.resource_name_filter, pattern, f.principal_filter, f.host_filter,
            f.operation, f.permission_type,
        )  # fmt: skip
        why = validate_filter(flt)
        if why is not None:
            results[i] = Result(error_code=ErrorCode.INVALID_REQUEST, error_message=why, matching_acls=[])
            continue
        valid.append(flt)
        valid_at.append(i)
    if valid:
        try:
            deleted = await broker.meta.delete_acls(valid)
            await broker.authorizer.reload()
        except MetastoreError as e:
            for i in valid_at:
                results[i] = Result(error_code=ErrorCode.UNKNOWN_SERVER_ERROR, error_message=f"metastore: {e}"[:500])
            return DeleteAclsResponse(throttle_time_ms=0, filter_results=results)
        for i, bindings in zip(valid_at, deleted, strict=True):
            results[i].matching_acls = [
                Matching(
                    error_code=0, error_message=None, resource_type=b.resource_type, resource_name=b.resource_name,
                    pattern_type=b.pattern_type, principal=b.principal, host=b.host, operation=b.operation,
                    permission_type=b.permission,
                )
                for b in bindings
            ]
    return DeleteAclsResponse(throttle_time_ms=0, filter_results=results)
