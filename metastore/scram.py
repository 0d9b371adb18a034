"""SCRAM credentials in the metastore (issue 15): salted, never the password.

Sits under the agent's SCRAM mechanism (agent.security.sasl.scram, which reads
a user's credential per authentication) and the AlterUserScramCredentials /
DescribeUserScramCredentials handlers and ``floe users`` (which write and list).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import delete, select
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert

from metastore import schema as s
from metastore.base import SqlBase
from metastore.types import ScramCredential


class ScramMixin(SqlBase):
    async def get_scram_credential(self, user: str, mechanism: str) -> ScramCredential | None:
        c = s.scram_credentials.c
        async with self._read() as conn:
            row = (
                await conn.execute(
                    select(s.scram_credentials).where(c.user_name == user, c.mechanism == mechanism)
                )
            ).first()
        return _cred(row) if row is not None else None

    async def put_scram_credential(self, credential: ScramCredential) -> None:
        """Create or replace ``credential.user``'s credential for its mechanism."""
        values = {
            "salt": bytes(credential.salt),
            "stored_key": bytes(credential.stored_key),
            "server_key": bytes(credential.server_key),
            "iterations": credential.iterations,
            "updated_at": self.now_ms(),
        }
        ins: Any = pg_insert if self.dialect == "postgresql" else sqlite_insert
        stmt = ins(s.scram_credentials).values(
            user_name=credential.user, mechanism=credential.mechanism, **values
        )
        stmt = stmt.on_conflict_do_update(
            index_elements=[s.scram_credentials.c.user_name, s.scram_credentials.c.mechanism], set_=values
        )
        async with self._write() as conn:
            await conn.execute(stmt)

    async def delete_scram_credential(self, user: str, mechanism: str) -> bool:
        c = s.scram_credentials.c
        async with self._write() as conn:
            result = await conn.execute(
                delete(s.scram_credentials).where(c.user_name == user, c.mechanism == mechanism)
            )
            return bool(result.rowcount)

    async def list_scram_credentials(self, users: Sequence[str] | None = None) -> list[ScramCredential]:
        """Every credential (of ``users`` when given), by user then mechanism."""
        c = s.scram_credentials.c
        q = select(s.scram_credentials).order_by(c.user_name, c.mechanism)
        if users is not None:
            q = q.where(c.user_name.in_(list(users)))
        async with self._read() as conn:
            return [_cred(r) for r in await conn.execute(q)]


def _cred(r: Any) -> ScramCredential:
    return ScramCredential(
        r.user_name, r.mechanism, bytes(r.salt), bytes(r.stored_key), bytes(r.server_key), r.iterations
    )
