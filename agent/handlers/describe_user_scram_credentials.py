"""DescribeUserScramCredentials (key 50): which SCRAM mechanisms (and iterations) each user has.

Reads the metastore's ``scram_credentials`` (written by AlterUserScramCredentials
and ``floe users``); never returns salts or keys. No users named (null or
empty) = every user with a credential; a named user without any is
RESOURCE_NOT_FOUND, a user named twice DUPLICATE_RESOURCE, as in Kafka.
Authorization (DESCRIBE on CLUSTER) is the authorizer's (acl lane).

Versions: 0 (flexible).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agent.handlers.registry import handler
from agent.security.acl import AclOperation
from agent.security.authorizer import cluster_allowed
from kafka_protocol.errors import ErrorCode
from kafka_protocol.messages import (
    DescribeUserScramCredentialsRequest,
    DescribeUserScramCredentialsResponse,
)

if TYPE_CHECKING:
    from agent.broker import Broker
    from agent.connection import RequestContext

MECHANISM_IDS = {"SCRAM-SHA-256": 1, "SCRAM-SHA-512": 2}
Result = DescribeUserScramCredentialsResponse.DescribeUserScramCredentialsResult
Info = Result.CredentialInfo


@handler(DescribeUserScramCredentialsRequest)
async def handle(
    broker: Broker, ctx: RequestContext, req: DescribeUserScramCredentialsRequest
) -> DescribeUserScramCredentialsResponse:
    if not cluster_allowed(broker, ctx, AclOperation.DESCRIBE):
        return DescribeUserScramCredentialsResponse(
            throttle_time_ms=0, error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
            error_message="Cluster authorization failed.", results=[],
        )  # fmt: skip
    names = [u.name for u in req.users] if req.users else None
    creds = await broker.meta.list_scram_credentials(sorted(set(names)) if names is not None else None)
    by_user: dict[str, list[Info]] = {}
    for c in creds:
        by_user.setdefault(c.user, []).append(Info(mechanism=MECHANISM_IDS.get(c.mechanism, 0), iterations=c.iterations))
    results: list[Result] = []
    if names is None:
        results = [Result(user=u, error_code=0, error_message=None, credential_infos=i) for u, i in by_user.items()]
    else:
        for u in dict.fromkeys(names):
            if names.count(u) > 1:
                results.append(Result(user=u, error_code=ErrorCode.DUPLICATE_RESOURCE,
                                      error_message=f"Cannot describe SCRAM credentials for the same user twice in a single request: {u}"))  # fmt: skip
            elif u not in by_user:
                results.append(Result(user=u, error_code=ErrorCode.RESOURCE_NOT_FOUND,
                                      error_message=f"Attempt to describe a user credential that does not exist: {u}"))  # fmt: skip
            else:
                results.append(Result(user=u, error_code=0, error_message=None, credential_infos=by_user[u]))
    return DescribeUserScramCredentialsResponse(throttle_time_ms=0, error_code=0, error_message=None, results=results)
