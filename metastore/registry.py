"""Producer ids, the object registry (GC helpers) and the agent registry.

Object life cycle: ``commit_object`` registers an object ``live`` (or directly
``deleting`` when none of its batches was stored). When the compactor or
retention removes its last batch row, ``mark_objects_deleting`` moves it to
``deleting``; after the grace period ``objects_to_delete`` lists it, the GC
deletes it from storage and then calls ``delete_object_rows``. Objects in storage
that were never registered (a crash between PUT and commit) are found by listing
the bucket and asking ``object_key_registered``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import and_, delete, insert, select, update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection

from metastore import runs
from metastore import schema as s
from metastore.base import SqlBase
from metastore.types import AgentInfo, ErrorCode, MetastoreError, ObjectInfo, ProducerIdResult

MAX_PRODUCER_EPOCH = 32767


def _object_info(row: Any) -> ObjectInfo:
    return ObjectInfo(
        row.id, row.key, row.agent_id, row.size, row.state, row.created_at, row.deleting_since
    )


class RegistryMixin(SqlBase):
    # -- producer ids -------------------------------------------------------------

    async def _allocate_producer_id(self, conn: AsyncConnection) -> int:
        a = s.producer_id_allocator.c
        result = await conn.execute(
            update(s.producer_id_allocator)
            .where(a.id == 1)
            .values(next_producer_id=a.next_producer_id + 1)
            .returning(a.next_producer_id)
        )
        return int(result.scalar_one()) - 1

    async def init_producer_id(
        self, transactional_id: str | None = None, transaction_timeout_ms: int = 60_000
    ) -> ProducerIdResult:
        """A fresh producer id with epoch 0; for a transactional id, the same producer
        id with the epoch bumped (fencing older instances), or a new producer id
        with epoch 0 once the epoch is exhausted, as Kafka does."""
        if transactional_id is None:
            async with self._write() as conn:
                return ProducerIdResult(ErrorCode.NONE, await self._allocate_producer_id(conn), 0)
        for _attempt in range(3):
            try:
                return await self._init_transactional(transactional_id, transaction_timeout_ms)
            except MetastoreError as e:
                if not isinstance(e.__cause__, IntegrityError):  # a concurrent first init
                    raise
        raise MetastoreError(f"could not initialise transactional id {transactional_id!r}")

    async def _init_transactional(self, transactional_id: str, timeout_ms: int) -> ProducerIdResult:
        p = s.producers.c
        now = self.now_ms()
        async with self._write() as conn:
            row = (
                await conn.execute(
                    select(p.producer_id, p.producer_epoch)
                    .where(p.transactional_id == transactional_id)
                    .with_for_update()
                )
            ).first()
            if row is None:
                pid, epoch = await self._allocate_producer_id(conn), 0
                await conn.execute(
                    insert(s.producers).values(
                        transactional_id=transactional_id,
                        producer_id=pid,
                        producer_epoch=0,
                        transaction_timeout_ms=timeout_ms,
                        updated_at=now,
                    )
                )
                return ProducerIdResult(ErrorCode.NONE, pid, epoch)
            pid, epoch = row.producer_id, row.producer_epoch + 1
            if epoch >= MAX_PRODUCER_EPOCH:
                pid, epoch = await self._allocate_producer_id(conn), 0
            await conn.execute(
                update(s.producers)
                .where(p.transactional_id == transactional_id)
                .values(
                    producer_id=pid,
                    producer_epoch=epoch,
                    transaction_timeout_ms=timeout_ms,
                    updated_at=now,
                )
            )
            return ProducerIdResult(ErrorCode.NONE, pid, epoch)

    # -- objects --------------------------------------------------------------------

    async def object_key_registered(self, key: str) -> bool:
        async with self._read() as conn:
            found = await conn.execute(select(s.objects.c.id).where(s.objects.c.key == key))
            return found.first() is not None

    async def get_object(self, key: str) -> ObjectInfo | None:
        async with self._read() as conn:
            row = (await conn.execute(select(s.objects).where(s.objects.c.key == key))).first()
            return _object_info(row) if row is not None else None

    async def mark_objects_deleting(
        self, *, keys: Sequence[str] | None = None, created_before_ms: int | None = None
    ) -> list[str]:
        """Move live objects that no batch references any more to ``deleting`` (those
        among ``keys``, or all created before ``created_before_ms``). Objects still
        referenced are left alone. Returns the keys marked."""
        o = s.objects.c
        unreferenced = runs.unreferenced()
        where = [o.state == "live", unreferenced]
        if keys is not None:
            if not keys:
                return []
            where.append(o.key.in_(list(keys)))
        if created_before_ms is not None:
            where.append(o.created_at < created_before_ms)
        now = self.now_ms()
        async with self._write() as conn:
            result = await conn.execute(
                update(s.objects)
                .where(and_(*where))
                .values(state="deleting", deleting_since=now)
                .returning(o.key)
            )
            return sorted(result.scalars())

    async def objects_to_delete(self, older_than_ms: int, limit: int = 1000) -> list[ObjectInfo]:
        """Objects in ``deleting`` since before ``older_than_ms`` (past the grace period)."""
        o = s.objects.c
        async with self._read() as conn:
            rows = await conn.execute(
                select(s.objects)
                .where(o.state == "deleting", o.deleting_since < older_than_ms)
                .order_by(o.deleting_since, o.id)
                .limit(limit)
            )
            return [_object_info(row) for row in rows]

    async def delete_object_rows(self, keys: Sequence[str]) -> int:
        """Forget objects deleted from storage; only ``deleting``/``purging`` objects that
        no batch references are removed (with their lease entries). Returns how many
        rows went."""
        if not keys:
            return 0
        o = s.objects.c
        async with self._write() as conn:
            result = await conn.execute(
                delete(s.objects)
                .where(
                    o.key.in_(list(keys)),
                    o.state.in_(("deleting", "purging")),
                    runs.unreferenced(),
                )
                .returning(o.id)
            )
            gone = list(result.scalars())
            if gone:
                lo = s.read_lease_objects.c
                await conn.execute(delete(s.read_lease_objects).where(lo.object_id.in_(gone)))
            return len(gone)

    # -- agents ---------------------------------------------------------------------

    async def register_agent(
        self,
        agent_id: str,
        host: str,
        port: int,
        zone: str | None = None,
        *,
        peer_host: str | None = None,
        peer_port: int | None = None,
        instance: str | None = None,
        live_since_ms: int | None = None,
        endpoints: str | None = None,
    ) -> AgentInfo | None:
        """Claim ``agent_id`` for process ``instance``, atomically.

        The row is written when it is absent, already ours (same instance, or no
        instance given), or stale (last heartbeat before ``live_since_ms``).
        Otherwise another live process holds the id: nothing is written and its
        row is returned, so the caller can refuse to start. None means claimed."""
        now = self.now_ms()
        values = {
            "host": host,
            "port": port,
            "zone": zone,
            "registered_at": now,
            "heartbeat_at": now,
            "peer_host": peer_host,
            "peer_port": peer_port,
            "instance": instance,
            "endpoints": endpoints,
        }
        a = s.agents.c
        where: Any = None
        if instance is not None and live_since_ms is not None:
            where = (
                (a.instance.is_(None)) | (a.instance == instance) | (a.heartbeat_at < live_since_ms)
            )
        stmt: Any = (pg_insert if self.dialect == "postgresql" else sqlite_insert)(s.agents).values(
            id=agent_id, **values
        )
        stmt = stmt.on_conflict_do_update(
            index_elements=[s.agents.c.id], set_=values, where=where
        ).returning(a.id)
        async with self._write() as conn:
            if (await conn.execute(stmt)).first() is not None:
                return None
            row = (await conn.execute(select(*_AGENT_COLUMNS).where(a.id == agent_id))).first()
        return _agent_info(row) if row is not None else None

    async def heartbeat(
        self, agent_id: str, instance: str | None = None, observations: str | None = None
    ) -> bool:
        """Record a heartbeat; False when the agent is not registered (by ``instance``).
        ``observations`` (agent.cluster.isolation's JSON) replaces the published one
        when given; None leaves it as it is."""
        a = s.agents.c
        where = [a.id == agent_id] + ([a.instance == instance] if instance is not None else [])
        values: dict[str, Any] = {"heartbeat_at": self.now_ms()}
        if observations is not None:
            values["observations"] = observations
        async with self._write() as conn:
            result = await conn.execute(update(s.agents).where(*where).values(**values))
            return bool(result.rowcount)

    async def deregister_agent(self, agent_id: str, instance: str | None = None) -> None:
        """Remove the agent's row (only ``instance``'s, when given: a stopping old
        process never removes the row of the new one)."""
        a = s.agents.c
        where = [a.id == agent_id] + ([a.instance == instance] if instance is not None else [])
        async with self._write() as conn:
            await conn.execute(delete(s.agents).where(*where))

    async def live_agents(self, since_ms: int) -> list[AgentInfo]:
        """Agents whose last heartbeat is at or after ``since_ms``, by id."""
        a = s.agents.c
        async with self._read() as conn:
            rows = await conn.execute(
                select(*_AGENT_COLUMNS).where(a.heartbeat_at >= since_ms).order_by(a.id)
            )
            return [_agent_info(r) for r in rows]

    # -- the cluster's identity ---------------------------------------------------

    async def claim_cluster_id(self, cluster_id: str | None) -> str | None:
        """The cluster id stored in this metastore. The first caller that passes one
        stores it (concurrent first callers: one wins, all read the winner's);
        ``None`` asks without storing. Returns ``None`` when none is stored yet."""
        c = s.cluster.c
        async with self._write() as conn:
            stored = (
                await conn.execute(select(c.cluster_id).where(c.id == 1))
            ).scalar_one_or_none()
            if stored is not None or cluster_id is None:
                return stored
            ins: Any = pg_insert if self.dialect == "postgresql" else sqlite_insert
            await conn.execute(
                ins(s.cluster)
                .values(id=1, cluster_id=cluster_id, created_at=self.now_ms())
                .on_conflict_do_nothing(index_elements=[c.id])
            )
            return (await conn.execute(select(c.cluster_id).where(c.id == 1))).scalar_one()


_AGENT_COLUMNS = (
    s.agents.c.id,
    s.agents.c.host,
    s.agents.c.port,
    s.agents.c.zone,
    s.agents.c.heartbeat_at,
    s.agents.c.peer_host,
    s.agents.c.peer_port,
    s.agents.c.instance,
    s.agents.c.endpoints,
    s.agents.c.observations,
)


def _agent_info(r: Any) -> AgentInfo:
    return AgentInfo(
        r.id,
        r.host,
        r.port,
        r.zone,
        r.heartbeat_at,
        r.peer_host,
        r.peer_port,
        r.instance,
        r.endpoints,
        r.observations,
    )
