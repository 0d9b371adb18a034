"""ACL storage (issue 15): bindings in the ``acls`` table and a change counter.

Where it sits: the agent's authorizer (agent/security/authorizer.py) reads
every binding with :meth:`AclsMixin.list_acls` and re-reads them when
:meth:`AclsMixin.acl_version` moves (polled by every agent, so a change made
through one agent is enforced by all within the poll interval); the
CreateAcls/DeleteAcls handlers write through :meth:`create_acls` /
:meth:`delete_acls`. Bindings are Kafka's codes as they are on the wire; the
metastore validates nothing beyond storing them (the handlers do). Creating an
existing binding is a no-op, as in Kafka. A delete applies its filters in one
transaction; a binding matched by several filters is reported under the first.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from sqlalchemy import delete, select, update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.ext.asyncio import AsyncConnection

from metastore import schema as s
from metastore.base import SqlBase, chunks
from metastore.types import ACL_MATCH, ACL_WILDCARD, AclBinding, AclBindingFilter

_COLUMNS = (
    s.acls.c.resource_type,
    s.acls.c.resource_name,
    s.acls.c.pattern_type,
    s.acls.c.principal,
    s.acls.c.host,
    s.acls.c.operation,
    s.acls.c.permission,
)


def _binding(row: Any) -> AclBinding:
    return AclBinding(
        int(row.resource_type), row.resource_name, int(row.pattern_type), row.principal, row.host,
        int(row.operation), int(row.permission),
    )  # fmt: skip


def _claim(
    rows: list[tuple[int, AclBinding]],
    filters: Sequence[AclBindingFilter],
    out: list[list[AclBinding]],
) -> list[int]:
    """Ids of the rows some filter matches; each binding goes to ``out`` of the first
    filter matching it. Rows are looked up by name for filters that name a resource
    (exactly, or with MATCH: the name, ``*`` and its prefixes), so many filters over
    many ACLs cost one scan each only for filters without a name."""
    by_name: dict[str, list[tuple[int, AclBinding]]] = {}
    for r in rows:
        by_name.setdefault(r[1].resource_name, []).append(r)
    lengths = {
        len(n) for n in by_name
    }  # only prefixes some ACL has (not every prefix of a long name)
    claimed: set[int] = set()
    seen: set[AclBindingFilter] = set()
    for i, f in enumerate(filters):
        f = AclBindingFilter(*f)
        if f in seen:  # an identical earlier filter claimed all it matches
            continue
        seen.add(f)
        if f.resource_name is None:
            candidates: Iterable[tuple[int, AclBinding]] = rows
        elif f.pattern_type == ACL_MATCH:
            name = f.resource_name
            keys = {name[:n] for n in lengths if n <= len(name)} | {ACL_WILDCARD}
            candidates = [r for k in keys for r in by_name.get(k, ())]
        else:
            candidates = by_name.get(f.resource_name, ())
        for row_id, b in candidates:
            if row_id not in claimed and f.matches(b):
                claimed.add(row_id)
                out[i].append(b)
    return sorted(claimed)


class AclsMixin(SqlBase):
    async def _bump_acl_version(self, conn: AsyncConnection) -> None:
        v = s.acl_version.c
        res = await conn.execute(
            update(s.acl_version).where(v.id == 1).values(version=v.version + 1)
        )
        if res.rowcount == 0:
            ins: Any = pg_insert if self.dialect == "postgresql" else sqlite_insert
            await conn.execute(
                ins(s.acl_version)
                .values(id=1, version=1)
                .on_conflict_do_update(
                    index_elements=[v.id], set_={"version": s.acl_version.c.version + 1}
                )
            )

    async def create_acls(self, bindings: Sequence[AclBinding]) -> int:
        """Store ``bindings`` (existing ones are kept as they are); returns the new ACL version."""
        ins: Any = pg_insert if self.dialect == "postgresql" else sqlite_insert
        now = self.now_ms()
        async with self._write() as conn:
            if bindings:
                rows = [
                    {**AclBinding(*b)._asdict(), "created_at": now} for b in dict.fromkeys(bindings)
                ]
                await conn.execute(ins(s.acls).on_conflict_do_nothing(), rows)
            await self._bump_acl_version(conn)
            return await self._acl_version(conn)

    async def delete_acls(self, filters: Sequence[AclBindingFilter]) -> list[list[AclBinding]]:
        """Delete every binding some filter matches; per filter, the bindings it deleted
        (a binding matched by several filters is listed under the first)."""
        out: list[list[AclBinding]] = [[] for _ in filters]
        async with self._write() as conn:
            # ACL writers queue on the version row (Postgres: two deletes must not both
            # report the same binding); SQLite writers are serialised already.
            v = s.acl_version.c
            await conn.execute(select(v.version).where(v.id == 1).with_for_update())
            rows = (await conn.execute(select(s.acls.c.id, *_COLUMNS))).all()
            doomed = _claim([(row.id, _binding(row)) for row in rows], filters, out)
            for chunk in chunks(doomed, 500):
                await conn.execute(delete(s.acls).where(s.acls.c.id.in_(chunk)))
            if doomed:
                await self._bump_acl_version(conn)
        return out

    async def list_acls(self, flt: AclBindingFilter | None = None) -> tuple[int, list[AclBinding]]:
        """(ACL version, the bindings ``flt`` matches - all when None), read together."""
        async with self._read() as conn:
            version = await self._acl_version(conn)
            rows = (await conn.execute(select(*_COLUMNS).order_by(s.acls.c.id))).all()
        bindings = [_binding(r) for r in rows]
        if flt is not None:
            f = AclBindingFilter(*flt)
            bindings = [b for b in bindings if f.matches(b)]
        return version, bindings

    async def acl_version(self) -> int:
        """Counts ACL changes (0: none ever made); agents poll it to refresh their cache."""
        async with self._read() as conn:
            return await self._acl_version(conn)

    async def _acl_version(self, conn: AsyncConnection) -> int:
        v = (
            await conn.execute(select(s.acl_version.c.version).where(s.acl_version.c.id == 1))
        ).scalar()
        return int(v or 0)
