"""Read leases: objects a running reader needs, kept from the GC until a deadline.

Where it sits: a reader that planned reads (a Spark batch or micro-batch, an
agent's Kafka fetches) calls :meth:`acquire_read_lease` with the object keys
of its plan and renews it the same way while it runs; the compactor's GC takes
objects to delete only through :meth:`claim_objects_to_delete`, which skips
every object under a live lease. A reader that dies stops renewing and its
lease expires; the objects are then collected as usual.

The race between a lease and the GC is settled per object row. The GC moves
the objects it claims to ``purging`` in one transaction; a lease is never
granted on a ``purging`` (or already forgotten) object: such keys come back in
``missing`` and the reader plans again (the batch rows by then point at the
objects that replaced them). On Postgres the lease locks the object rows
``FOR SHARE`` after registering itself, and the claim locks candidates
``FOR UPDATE SKIP LOCKED`` before it reads the leases, so whichever commits
first wins cleanly; on SQLite writers are serialised anyway.
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import and_, delete, exists, func, insert, or_, select, update

from metastore import schema as s
from metastore.base import SqlBase, chunks
from metastore.types import ObjectInfo, ReadLeaseGrant, ReadLeaseInfo

_O = s.objects.c
_L = s.read_leases.c
_LO = s.read_lease_objects.c
_CHUNK = 500


class LeasesMixin(SqlBase):
    async def acquire_read_lease(
        self, lease_id: str, object_keys: Sequence[str], ttl_ms: int, *, owner: str = ""
    ) -> ReadLeaseGrant:
        """Create or renew lease ``lease_id`` until ``now + ttl_ms`` (never earlier than
        it already runs) and add ``object_keys`` to it. Keys of objects the GC claimed
        or removed are returned in ``missing`` and are not leased."""
        if not lease_id or len(lease_id) > 128:
            raise ValueError("a lease id is 1-128 characters")
        now = self.now_ms()
        until = now + max(0, int(ttl_ms))
        keys = sorted(set(object_keys))
        sizes: dict[str, int] = {}
        async with self._write() as conn:
            row = (
                await conn.execute(select(_L.expires_at).where(_L.id == lease_id))
            ).first()
            if row is None:
                await conn.execute(
                    insert(s.read_leases).values(
                        id=lease_id, owner=owner[:255], created_at=now, expires_at=until
                    )
                )
            else:
                until = max(until, int(row.expires_at))
                await conn.execute(
                    update(s.read_leases).where(_L.id == lease_id).values(expires_at=until)
                )
            ids: dict[str, int] = {}
            for chunk in chunks(keys, _CHUNK):
                rows = await conn.execute(
                    select(_O.id, _O.key, _O.size, _O.state)
                    .where(_O.key.in_(chunk))
                    .order_by(_O.id)
                    .with_for_update(read=True)
                )
                for r in rows:
                    if r.state in ("live", "deleting"):
                        ids[r.key] = int(r.id)
                        sizes[r.key] = int(r.size)
            if ids:
                have = set(
                    (
                        await conn.execute(
                            select(_LO.object_id).where(
                                _LO.lease_id == lease_id, _LO.object_id.in_(list(ids.values()))
                            )
                        )
                    ).scalars()
                )
                new = [
                    {"lease_id": lease_id, "object_id": oid}
                    for oid in sorted(ids.values())
                    if oid not in have
                ]
                if new:
                    await conn.execute(insert(s.read_lease_objects), new)
        return ReadLeaseGrant(lease_id, until, sizes, [k for k in keys if k not in sizes])

    async def release_read_lease(self, lease_id: str) -> bool:
        """End a lease now (its objects become collectable); False if it was unknown."""
        async with self._write() as conn:
            await conn.execute(delete(s.read_lease_objects).where(_LO.lease_id == lease_id))
            result = await conn.execute(delete(s.read_leases).where(_L.id == lease_id))
            return bool(result.rowcount)

    async def list_read_leases(self) -> list[ReadLeaseInfo]:
        """Every lease (live or expired and not yet swept), soonest deadline first."""
        async with self._read() as conn:
            counts = (
                select(_LO.lease_id, func.count().label("n"))
                .group_by(_LO.lease_id)
                .subquery()
            )
            rows = await conn.execute(
                select(_L.id, _L.owner, _L.created_at, _L.expires_at, counts.c.n)
                .outerjoin(counts, counts.c.lease_id == _L.id)
                .order_by(_L.expires_at, _L.id)
            )
            return [
                ReadLeaseInfo(r.id, r.owner, r.created_at, r.expires_at, int(r.n or 0))
                for r in rows
            ]

    async def claim_objects_to_delete(
        self, older_than_ms: int, limit: int = 1000
    ) -> list[ObjectInfo]:
        """Claim objects for deletion from storage: ``deleting`` since before
        ``older_than_ms`` and under no live read lease (plus any claimed earlier and
        not yet forgotten). Claimed objects are ``purging``: no lease is granted on
        them any more. Expired leases are swept here too."""
        now = self.now_ms()
        async with self._write() as conn:
            await conn.execute(
                delete(s.read_lease_objects).where(
                    _LO.lease_id.in_(select(_L.id).where(_L.expires_at <= now))
                )
            )
            await conn.execute(delete(s.read_leases).where(_L.expires_at <= now))
            candidates = list(
                await conn.execute(
                    select(_O.id)
                    .where(
                        or_(
                            _O.state == "purging",
                            and_(_O.state == "deleting", _O.deleting_since < older_than_ms),
                        )
                    )
                    .order_by(_O.deleting_since, _O.id)
                    .limit(limit)
                    .with_for_update(skip_locked=True)
                )
            )
            ids = [int(r.id) for r in candidates]
            if ids:
                leased = set(
                    (
                        await conn.execute(
                            select(_LO.object_id)
                            .join(s.read_leases, _L.id == _LO.lease_id)
                            .where(_LO.object_id.in_(ids), _L.expires_at > now)
                        )
                    ).scalars()
                )
                ids = [i for i in ids if i not in leased]
            if not ids:
                return []
            await conn.execute(
                update(s.objects)
                .where(_O.id.in_(ids), _O.state == "deleting")
                .values(state="purging")
            )
            rows = await conn.execute(
                select(s.objects).where(_O.id.in_(ids)).order_by(_O.deleting_since, _O.id)
            )
            return [
                ObjectInfo(
                    r.id, r.key, r.agent_id, r.size, r.state, r.created_at, r.deleting_since
                )
                for r in rows
            ]

    async def leased_object_count(self) -> int:
        """Objects the GC would collect but a live lease holds (for metrics)."""
        now = self.now_ms()
        async with self._read() as conn:
            held = exists().where(
                _LO.object_id == _O.id, _L.id == _LO.lease_id, _L.expires_at > now
            )
            n = (
                await conn.execute(
                    select(func.count()).select_from(s.objects).where(
                        _O.state == "deleting", held
                    )
                )
            ).scalar_one()
            return int(n)
