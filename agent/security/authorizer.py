"""The authorizer: one question per resource, asked at the top of every handler.

Where it sits: ``broker.authorizer`` (None with ``authorizer=none``, the
default and ``floe dev``: then :func:`allowed` returns True after one attribute
test and nothing else changes). With ``authorizer=acl`` it holds the ACLs of
the metastore in an :class:`~agent.security.acl.AclIndex` and memoises every
decision per (principal, host, operation, resource), so a repeated check (every
produce of a connection) is one dict lookup. The memo and the index are
replaced together when the metastore's ACL version moves: each agent polls
:meth:`Metastore.acl_version` every ``acl_refresh_ms`` (default 500 ms), and the
agent that made a change reloads at once, so every agent enforces a change
within a second. Until the first load succeeds everything but super users is
refused (fail closed).

Handlers call :func:`allowed` (one resource) or :func:`allowed_any` (Kafka's
``authorizeByResourceType``, used by InitProducerId without a transactional id).
A request relayed from another agent (agent.cluster.forward, no connection)
was authorized there before it was relayed, and is authorized again here with
the principal the relay carried (``ctx.attrs["principal"]``, issue 42), so a
peer credential alone does not skip the ACLs.

The handlers pass their broker in, but this module only needs two things from
it, named by :class:`AuthSource`; it does not import the Broker (which imports
this module to build its authorizer).
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from typing import TYPE_CHECKING, Any, Protocol

from agent.security.acl import OPERATIONS, AclIndex, AclOperation, ResourceType
from agent.security.principal import KafkaPrincipal
from agent.tasks import cancel_and_wait

if TYPE_CHECKING:
    from agent.connection import RequestContext
    from metastore import Metastore
    from metastore.types import TopicInfo

log = logging.getLogger(__name__)
audit = logging.getLogger("floe.authorizer")

_MEMO_MAX = 100_000

Op = AclOperation
RT = ResourceType


def parse_super_users(text: str) -> frozenset[str]:
    """``"User:admin;User:floe"`` -> {"User:admin", "User:floe"} (Kafka's ``super.users``)."""
    out = set()
    for item in text.replace(",", ";").split(";"):
        item = item.strip()
        if item:
            out.add(str(KafkaPrincipal.parse(item)))
    return frozenset(out)


class Authorizer:
    def __init__(
        self,
        meta: Metastore,
        *,
        super_users: frozenset[str] = frozenset(),
        allow_everyone_if_no_acl_found: bool = False,
        refresh_s: float = 0.5,
    ) -> None:
        self.meta = meta
        self.super_users = super_users
        self.allow_everyone = allow_everyone_if_no_acl_found
        self.refresh_s = refresh_s
        self.index = AclIndex()
        self.version = -1  # nothing loaded yet: refuse all but super users
        self._memo: dict[tuple[str, str, int, int, str], bool] = {}
        self._task: asyncio.Task[None] | None = None
        self._lock = asyncio.Lock()
        self.reloads = 0

    # -- life cycle ---------------------------------------------------------------------

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(), name="acl-refresh")

    async def stop(self) -> None:
        await cancel_and_wait(self._task)
        self._task = None

    async def _run(self) -> None:
        while True:
            try:
                if await self.meta.acl_version() != self.version:
                    await self.reload()
            except asyncio.CancelledError:
                raise
            except Exception as e:  # metastore down: keep the ACLs we have
                log.warning("ACL refresh failed: %s", e)
            await asyncio.sleep(self.refresh_s)

    async def reload(self) -> None:
        """Read every binding; replace the index and forget the memoised decisions."""
        async with self._lock:
            version, bindings = await self.meta.list_acls()
            self.index = AclIndex(bindings)
            self._memo = {}
            self.version = version
            self.reloads += 1
            log.debug("ACLs reloaded: version %d, %d bindings", version, len(bindings))

    # -- decisions ----------------------------------------------------------------------

    def authorize(self, principal: str, host: str, op: int, rtype: int, name: str) -> bool:
        key = (principal, host, op, rtype, name)
        hit = self._memo.get(key)
        if hit is not None:
            return hit
        if principal in self.super_users:
            ok = True
        elif self.version < 0:
            ok = False
        else:
            res = self.index.check(principal, host, op, rtype, name)
            ok = self.allow_everyone if res is None else res
        if len(self._memo) >= _MEMO_MAX:
            self._memo = {}
        self._memo[key] = ok
        if not ok:
            audit.info(
                "Principal = %s is Denied Operation = %s from host = %s on resource = %s:%s",
                principal, Op(op).name, host, RT(rtype).name, name,
            )  # fmt: skip
        return ok

    def authorize_any(self, principal: str, host: str, op: int, rtype: int) -> bool:
        if principal in self.super_users:
            return True
        if self.version < 0:
            return False
        if self.allow_everyone and not self.index.by_type.get(rtype):
            return True
        return self.index.any_allowed(principal, host, op, rtype)

    def operations(self, principal: str, host: str, rtype: int, name: str) -> int:
        """Kafka's authorized-operations bit set (bit = operation code) on one resource."""
        bits = 0
        for op in OPERATIONS.get(rtype, ()):
            if self.authorize(principal, host, op, rtype, name):
                bits |= 1 << int(op)
        return bits


