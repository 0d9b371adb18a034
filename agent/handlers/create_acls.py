"""CreateAcls (key 30).

Behavior: stores the ACL bindings of the request in the metastore (an existing
binding is kept; Kafka treats it as created) and reloads this agent's ACL cache
at once; the other agents see the change at their next poll (<= acl_refresh_ms).
Needs ALTER on the CLUSTER (else CLUSTER_AUTHORIZATION_FAILED per creation).
Without an authorizer (``authorizer=none``) every creation gets
SECURITY_DISABLED, as Kafka answers without ``authorizer.class.name``.
A binding Kafka would refuse (UNKNOWN/ANY resource type, operation or
permission, a pattern type other than LITERAL/PREFIXED, an empty name, a
CLUSTER name other than ``kafka-cluster``, a principal without ``Type:``)
gets INVALID_REQUEST with Kafka's message; the others are still created. A
code 0 (UNKNOWN) closes the connection, as Kafka's request parser does.

Versions: 0-3 (v0 is LITERAL only; v2+ flexible).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agent.handlers.registry import handler
from agent.security.acl import AclOperation, check_no_unknown, validate_binding
from agent.security.authorizer import cluster_allowed
from kafka_protocol.errors import ErrorCode
from kafka_protocol.messages import CreateAclsRequest, CreateAclsResponse
from metastore import MetastoreError
from metastore.types import AclBinding

if TYPE_CHECKING:
    from agent.broker import Broker
    from agent.connection import RequestContext

Result = CreateAclsResponse.AclCreationResult


def _all(req: CreateAclsRequest, code: int, message: str) -> CreateAclsResponse:
    return CreateAclsResponse(
        throttle_time_ms=0, results=[Result(error_code=code, error_message=message) for _ in req.creations]
    )


@handler(CreateAclsRequest)
async def handle(broker: Broker, ctx: RequestContext, req: CreateAclsRequest) -> CreateAclsResponse:
    for c in req.creations:
        check_no_unknown("CreateAclsRequest", c.resource_type, c.resource_pattern_type, c.operation, c.permission_type)
    if broker.authorizer is None:
        return _all(req, ErrorCode.SECURITY_DISABLED, "No Authorizer is configured.")
    if not cluster_allowed(broker, ctx, AclOperation.ALTER):
        return _all(req, ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "Cluster authorization failed.")
    results = [Result(error_code=0, error_message=None) for _ in req.creations]
    valid: list[AclBinding] = []
    valid_at: list[int] = []
    for i, c in enumerate(req.creations):
        b = AclBinding(
            c.resource_type, c.resource_name, c.resource_pattern_type, c.principal, c.host, c.operation,
            c.permission_type,
        )  # fmt: skip
        why = validate_binding(b)
        if why is not None:
            results[i] = Result(error_code=ErrorCode.INVALID_REQUEST, error_message=why)
            continue
        valid.append(b)
        valid_at.append(i)
    if valid:
        try:
            await broker.meta.create_acls(valid)
            await broker.authorizer.reload()
        except MetastoreError as e:
            for i in valid_at:
                results[i] = Result(error_code=ErrorCode.UNKNOWN_SERVER_ERROR, error_message=f"metastore: {e}"[:500])
    return CreateAclsResponse(throttle_time_ms=0, results=results)
