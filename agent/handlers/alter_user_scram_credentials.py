"""AlterUserScramCredentials (key 51): create, rotate and delete SCRAM credentials.

Sits between admin clients (Java AdminClient ``alterUserScramCredentials``,
``kafka-configs --alter --add-config SCRAM-SHA-512=[...]``) and the metastore's
``scram_credentials`` (agent.security.sasl.scram reads them per authentication).
The client sends the salt and the salted password (never the password); the
agent derives StoredKey/ServerKey and stores those. Kafka's rules: mechanism 1 =
SCRAM-SHA-256, 2 = SCRAM-SHA-512 (else UNSUPPORTED_SASL_MECHANISM); iterations
in [4096, 16384] and a non-empty user (else UNACCEPTABLE_CREDENTIAL); a user named
twice for one mechanism is DUPLICATE_RESOURCE; deleting a missing credential is
RESOURCE_NOT_FOUND. One result per user (its first error). Authorization (ALTER
on CLUSTER) is the authorizer's (acl lane).

Versions: 0 (flexible).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agent.handlers.registry import handler
from agent.security.acl import AclOperation
from agent.security.authorizer import cluster_allowed
from agent.security.sasl.scram import MAX_ITERATIONS, MIN_ITERATIONS, credential_from_salted
from kafka_protocol.errors import ErrorCode
from kafka_protocol.messages import (
    AlterUserScramCredentialsRequest,
    AlterUserScramCredentialsResponse,
)

if TYPE_CHECKING:
    from agent.broker import Broker
    from agent.connection import RequestContext

MECHANISMS = {1: "SCRAM-SHA-256", 2: "SCRAM-SHA-512"}
Result = AlterUserScramCredentialsResponse.AlterUserScramCredentialsResult


@handler(AlterUserScramCredentialsRequest)
async def handle(
    broker: Broker, ctx: RequestContext, req: AlterUserScramCredentialsRequest
) -> AlterUserScramCredentialsResponse:
    errors: dict[str, tuple[int, str]] = {}
    users: list[str] = []
    seen: dict[tuple[str, int], int] = {}

    def error(user: str, code: int, message: str) -> None:
        errors.setdefault(user, (code, message))

    items = [(d.name, d.mechanism, None) for d in req.deletions] + [(u.name, u.mechanism, u) for u in req.upsertions]
    if not cluster_allowed(broker, ctx, AclOperation.ALTER):  # else anyone could set a super user's password
        names = list(dict.fromkeys(name for name, _, _ in items))
        return AlterUserScramCredentialsResponse(throttle_time_ms=0, results=[
            Result(user=u, error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED, error_message="Cluster authorization failed.")
            for u in names
        ])  # fmt: skip
    for name, mech, _ in items:
        if name not in users:
            users.append(name)
        seen[(name, mech)] = seen.get((name, mech), 0) + 1
    for name, mech, up in items:
        if seen[(name, mech)] > 1:
            error(name, ErrorCode.DUPLICATE_RESOURCE, "A user credential cannot be altered twice in the same request")
        elif mech not in MECHANISMS:
            error(name, ErrorCode.UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism")
        elif not name:
            error(name, ErrorCode.UNACCEPTABLE_CREDENTIAL, "Username must not be empty")
        elif up is not None and up.iterations < MIN_ITERATIONS:
            error(name, ErrorCode.UNACCEPTABLE_CREDENTIAL, "Too few iterations")
        elif up is not None and up.iterations > MAX_ITERATIONS:
            error(name, ErrorCode.UNACCEPTABLE_CREDENTIAL, "Too many iterations")
        elif (up is not None and not up.salt) or (up is not None and not up.salted_password):
            error(name, ErrorCode.UNACCEPTABLE_CREDENTIAL, "Salt and salted password must not be empty")
    meta = broker.meta
    for name, mech, up in items:
        if name in errors:
            continue
        mechanism = MECHANISMS[mech]
        if up is None:
            if await meta.get_scram_credential(name, mechanism) is None:
                error(name, ErrorCode.RESOURCE_NOT_FOUND, "Attempt to delete a user credential that does not exist")
    for name, mech, up in items:
        if name in errors:
            continue
        mechanism = MECHANISMS[mech]
        if up is None:
            await meta.delete_scram_credential(name, mechanism)
        else:
            cred = credential_from_salted(name, mechanism, bytes(up.salted_password), bytes(up.salt), up.iterations)
            await meta.put_scram_credential(cred)
    return AlterUserScramCredentialsResponse(
        throttle_time_ms=0,
        results=[
            Result(user=u, error_code=errors.get(u, (0, ""))[0], error_message=errors[u][1] if u in errors else None)
            for u in users
        ],
    )