# -- what handlers call -------------------------------------------------------------------


class AuthSource(Protocol):
    """What the checks below need from the agent (the Broker satisfies it)."""

    @property
    def authorizer(self) -> Authorizer | None: ...

    async def topic_by_id(self, topic_id: uuid.UUID) -> TopicInfo | None: ...


def sender(ctx: RequestContext) -> str | None:
    """The principal of the request: its connection's, or the one a peer relayed it for
    (agent.cluster.forward); None for an in-process request with neither."""
    if ctx.conn is not None:
        return str(ctx.conn.principal)
    relayed = ctx.attrs.get("principal")
    return relayed if isinstance(relayed, str) else None


def allowed(broker: AuthSource, ctx: RequestContext, op: int, rtype: int, name: str) -> bool:
    """May the sender of ``ctx`` perform ``op`` on resource ``name`` of ``rtype``?"""
    a = broker.authorizer
    who = sender(ctx) if a is not None else None
    if a is None or who is None:
        return True
    return a.authorize(who, ctx.client_host, op, rtype, name)


def allowed_any(broker: AuthSource, ctx: RequestContext, op: int, rtype: int) -> bool:
    """May the sender ``op`` on at least one resource of ``rtype`` (authorizeByResourceType)?"""
    a = broker.authorizer
    who = sender(ctx) if a is not None else None
    if a is None or who is None:
        return True
    return a.authorize_any(who, ctx.client_host, op, rtype)


def cluster_allowed(broker: AuthSource, ctx: RequestContext, op: int) -> bool:
    return allowed(broker, ctx, op, RT.CLUSTER, "kafka-cluster")


def authorized_operations(broker: AuthSource, ctx: RequestContext, rtype: int, name: str) -> int:
    """The bit set for ``include_*_authorized_operations`` (every operation without an authorizer)."""
    a = broker.authorizer
    who = sender(ctx) if a is not None else None
    if a is None or who is None:
        bits = 0
        for op in OPERATIONS.get(rtype, ()):
            bits |= 1 << int(op)
        return bits
    return a.operations(who, ctx.client_host, rtype, name)


async def may_relay(broker: AuthSource, ctx: RequestContext, api_key: int, req: Any) -> bool:
    """Would the coordinator allow every resource of this group/transaction request?
    Asked before a request is relayed to its ring owner (agent.cluster.forward), which
    authorizes it again with the relayed principal: a request with any refused resource
    is answered here instead, by the local handler, with the exact authorization errors."""
    if broker.authorizer is None:
        return True
    v = ctx.header.api_version

    def ok(op: int, rtype: int, name: str | None) -> bool:
        return name is None or allowed(broker, ctx, op, rtype, name)

    async def topics_ok(op: int, topics: Any, by_id: bool = False) -> bool:
        for t in topics or ():
            if by_id:
                info = await broker.topic_by_id(t.topic_id)
                if info is not None and not ok(op, RT.TOPIC, info.name):
                    return False
            elif not ok(op, RT.TOPIC, t.name):
                return False
        return True

    if api_key in (11, 12, 13, 14):  # JoinGroup, Heartbeat, LeaveGroup, SyncGroup
        return ok(Op.READ, RT.GROUP, req.group_id)
    if api_key == 8:  # OffsetCommit
        return ok(Op.READ, RT.GROUP, req.group_id) and await topics_ok(Op.READ, req.topics, v >= 10)
    if api_key == 47:  # OffsetDelete
        return ok(Op.DELETE, RT.GROUP, req.group_id) and await topics_ok(Op.READ, req.topics)
    if api_key in (22, 26):  # InitProducerId (transactional), EndTxn
        return ok(Op.WRITE, RT.TRANSACTIONAL_ID, req.transactional_id or None)
    if api_key == 24:  # AddPartitionsToTxn v0-3
        return ok(Op.WRITE, RT.TRANSACTIONAL_ID, req.v3_and_below_transactional_id) and await topics_ok(
            Op.WRITE, req.v3_and_below_topics
        )
    if api_key == 25:  # AddOffsetsToTxn
        return ok(Op.WRITE, RT.TRANSACTIONAL_ID, req.transactional_id) and ok(Op.READ, RT.GROUP, req.group_id)
    if api_key == 28:  # TxnOffsetCommit
        return (
            ok(Op.WRITE, RT.TRANSACTIONAL_ID, req.transactional_id)
            and ok(Op.READ, RT.GROUP, req.group_id)
            and await topics_ok(Op.READ, req.topics)
        )
    if api_key in (68, 76):  # ConsumerGroupHeartbeat, ShareGroupHeartbeat
        return ok(Op.READ, RT.GROUP, req.group_id) and all(
            ok(Op.DESCRIBE, RT.TOPIC, t) for t in req.subscribed_topic_names or ()
        )
    if api_key == 69:  # ConsumerGroupDescribe
        return all(ok(Op.DESCRIBE, RT.GROUP, g) for g in req.group_ids)
    if api_key == 65:  # DescribeTransactions
        return all(ok(Op.DESCRIBE, RT.TRANSACTIONAL_ID, t) for t in req.transactional_ids)
    return False  # not a relayed API: answer here
